"""Which maintenance jobs have nothing to do on a table's metadata, seen while it is evaluated.

A refresh that evaluates a table has just read its metadata, its manifest list and its live
files. From them alone some jobs can be seen to have nothing to do on that metadata file,
however long it stays: such a job is not run (and does not load the table again) until the
metadata file moves. Over a catalog of idle tables this spares most of the first hour's
jobs (three table loads per table) and their status writes.
"""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table.metadata import TableMetadata

from floe.api.table import MaintenanceSpec
from floe.maintenance.expire import nothing_ages_out
from floe.maintenance.job import MaintenanceJob
from floe.planning.files import TableFiles


def settled_jobs(
    metadata: TableMetadata, files: TableFiles, manifests: list[ManifestFile], spec: MaintenanceSpec
) -> frozenset[MaintenanceJob]:
    """The jobs with nothing to do on `metadata`, whose current snapshot has the live `files` in
    its `manifests`:

    - dangling deletes, when there is no delete file at all;
    - manifests, when fewer data manifests than the rewrite's trigger exist, small or not;
    - expiry, when every snapshot is kept whatever its age (`nothing_ages_out`).
    """
    settled = set()
    if not files.delete_files:
        settled.add(MaintenanceJob.DANGLING_DELETES)
    data_manifests = sum(1 for m in manifests if m.content == ManifestContent.DATA)
    if data_manifests < spec.manifests.trigger_small_manifests:
        settled.add(MaintenanceJob.MANIFESTS)
    retention = spec.snapshot_retention
    if nothing_ages_out(metadata, retention.min_snapshots, retention.max_age):
        settled.add(MaintenanceJob.EXPIRE)
    return frozenset(settled)
