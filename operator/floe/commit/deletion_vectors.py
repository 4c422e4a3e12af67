"""One deletion vector per data file, checked on the files a new snapshot keeps live before its commit."""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.manifest import DataFile

from floe.tables.manifest_io import content_key, deletion_vector_location


class DuplicateDeletionVectors(RuntimeError):
    """A new snapshot would hold two live deletion vectors for one data file; it was not committed."""


def check_one_vector_per_data_file(table_name: str, live: Iterable[DataFile]) -> None:
    """Raise `DuplicateDeletionVectors` when `live`, the content files a new snapshot keeps live
    (carried and added), hold two deletion vectors for one data file.

    Iceberg Java refuses such a commit (MergingSnapshotProducer.validateAddedDVs: "Found
    concurrently added DV") and its scan fails on such a snapshot ("Can't index multiple DVs").
    """
    seen: dict[str, str] = {}
    for content_file in live:
        vector = deletion_vector_location(content_file)
        if vector is None:
            continue
        key = content_key(content_file)
        first = seen.setdefault(vector[0], key)
        if first != key:
            raise DuplicateDeletionVectors(
                f"table {table_name}: the new snapshot would hold two deletion vectors for data file "
                f"{vector[0]} ({first} and {key}); nothing was committed"
            )
