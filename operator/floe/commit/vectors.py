"""At most one deletion vector per data file: a rule every commit that writes vectors keeps."""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.manifest import DataFile

from floe.commit.snapshot import SnapshotRefused
from floe.tables.manifest_io import content_key, deletion_vector_location


class SecondDeletionVector(SnapshotRefused):
    """The snapshot would hold two live deletion vectors for one data file; it was not committed."""


def check_one_vector_per_data_file(table_name: str, live: Iterable[DataFile]) -> None:
    """Raise SecondDeletionVector when `live`, the content files a new snapshot would hold (those
    carried over and those added), hold two deletion vectors for one data file; one vector listed
    twice is one.

    The spec allows one vector per data file. Iceberg Java refuses a commit that adds a second
    (MergingSnapshotProducer.validateAddedDVs: "Found concurrently added DV"), and its scan
    fails on a table that has one (DeleteFileIndex: "Can't index multiple DVs").
    """
    seen: dict[str, str] = {}
    for content_file in live:
        vector = deletion_vector_location(content_file)
        if vector is None:
            continue
        key = content_key(content_file)
        first = seen.setdefault(vector[0], key)
        if first != key:
            raise SecondDeletionVector(
                f"table {table_name}: the new snapshot would hold two deletion vectors for data file "
                f"{vector[0]} ({first} and {key})"
            )
