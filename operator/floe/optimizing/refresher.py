"""Refreshing the engine's tables: which are due, one probe per catalog where it can tell every
table's metadata file, loads within a round's budget, evaluation and planning of what is
found, refusal of tables floe cannot optimize safely, and the pending flag each group's
scheduler plans by."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from floe.api.table import CatalogRef
from floe.api.table_properties import InvalidTableProperty
from floe.maintenance.settled import settled_jobs
from floe.optimizing.catalog_access import CatalogAccess, CatalogKey
from floe.optimizing.catalog_sweeps import CatalogSweep
from floe.optimizing.evaluation import Evaluation
from floe.optimizing.refresh_cadence import PACE_GAPS, CommitPace, RefreshCadence
from floe.optimizing.registry import TableRegistry
from floe.optimizing.table_state import INVALID_TABLE_PROPERTY, UNSUPPORTED, TableRuntime, TableState
from floe.planning.files import TableFiles
from floe.planning.health import table_health
from floe.planning.planner import plan_optimizing
from floe.planning.triggers import time_trigger_s
from floe.rewrite.parquet_options import check_write_properties
from floe.tables.catalog import CatalogConfigError, CatalogUnreachable, TableAccessError
from floe.tables.history import data_commit_times, optimizing_history
from floe.tables.request_budget import BudgetExhausted, Priority, calls_for
from floe.tables.support import UnsupportedTableError, scan_supported

QUIET = (TableState.IDLE, TableState.DISABLED)
"""States in which a table's checks may follow its changes; in any other it has work queued."""


