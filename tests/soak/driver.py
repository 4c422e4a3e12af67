"""The soak's driver: per seed, tables created, writers driven one operation at a time while floe
and the other engine work, each snapshot checked; then the figures and failures of all seeds.

One driver thread serializes the writers' operations, so the snapshot each one committed (or that
it committed none) is known at once from the table's history. The other engine's maintenance and
the checker have threads of their own, and floe runs in its own process.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from floe.local.reference_reader import ReferenceReader

from .background import Loop
from .checker import Checker
from .choices import Choices
from .flink import FlinkHelper
from .floe_run import FloeRun
from .maintainer import SparkMaintainer
from .oracle import TableOracle
from .report import Failure, Figures
from .snapshots import History, Kind
from .writers import Conflict, SoakTable, Writers, error_line

MAX_FAILURES_PER_SEED = 20
DRAIN_QUIET_S = 6.0
POLL_S = 0.3

_catalog_numbers = itertools.count()


@dataclass
class Report:
    """What the soak found."""

    figures: Figures = field(default_factory=Figures)
    failures: list[Failure] = field(default_factory=list)
    notes: list[Failure] = field(default_factory=list)
    """floe's Warning Events on a seed's tables after they left it (a job cut short then): shown,
    not failures of the soak."""

    def describe(self) -> str:
        """The figures, then every failure with its seed."""
        lines = ["soak figures:", self.figures.describe()]
        if self.failures:
            seeds = sorted({f.seed for f in self.failures})
            lines.append(f"{len(self.failures)} failure(s), seeds {', '.join(map(str, seeds))}:")
            lines += [f.describe() for f in self.failures]
        else:
            lines.append("no failure")
        if self.notes:
            lines.append("after the tables left floe (not failures):")
            lines += [n.describe() for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Settings:
    """How long and on which seeds the soak runs."""

    seeds: list[int]
    seconds_per_seed: float
    drain_s: float = 30.0
    """After the writes, how long floe may go on before the seed's tables leave it."""
    flink_home: Path | None = None
    """Flink's virtualenv and jars (``scripts/flink/build.sh``); None leaves Flink out."""


def seed_tables(catalog: str, seed: int) -> list[SoakTable]:
    """A v2 and a v3 table, one partitioned and one not (which one alternates with the seed)."""
    return [
        SoakTable(
            catalog,
            f"s{seed}",
            f"v{version}_{'part' if (seed + version) % 2 else 'flat'}",
            version,
            bool((seed + version) % 2),
        )
        for version in (2, 3)
    ]


