"""One maintenance job on a table registered in pyiceberg's in-memory catalog, in a process of its own.

The in-memory catalog (a SQL catalog on an in-memory SQLite database) lives only as long as the
process that made it, so ``floe optimize`` cannot reach it. This runs what that command runs
(`run_maintenance_job`) on a fresh process: it registers the table at a metadata location,
runs the job and prints the table's new metadata location, for the test to read the result
with Iceberg Java. Usage: ``python in_memory_maintenance.py WAREHOUSE METADATA JOB SPEC_JSON``.
"""

from __future__ import annotations

import json
import sys
import time

from pyiceberg.catalog import load_catalog

from floe.api.table import MaintenanceSpec
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.jobs import run_maintenance_job


def main(argv: list[str]) -> None:
    """Register, run the job, print the new metadata location."""
    warehouse, metadata, job, spec = argv
    catalog = load_catalog("memory", type="in-memory", warehouse=warehouse)
    catalog.create_namespace("db")
    table = catalog.register_table("db.t", metadata)
    report = run_maintenance_job(
        table, MaintenanceJob(job), MaintenanceSpec.model_validate(json.loads(spec)), now_s=time.time()
    )
    print(report.summary, file=sys.stderr)
    print(catalog.load_table("db.t").metadata_location)


if __name__ == "__main__":
    main(sys.argv[1:])