class TableRefresher:
    """Brings the engine's picture of each table up to date with its catalog."""

    def __init__(
        self,
        registry: TableRegistry,
        catalogs: CatalogAccess,
        refresh_interval_s: float,
        io_threads: int,
        refresh_budget_s: float,
    ) -> None:
        self._registry = registry
        self._catalogs = catalogs
        self.refresh_interval_s = refresh_interval_s
        self.refresh_budget_s = refresh_budget_s
        """How long a round goes on loading due tables; the rest are loaded in the next rounds."""
        self._batch = 4 * io_threads
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="floe-refresh")
        self._sweeps: dict[CatalogKey, CatalogSweep] = {}
        """The catalogs swept in one call, by key; only the engine's loop makes and ends them."""

    def close(self) -> None:
        """Stop the refresh threads."""
        self._pool.shutdown(wait=True)

    def refresh_due(self, visit: list[TableRuntime]) -> list[TableRuntime]:
        """Refresh the tables of `visit` that are due, and sweep each catalog probed for them or
        whose sweep is due (`CatalogSweep`): its tables whose metadata file moved are refreshed
        too. Returns those others, whose next visit changes too."""
        registry = self._registry
        now = registry.clock()
        due = [r for r in visit if not r.busy and r.state != TableState.DISABLED and r.refresh.due(now)]
        keys = {r.table_id: self._catalogs.key_of(r) for r in due}
        refs = {keys[r.table_id]: r.spec.catalog for r in due}
        for key, swept in self._sweeps.items():
            if swept.due(now):
                refs.setdefault(key, swept.ref)
        locations = self._catalogs.probe(refs, now)
        with registry.lock:
            self._end_sweeps([key for key in refs if key not in locations])
            due_ids = {r.table_id for r in due}
            moved = [r for r in self._sweep(locations, refs, keys, now) if r.table_id not in due_ids]
        visited = {r.table_id for r in visit}
        also = [r for r in moved if r.table_id not in visited]
        due += moved

        def probed_location(runtime: TableRuntime) -> str | None:
            return locations.get(keys[runtime.table_id], {}).get(runtime.spec.table)

        unchanged = {
            r.table_id
            for r in due
            if r.unchanged_at(probed_location(r)) and not r.refresh.time_trigger_due(now)
        }
        with registry.lock:
            for runtime in due:
                if runtime.table_id in unchanged:
                    runtime.on_loaded(now)
        checked = self._load_within_budget([r for r in due if r.table_id not in unchanged])
        with registry.lock:
            for runtime in due:
                key = keys[runtime.table_id]
                sweep = self._sweeps.get(key)  # every probed catalog has one; a failed one, none
                if runtime.table_id not in unchanged and runtime.table_id not in checked:
                    if sweep is not None:  # held back: the next round, or the next sweep, loads it
                        sweep.forget(runtime.spec.table)
                        runtime.refresh.check_soon()
                    continue
                # A table brought up to its probed file is checked by the sweep from now on.
                if sweep is not None and not runtime.unchanged_at(probed_location(runtime)):
                    sweep.forget(runtime.spec.table)
                    sweep = None
                cadence = RefreshCadence.of(runtime.spec.refresh, self.refresh_interval_s)
                changed = checked.get(runtime.table_id, False)
                busy = key in locations or runtime.state not in QUIET
                runtime.refresh.on_checked(now, cadence, runtime.table_id, changed, busy, sweep)
            for runtime in visit + also:
                self.update_pending(runtime, now)
            for key in [k for k, swept in self._sweeps.items() if not swept.members]:
                del self._sweeps[key]
        return also

    def forget(self, runtime: TableRuntime) -> None:
        """A removed table leaves its sweep (hold the lock)."""
        runtime.refresh.leave_sweep(runtime.table_id)

    def _sweep(
        self,
        locations: Mapping[CatalogKey, Mapping[str, str]],
        refs: dict[CatalogKey, CatalogRef],
        keys: dict[str, CatalogKey],
        now: float,
    ) -> list[TableRuntime]:
        """Each probed catalog is swept (its `CatalogSweep` made if new, opened as `refs` says):
        the tables of its identifiers that moved, their catalog keys put in `keys` (hold the lock)."""
        registry = self._registry
        moved: list[TableRuntime] = []
        for key, found in locations.items():
            sweep = self._sweeps.get(key)
            if sweep is None:
                sweep = self._sweeps[key] = CatalogSweep(refs[key])
            for identifier in sweep.swept(now, found):
                for table_id in registry.by_identifier.get(identifier, ()):
                    runtime = registry.runtimes.get(table_id)
                    if runtime is None or runtime.state == TableState.DISABLED:
                        continue
                    if self._catalogs.key_of(runtime) != key:
                        continue
                    if runtime.busy:  # refreshed once its process ends: the next sweep finds it
                        sweep.forget(identifier)
                        continue
                    keys[table_id] = key
                    moved.append(runtime)
        return moved

    def _end_sweeps(self, failed: list[CatalogKey]) -> None:
        """The catalogs of `failed` did not answer a probe: their swept tables are checked on their
        own again, from the next round (hold the lock)."""
        for key in failed:
            sweep = self._sweeps.pop(key, None)
            if sweep is None:
                continue
            for table_id in list(sweep.members):
                runtime = self._registry.runtimes.get(table_id)
                if runtime is not None and runtime.refresh.sweep is sweep:
                    runtime.refresh.leave_sweep(table_id)
                    runtime.refresh.check_soon()
                    self._registry.touch(table_id)

    def _refresh(self, runtime: TableRuntime) -> bool | None:
        """Load the table if it changed, and evaluate what is new; returns whether it had a new
        metadata file, or None when its catalog's request budget held the refresh back."""
        now = self._registry.clock()
        # An interval trigger fires on the files as they are: evaluated again, changed or not.
        again = runtime.refresh.time_trigger_due(now)
        evaluated = runtime.evaluated_metadata
        try:
            with calls_for(Priority.REFRESH):
                loaded = self._catalogs.load_if_changed(runtime, conditional=not again)
            if loaded.table is None:
                runtime.on_loaded(now)  # the catalog says the file last evaluated is still current
                return False
            table = loaded.table
            runtime.catalog_etag = (table.metadata_location, loaded.etag) if loaded.etag else None
            runtime.on_loaded(now, str(table.metadata.table_uuid))
            runtime.refresh.written_s = table.metadata.last_updated_ms / 1000
            runtime.refresh.pace = CommitPace.of(data_commit_times(table.metadata, PACE_GAPS + 1))
            changed = table.metadata_location != evaluated
            current = table.metadata.current_snapshot()
            snapshot_id = current.snapshot_id if current else None
            if not again and not runtime.needs_evaluation(snapshot_id, table.metadata_location):
                return changed
            # Properties first: they need no scan, and a refused table is checked every refresh.
            config = runtime.spec.optimizing_config(table.metadata.properties)
            check_write_properties(table.metadata.properties, table.metadata.schema())
            scanned = scan_supported(runtime.spec.table, table)
            # The scan read the manifest list: pyiceberg's cache answers this.
            manifests = current.manifests(table.io) if current else []
            settled = settled_jobs(table.metadata, scanned.files, manifests, runtime.spec.maintenance)
            history = optimizing_history(table.metadata)
            plan = plan_optimizing(
                scanned.files,
                config,
                now_s=now,
                last_minor_s=history.last_minor_s,
                last_full_s=history.last_full_s,
            )
        except BudgetExhausted:
            return None  # still due: a later round asks
        except UnsupportedTableError as exc:
            self.refuse_unsupported(runtime, exc, now)
            return exc.metadata_location != evaluated
        except InvalidTableProperty as exc:
            self.refuse_property(runtime, exc, now)
            return False
        except TableAccessError as exc:
            if runtime.last_error != str(exc):
                self._registry.emit(runtime.table_id, "Warning", "TableUnavailable", str(exc))
            runtime.on_access_error(
                str(exc), now, catalog_failed=isinstance(exc, CatalogConfigError | CatalogUnreachable)
            )
            return False
        # Only a table with work due keeps its `Table`, which planning takes: idle ones keep no metadata.
        evaluation = Evaluation(
            scanned, config, plan, now, table.metadata_location, None if plan.is_empty else table
        )
        with self._registry.lock:
            self._registry.evaluations[runtime.table_id] = evaluation
            runtime.on_history(history)
            runtime.on_evaluated(scanned.files, plan, now, table.metadata_location)
            runtime.health = table_health(scanned.files, config)
            runtime.on_settled(settled, table.metadata_location)
            runtime.refresh.time_trigger_s = (
                time_trigger_s(scanned.files, config, now, runtime.last_minor_s, runtime.last_full_s)
                if plan.is_empty
                else None
            )
        return changed

    def _refuse(
        self,
        runtime: TableRuntime,
        reason: str,
        message: str,
        files: TableFiles | None,
        metadata_location: str | None,
        now: float,
    ) -> None:
        """Floe refuses the table (`reason`, `message`): shown, with an Event when the message is new."""
        with self._registry.lock:
            new = runtime.refusal != message
            runtime.on_refused(reason, message, files, now, metadata_location)
            self._registry.evaluations.pop(runtime.table_id, None)
        if new:
            self._registry.emit(runtime.table_id, "Warning", reason, message)

    def refuse_unsupported(self, runtime: TableRuntime, exc: UnsupportedTableError, now: float) -> None:
        """Refuse a table with a feature floe does not optimize safely."""
        self._refuse(runtime, UNSUPPORTED, str(exc), exc.files, exc.metadata_location, now)

    def refuse_property(self, runtime: TableRuntime, exc: InvalidTableProperty, now: float) -> None:
        """Refuse a table whose properties floe cannot honour."""
        # No files and no metadata location: the next refresh checks the properties again,
        # which needs no scan, and a fixed manifest (targetSize) clears it as well as the table.
        message = f"table {runtime.spec.table} is not optimized: {exc}"
        self._refuse(runtime, INVALID_TABLE_PROPERTY, message, None, None, now)

    def update_pending(self, runtime: TableRuntime, now: float) -> None:
        """Tell the table's group scheduler whether it may be planned, and say why it waits
        (hold the lock)."""
        registry = self._registry
        if runtime.state != TableState.PENDING and runtime.table_id not in registry.marked_pending:
            return  # neither pending nor marked so: nothing to say or undo (most tables, most rounds)
        key = registry.table_group_key(runtime)
        if key not in registry.groups:
            if runtime.state == TableState.PENDING:
                runtime.pending_reason = f"group {runtime.group!r} does not exist"
            return
        scheduler = registry.service.group(key)
        pending = runtime.may_plan(now)
        scheduler.set_pending(runtime.table_id, pending)
        if pending:
            registry.marked_pending.add(runtime.table_id)
        else:
            registry.marked_pending.discard(runtime.table_id)
        if runtime.state == TableState.PENDING and scheduler.threads == 0:
            if registry.groups[key].spec.autoscaling is not None:
                # Not a problem: the group's demand brings its executors back.
                runtime.pending_reason = f"group {runtime.group!r} is scaling up from no executors"
                return
            reason = f"group {runtime.group!r} has no ready optimizer"
            if runtime.pending_reason != reason:
                registry.emit(runtime.table_id, "Warning", "NoOptimizer", f"pending: {reason}")
            runtime.pending_reason = reason

    def _load_within_budget(self, runtimes: list[TableRuntime]) -> dict[str, bool]:
        """Refresh `runtimes` through their catalogs, the most urgent first (`RefreshState.urgency`:
        a noticed or new table, then the latest against its interval), in batches while the round's
        budget lasts (one batch at least): thousands of new tables are loaded over several rounds,
        and status flushes, planning and commits go on between them; a catalog whose request budget
        is spent is asked for its most likely changes first. Returns whether each table refreshed
        had changed."""
        now = self._registry.clock()
        ordered = sorted(runtimes, key=lambda r: -r.refresh.urgency(now))
        started = time.monotonic()
        changed: dict[str, bool] = {}
        spent: set[CatalogKey] = set()
        """Catalogs whose request budget held a refresh back: the rest of their tables wait too."""
        for start in range(0, len(ordered), self._batch):
            if start and time.monotonic() - started >= self.refresh_budget_s:
                break  # the rest stay due: the next rounds load them first
            batch = [r for r in ordered[start : start + self._batch] if self._catalogs.key_of(r) not in spent]
            futures = [(r, self._pool.submit(self._refresh, r)) for r in batch]
            for runtime, future in futures:
                outcome = future.result()
                if outcome is None:
                    spent.add(self._catalogs.key_of(runtime))
                else:
                    changed[runtime.table_id] = outcome
        return changed