class Soak:
    """One soak session: a catalog that pyiceberg, Iceberg Java and floe share, ``floe run`` over it,
    and the Flink helper when there is one."""

    def __init__(
        self, spark: SparkSession, reference: ReferenceReader, workdir: Path, settings: Settings
    ) -> None:
        """Prepare the catalog under ``workdir``; nothing runs before ``running``."""
        self.spark = spark
        self.reference = reference
        self.settings = settings
        self.catalog_name = f"soak_{os.getpid()}_{next(_catalog_numbers)}"
        database = workdir / "catalog.db"
        warehouse = (workdir / "warehouse").as_uri()
        self.properties = {"type": "sql", "uri": f"sqlite:///{database}", "warehouse": warehouse}
        self.catalog = SqlCatalog(self.catalog_name, uri=self.properties["uri"], warehouse=warehouse)
        reference.register_sql_catalog(self.catalog_name, database, warehouse)
        self.floe = FloeRun(workdir / "floe", self.catalog_name, self.properties)
        self.flink = (
            FlinkHelper(settings.flink_home, self.catalog_name, self.properties, workdir / "flink")
            if settings.flink_home is not None
            else None
        )

    @contextmanager
    def running(self) -> Iterator[Soak]:
        """``floe run`` (and the Flink helper) started, stopped on the way out."""
        self.floe.start()
        try:
            if self.flink is not None:
                self.flink.start()
            yield self
        finally:
            if self.flink is not None:
                self.flink.stop()
            self.floe.stop()
            self.catalog.engine.dispose()

    def run(self) -> Report:
        """Every seed of the settings, one after the other."""
        report = Report()
        for seed in self.settings.seeds:
            figures, failures, notes = self.run_seed(seed)
            print(
                f"soak: seed {seed}: {figures.snapshots_checked} snapshots checked in "
                f"{figures.seconds / 60:.1f} min, {len(failures)} failure(s)",
                file=sys.stderr,
                flush=True,
            )
            report.figures.add(figures)
            report.failures += failures
            report.notes += notes
        return report

    def run_seed(self, seed: int) -> tuple[Figures, list[Failure], list[Failure]]:
        """Write, maintain and check the seed's tables for ``seconds_per_seed``; returns the
        figures, the failures and the notes."""
        started = time.monotonic()
        tables = seed_tables(self.catalog_name, seed)
        self.catalog.create_namespace(f"s{seed}")
        for table in tables:
            self.spark.sql(table.create_sql())
            self.spark.sql(f"ALTER TABLE {table.spark_name} SET IDENTIFIER FIELDS id, cat")
        failures: list[Failure] = []
        oracles = {t.identifier: TableOracle() for t in tables}
        histories = {t.identifier: History(self.catalog, t.identifier) for t in tables}
        checkers = [
            Checker(seed, t, histories[t.identifier], oracles[t.identifier], self.reference, failures)
            for t in tables
        ]
        writers = Writers(self.spark, self.catalog, self.flink)
        figures = Figures(seeds=[seed])
        self.floe.add(seed, tables)
        maintainer = SparkMaintainer(self.spark, tables, seed)
        checking = _checking(checkers, failures, seed)
        checking.start()
        maintainer.start()
        try:
            self._write(seed, tables, writers, oracles, histories, figures, failures)
        finally:
            maintainer.stop()
        figures.maintenance_runs.update(maintainer.runs)
        figures.conflicts.update(maintainer.conflicts)
        for table, procedure, error in maintainer.errors:
            failures.append(Failure(seed, table.identifier, f"Spark's {procedure}", (error,)))
        self._drain(histories, checkers, self.settings.drain_s)
        failures += self._floe_failures(seed, figures)
        self.floe.remove(seed)
        self._drain(histories, checkers, DRAIN_QUIET_S)
        checking.stop()
        for checker in checkers:
            checker.history.poll()
            checker.advance()
            checker.recheck_retained()
            figures.add(checker.figures)
            for snap in checker.unrecorded():
                failures.append(
                    Failure(
                        seed,
                        checker.table.identifier,
                        snap.describe(),
                        ("a writer snapshot no operation committed",),
                    )
                )
            figures.commits.update(s.job for s in checker.history.all() if s.kind is not Kind.WRITER)
        notes = self._floe_failures(seed, figures)
        problem = self.floe.problem()
        if problem is not None:
            failures.append(Failure(seed, "-", "floe run", tuple(problem.splitlines())))
        figures.seeds = [seed]
        figures.seconds = time.monotonic() - started
        return figures, failures, notes

    def _write(
        self,
        seed: int,
        tables: list[SoakTable],
        writers: Writers,
        oracles: dict[str, TableOracle],
        histories: dict[str, History],
        figures: Figures,
        failures: list[Failure],
    ) -> None:
        choices = Choices(seed, tables, {t.identifier: writers.names(t.version) for t in tables})
        deadline = time.monotonic() + self.settings.seconds_per_seed
        while time.monotonic() < deadline and len(failures) < MAX_FAILURES_PER_SEED:
            if self.floe.problem() is not None:
                return
            table, op = choices.next(oracles)
            history, oracle = histories[table.identifier], oracles[table.identifier]
            history.poll()
            before = history.last_sequence()
            error: str | None = None
            conflict = False
            try:
                writers.commit(table, op)
            except Conflict:
                conflict = True
            except Exception as exc:  # a writer failing other than by a conflict is a finding
                error = error_line(exc)
            history.poll()
            landed = [
                s
                for s in history.all()
                if s.sequence > before and s.kind is Kind.WRITER and oracle.op_for(s.snapshot_id) is None
            ]
            where = f"operation {op.describe()}"
            if len(landed) > 1:
                failures.append(
                    Failure(
                        seed, table.identifier, where, (f"{len(landed)} writer snapshots for one operation",)
                    )
                )
            oracle.record(op, landed[0].snapshot_id if landed else None)
            if landed:
                figures.commits[op.writer] += 1
            elif conflict:
                figures.conflicts[op.writer] += 1
            elif error is None:
                failures.append(
                    Failure(seed, table.identifier, where, ("the writer succeeded but no snapshot appeared",))
                )
            if error is not None:
                failures.append(Failure(seed, table.identifier, where, (f"the writer failed: {error}",)))

    def _floe_failures(self, seed: int, figures: Figures) -> list[Failure]:
        """floe's Warning Events on the seed's tables other than lost races (those are counted as
        conflicts), one failure per table and reason, with its first message."""
        counts: Counter[tuple[str, str]] = Counter()
        first: dict[tuple[str, str], str] = {}
        for warning in self.floe.warnings():
            if warning.conflict:
                figures.conflicts[f"floe:{warning.reason}"] += 1
            elif warning.table.startswith(f"default/s{seed}-"):
                counts[(warning.table, warning.reason)] += 1
                first.setdefault((warning.table, warning.reason), warning.message)
        return [
            Failure(
                seed, table, f"floe's {reason} event", (f"posted {n} time(s), first: {first[table, reason]}",)
            )
            for (table, reason), n in sorted(counts.items())
        ]

    def _drain(self, histories: dict[str, History], checkers: list[Checker], seconds: float) -> None:
        """Wait until no table got a snapshot for a while (at most ``seconds``)."""
        deadline = time.monotonic() + seconds
        last = {k: -1 for k in histories}
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            now = {k: h.last_sequence() for k, h in histories.items()}
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= DRAIN_QUIET_S:
                return
            time.sleep(POLL_S)


def _checking(checkers: list[Checker], failures: list[Failure], seed: int) -> Loop:
    """A loop that polls the seed's tables and checks their new snapshots."""
    broken: list[bool] = []

    def step() -> float:
        if broken:
            return POLL_S
        progressed = False
        try:
            for checker in checkers:
                checker.history.poll()
                progressed |= checker.advance()
        except Exception as exc:  # the checker itself failed: say so rather than pass silently
            broken.append(True)
            failures.append(Failure(seed, "-", "the checker", (f"{type(exc).__name__}: {exc}",)))
        return 0.0 if progressed else POLL_S

    return Loop(f"checker-{seed}", step)


def run_soak(spark: SparkSession, reference: ReferenceReader, workdir: Path, settings: Settings) -> Report:
    """Run the soak's seeds with ``floe run`` (and Flink, if given) over one catalog in ``workdir``."""
    soak = Soak(spark, reference, workdir, settings)
    with soak.running():
        return soak.run()
