"""Another engine's maintenance, on its own thread: Spark's ``rewrite_data_files``,
``rewrite_position_delete_files`` and ``expire_snapshots`` procedures on the seed's tables, at
times of the seed's choosing, while the writers write and floe maintains. None of them may change
a row.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from .background import Loop
from .writers import SoakTable, error_line, is_conflict

# Spark's ExpireSnapshotsSparkAction lists the files to delete from the metadata it loaded before
# its commit, so the manifest lists and manifests of snapshots floe expired meanwhile are gone when
# it reads them: a race between two expiring engines, not a lost file (the checker reads every
# snapshot still in the table again at the end of the seed).
EXPIRY_RACE = "NotFoundException"
# Snapshots younger than this are never expired by the other engine: the driver finds a writer's
# snapshot at once, the checker reads most before they go.
EXPIRE_OLDER_THAN_S = 30


class SparkMaintainer:
    """Runs Spark's maintenance procedures on ``tables`` until stopped."""

    def __init__(self, spark: SparkSession, tables: list[SoakTable], seed: int) -> None:
        """Maintain ``tables`` with ``spark``; what runs when follows ``seed``."""
        self.spark = spark
        self.tables = tables
        self._rng = random.Random(f"maintainer-{seed}")
        self._loop = Loop(f"spark-maintenance-{seed}", self._step, self._wait())
        self.runs: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        self.errors: list[tuple[SoakTable, str, str]] = []
        """(table, procedure, error) of the runs that failed other than by a conflict."""

    def start(self) -> None:
        """Start the thread."""
        self._loop.start()

    def stop(self) -> None:
        """Stop after the procedure running now, and wait for it."""
        self._loop.stop()

    def _wait(self) -> float:
        return self._rng.uniform(1.0, 4.0)

    def _step(self) -> float:
        table = self._rng.choice(self.tables)
        procedure, call = self._next_call(table)
        try:
            self.spark.sql(call).collect()
        except Exception as exc:  # a conflict is counted; anything else is reported
            if is_conflict(exc) or (procedure == "expire_snapshots" and EXPIRY_RACE in str(exc)):
                self.conflicts[f"spark:{procedure}"] += 1
            else:
                self.errors.append((table, procedure, error_line(exc)))
        else:
            self.runs[f"spark:{procedure}"] += 1
        return self._wait()

    def _next_call(self, table: SoakTable) -> tuple[str, str]:
        name = f"'{table.identifier}'"
        system = f"`{table.catalog}`.system"
        roll = self._rng.random()
        if roll < 0.45:
            target = self._rng.choice([1024, 16 * 1024, 256 * 1024])
            options = {
                "min-input-files": str(self._rng.choice([2, 3])),
                "target-file-size-bytes": str(target),
                "delete-file-threshold": "1",
            }
            if self._rng.random() < 0.3:
                options["rewrite-all"] = "true"
            listed = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
            return (
                "rewrite_data_files",
                f"CALL {system}.rewrite_data_files(table => {name}, options => map({listed}))",
            )
        if roll < 0.6 and table.version == 2:
            return (
                "rewrite_position_delete_files",
                f"CALL {system}.rewrite_position_delete_files(table => {name}, "
                "options => map('rewrite-all', 'true'))",
            )
        older_than = datetime.now(UTC) - timedelta(seconds=EXPIRE_OLDER_THAN_S)
        stamp = older_than.strftime("%Y-%m-%d %H:%M:%S")
        return (
            "expire_snapshots",
            f"CALL {system}.expire_snapshots(table => {name}, older_than => TIMESTAMP '{stamp}', "
            "retain_last => 1)",
        )
