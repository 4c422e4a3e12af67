"""The checker: each snapshot of a table, in order, read by Iceberg Java and judged by the oracle.

For every snapshot it could read (by id, through Spark's time travel, before expiry removed it):
- the rows are the oracle's for that snapshot (no row lost, duplicated or brought back);
- no data file has two deletion vectors (from the snapshot's manifests);
- on v3, ``_row_id`` is set and unique, and a row no writer touched since the last snapshot read
  keeps its ``_row_id`` (across floe's and the other engine's rewrites).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from floe.local.reference_reader import ReferenceReader

from .oracle import Expected, TableOracle
from .report import Failure, Figures
from .rows import Rows
from .snapshots import History, Kind, Snap
from .writers import SoakTable, error_line

LINEAGE_LINES = 4


class Checker:
    """Judges one table's snapshots as they come."""

    def __init__(
        self,
        seed: int,
        table: SoakTable,
        history: History,
        oracle: TableOracle,
        reference: ReferenceReader,
        failures: list[Failure],
    ) -> None:
        """Check ``table``'s snapshots (recorded in ``history``) against ``oracle``."""
        self.seed = seed
        self.table = table
        self.history = history
        self.oracle = oracle
        self.reference = reference
        self.failures = failures
        self.figures = Figures()
        self._next = 1
        self._expected = Expected(Counter())
        self._lineage: dict[int, int] | None = None
        self._touched: set[int] = set()
        self._read_rows: dict[int, Rows] = {}

    def advance(self) -> bool:
        """Check every snapshot whose turn has come; returns whether any was."""
        progressed = False
        while True:
            snap = self.history.get(self._next)
            if snap is None:
                if self.history.last_sequence() <= self._next:
                    return progressed
                # Made and expired between two looks: a rewrite or retention (a writer's snapshot is
                # seen right after its commit), so only the ancient rows become uncertain.
                self.figures.snapshots_unobserved += 1
                self._expected = self._expected.after_retention()
            else:
                expected = self._expected_of(snap)
                if expected is None:
                    return progressed  # a writer's snapshot the driver has not recorded yet
                self.figures.snapshots_seen += 1
                self._check(snap, expected)
            self._next += 1
            progressed = True

    def recheck_retained(self) -> None:
        """Read every snapshot the table still has again: expiry and orphan cleanup must have left
        each one whole (the rows it had when it was checked)."""
        for snap in self.history.all():
            before = self._read_rows.get(snap.snapshot_id)
            if before is None or snap.snapshot_id not in self.history.live_ids():
                continue
            read = self._read(snap)
            if read is not None and read[0] != before:
                lines = Expected(before).differences(read[0])
                self._fail(snap, ["a retained snapshot no longer reads as it did when checked:", *lines])

    def unrecorded(self) -> list[Snap]:
        """Writer snapshots no operation claimed (after the writers stopped, each is a failure)."""
        return [
            s
            for s in self.history.all()
            if s.kind is Kind.WRITER
            and s.sequence >= self._next
            and self.oracle.op_for(s.snapshot_id) is None
        ]

    def _expected_of(self, snap: Snap) -> Expected | None:
        if snap.kind is Kind.WRITER:
            op = self.oracle.op_for(snap.snapshot_id)
            if op is None:
                return None
            self._touched |= op.touched
            return self._expected.after(op)
        if snap.kind is Kind.RETENTION:
            return self._expected.after_retention()
        return self._expected

    def _check(self, snap: Snap, expected: Expected) -> None:
        lines = self._deletion_vectors(snap)
        read = self._read(snap)
        if read is None:
            self._expected = expected
            if lines is None:
                self.figures.snapshots_expired_first += 1
            return
        rows, row_ids = read
        self._read_rows[snap.snapshot_id] = rows
        self.figures.snapshots_checked += 1
        lines = [*(lines or []), *expected.differences(rows)]
        if row_ids is not None:
            lines += self._lineage_problems(row_ids)
        if lines:
            self._fail(snap, lines)
        # From here on the oracle follows what was read: a failure is reported once, and what
        # follows is judged on its own.
        self._expected = Expected(rows)

    def _fail(self, snap: Snap, lines: list[str]) -> None:
        op = self.oracle.op_for(snap.snapshot_id) if snap.kind is Kind.WRITER else None
        where = snap.describe() + (f", committing {op.describe()}" if op is not None else "")
        self.failures.append(Failure(self.seed, self.table.identifier, where, tuple(lines)))

    def _read(self, snap: Snap) -> tuple[Rows, list[tuple[int, Any]] | None] | None:
        """The snapshot's rows (and ``_row_id``s on v3) as Iceberg Java reads them; None when it was
        expired first. A snapshot that is still there but cannot be read is a failure."""
        lineage = ", _row_id" if self.table.version >= 3 else ""
        query = f"SELECT *{lineage} FROM {self.table.spark_name} VERSION AS OF {snap.snapshot_id}"
        error = ""
        for _ in range(2):
            try:
                result = self.reference.sql(query)
            except Exception as exc:  # whatever Java says: expired first, or a failure
                if snap.snapshot_id not in self.history.live_ids():
                    return None
                error = error_line(exc)
                continue
            rows: Rows = Counter(tuple(r[:5]) for r in result)
            return rows, ([(r[0], r[5]) for r in result] if lineage else None)
        self._fail(snap, [f"Iceberg Java cannot read the snapshot: {error}"])
        return None

    def _deletion_vectors(self, snap: Snap) -> list[str] | None:
        """Data files with more than one deletion vector, as Iceberg Java lists the snapshot's live
        delete files from its manifests; None if the snapshot was expired first."""
        if self.table.version < 3:
            return []
        query = (
            f"SELECT referenced_data_file, count(*) FROM {self.table.spark_name}.delete_files "
            f"VERSION AS OF {snap.snapshot_id} WHERE file_format = 'PUFFIN' "
            "GROUP BY referenced_data_file HAVING count(*) > 1"
        )
        try:
            found = self.reference.sql(query)
        except Exception as exc:  # expired first, or a failure
            if snap.snapshot_id not in self.history.live_ids():
                return None
            return [f"Iceberg Java cannot list the snapshot's delete files: {error_line(exc)}"]
        return [f"data file {path} has {n} deletion vectors" for path, n in sorted(found)][:LINEAGE_LINES]

    def _lineage_problems(self, pairs: list[tuple[int, Any]]) -> list[str]:
        """Problems of the (key, ``_row_id``) pairs just read."""
        row_ids = [row_id for _, row_id in pairs]
        lines: list[str] = []
        if any(i is None for i in row_ids):
            lines.append(f"{sum(1 for i in row_ids if i is None)} row(s) without _row_id")
        duplicated = [i for i, n in Counter(row_ids).items() if n > 1 and i is not None]
        if duplicated:
            lines.append(f"_row_id not unique: {sorted(duplicated)[:LINEAGE_LINES]}")
        current = dict(pairs)
        if self._lineage is not None:
            changed = [
                f"id={key}: _row_id {self._lineage[key]} became {current[key]}"
                for key in sorted(current.keys() & self._lineage.keys() - self._touched)
                if current[key] != self._lineage[key]
            ]
            if changed:
                lines.append(f"{len(changed)} untouched row(s) lost their _row_id:")
                lines += [f"  {line}" for line in changed[:LINEAGE_LINES]]
        self._lineage, self._touched = current, set()
        return lines
