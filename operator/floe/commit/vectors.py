"""At most one deletion vector per data file: a rule every commit that writes vectors keeps."""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.manifest import DataFile

from floe.commit.snapshot import SnapshotRefused
from floe.tables.manifest_io import content_key, deletion_vector_location


class SecondDeletionVector(SnapshotRefused):
    """The snapshot would hold two live deletion vectors for one data file."""


def check_one_vector_per_data_file(live_deletes: Iterable[DataFile]) -> None:
    """Raise SecondDeletionVector when two of `live_deletes` (the live delete files a new snapshot
    would hold: those carried over and those added) are deletion vectors of the same data file.

    The spec allows one vector per data file. Iceberg Java refuses a commit that adds a second
    (MergingSnapshotProducer.validateAddedDVs: "Found concurrently added DV"), and its scan
    fails on a table that has one (DeleteFileIndex: "Can't index multiple DVs").
    """
    seen: dict[str, str] = {}
    for delete in live_deletes:
        vector = deletion_vector_location(delete)
        if vector is None:
            continue
        target, key = vector[0], content_key(delete)
        if target in seen:
            raise SecondDeletionVector(
                f"data file {target} would have two deletion vectors, {seen[target]} and {key}"
            )
        seen[target] = key
