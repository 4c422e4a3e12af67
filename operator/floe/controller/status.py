"""Status of OptimizedTables, flushed in batches, and the conditions helper both kinds use.

The engine changes a table's state many times a minute under load; one API call per change
would flood the API server. `TableStatusFlusher.flush` runs every few seconds, on a thread of
its own so that the engine's rounds never wait for the API server, and patches each table's
``status`` subresource once, with only the fields that changed since the last successful
flush; the patches of one flush go out a few at a time (`PATCH_CONCURRENCY`).

A table's ``CatalogReady`` condition says whether floe can reach its catalog:

* False, ``SecretNotFound`` / ``SecretUnreadable``: the catalog Secret (``spec.catalog.secretRef``)
  cannot be read; the message names the Secret and its namespace. A table that never got its
  properties waits for the Secret (it is re-read every ``--secret-interval``) and is also
  ``Degraded`` with the same reason; a table that had them keeps using them meanwhile.
* False, ``CatalogUnavailable``: the catalog did not answer, or its properties are wrong (the
  error, secret values masked); the table is ``Degraded`` (``TableUnavailable``) too.
* True, ``CatalogAvailable``: the catalog answered the last refresh, whether or not the table
  itself was found there (a missing table is ``Degraded``, not a catalog problem). Tables with
  inline properties and tables with a Secret follow the same rule.
* Unknown: not contacted yet (``NotChecked``), or never, since the table is disabled (``Disabled``).
"""

from __future__ import annotations

import bisect
import datetime
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from floe.api.history import status_runs
from floe.api.meta import MAX_REASON_LENGTH, clip, rfc3339
from floe.api.models import TABLE_PLURAL
from floe.controller.kube import Kube
from floe.controller.secrets import CatalogProblem, CatalogProblems
from floe.kit.rotation import Rotation
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import MaintenanceRun, TableRuntime, TableState
from floe.optimizing.waiting import Waiting
from floe.planning.health import TableHealth

log = logging.getLogger(__name__)

BUSY = {
    TableState.PLANNING,
    TableState.MINOR_OPTIMIZING,
    TableState.MAJOR_OPTIMIZING,
    TableState.FULL_OPTIMIZING,
    TableState.COMMITTING,
}

Status = dict[str, Any]
CATALOG_READY = "CatalogReady"
MAINTENANCE_ALLOWED = "MaintenanceAllowed"
PATCH_CONCURRENCY = 4
"""Status patches of one flush in flight at once: each waits ~10 ms on the API server, so a
burst of a few hundred takes a second rather than several."""
EVENT_DRAIN_S = 2.0
"""How long a flush waits for the Events queued before it (`TableStatusFlusher.drain_events`)."""
BACKSTOP_FLUSH_PERIOD_S = 60.0
"""How often the periodic flushes look at each table, not only at those the engine looked at: a
backstop, as the engine's own visit of every table a minute is, a share of the tables each flush."""


@dataclass
class _Write:
    """One table's status patch of a flush, and what the flush remembers once it is written."""

    table_id: str
    patch: Status
    changed: Status
    inputs: tuple[Any, ...] | None


def timestamp(seconds: float | None) -> str | None:
    """RFC 3339 UTC time of an epoch timestamp, as Kubernetes writes times."""
    return None if seconds is None else rfc3339(seconds)


def epoch(text: Any) -> float | None:
    """Inverse of `timestamp`; None for anything that is not such a time."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def condition(type_: str, true: bool | None, reason: str, message: str = "") -> dict[str, str]:
    """A condition without its transition time (see `with_transition_times`); None is Unknown."""
    return {
        "type": type_,
        "status": "Unknown" if true is None else "True" if true else "False",
        "reason": clip(reason, MAX_REASON_LENGTH),
        "message": clip(message),
    }


def with_transition_times(
    conditions: list[dict[str, str]], previous: Any, now: Callable[[], float]
) -> list[dict[str, str]]:
    """Conditions with ``lastTransitionTime`` kept from ``previous`` when the status did not flip."""
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out = []
    for c in conditions:
        old = before.get(c["type"])
        if old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            out.append({**c, "lastTransitionTime": old["lastTransitionTime"]})
        else:
            out.append({**c, "lastTransitionTime": timestamp(now()) or ""})
    return out


def table_status(
    runtime: TableRuntime,
    occupation: float,
    redact: Callable[[str], str],
    problem: CatalogProblem | None = None,
    settings: Mapping[str, Any] | None = None,
    waiting: Waiting | None = None,
) -> Status:
    """A table's status fields (camelCase), every free text redacted; `occupation`: of its quota
    over the last hour; `settings`: its ``effectiveSpec`` and ``specSources``
    (`floe.controller.settings`); `waiting`: what it waits for (`floe.optimizing.waiting`)."""
    state = runtime.state
    error = redact(runtime.last_error)
    return {
        "state": state.value,
        "snapshotId": runtime.snapshot_id,
        "tableUuid": runtime.table_uuid,
        "quotaOccupation": round(occupation, 4),
        "dataFiles": runtime.data_files,
        "deleteFiles": runtime.delete_files,
        "lastMinorOptimizing": timestamp(runtime.last_minor_s),
        "lastMajorOptimizing": timestamp(runtime.last_major_s),
        "lastFullOptimizing": timestamp(runtime.last_full_s),
        "lastOptimized": timestamp(runtime.last_optimized_s),
        "lastResult": clip(redact(runtime.last_result)) or None,
        "currentProcess": runtime.process_id,
        "maintenance": maintenance_status(runtime, redact),
        "history": history_status(runtime, redact),
        "waiting": waiting_status(waiting, redact),
        "health": health_status(runtime.health),
        # Only the interval: the next check's time moves at every check, and writing it would
        # patch every idle table's status at every check (`floe explain` and the UI show it).
        "refresh": {"intervalSeconds": round(interval)} if (interval := runtime.refresh.interval_s) else None,
        **(settings or {}),
        "conditions": [
            condition("Optimizing", state in BUSY, state.value if state in BUSY else "Idle"),
            condition(
                "Pending",
                state == TableState.PENDING,
                "Pending" if state == TableState.PENDING else "NotPending",
                redact(runtime.pending_reason),
            ),
            condition("Degraded", bool(error), degraded_reason(runtime), error),
            catalog_condition(runtime, problem, redact),
            maintenance_condition(runtime, redact),
        ],
    }


def waiting_status(waiting: Waiting | None, redact: Callable[[str], str]) -> Status | None:
    """``waiting``: the reason, its words (redacted) and the table's place in its group's queue."""
    if waiting is None:
        return None
    out: Status = {"reason": waiting.reason, "message": clip(redact(waiting.message))}
    if waiting.queue_position is not None:
        out["queuePosition"] = waiting.queue_position
    if waiting.queue_length is not None:
        out["queueLength"] = waiting.queue_length
    return out


def health_status(health: TableHealth | None) -> Status | None:
    """``health``: the score and its factors, rounded so that a status is not rewritten for noise."""
    if health is None:
        return None
    return {
        "score": health.score,
        "smallFiles": round(health.small_files, 2),
        "equalityDeletes": round(health.equality_deletes, 2),
        "positionDeletes": round(health.position_deletes, 2),
    }


def maintenance_condition(runtime: TableRuntime, redact: Callable[[str], str]) -> dict[str, str]:
    """``MaintenanceAllowed``: False while a maintenance job's last run was refused (reason
    ``GcDisabled``, ``LocationShared`` or ``LocationNotOwned``, of the first such job; the message
    names every refused job and why), True otherwise."""
    refused = [(job, run) for job, run in sorted(runtime.maintenance_runs.items()) if run.refused]
    if not refused:
        return condition(MAINTENANCE_ALLOWED, True, "Allowed", "no maintenance job was refused")
    message = "; ".join(f"{job} {redact(run.result)}" for job, run in refused)
    return condition(MAINTENANCE_ALLOWED, False, refused[0][1].refused, message)


def _status_inputs(
    runtime: TableRuntime,
    occupation: float,
    problem: CatalogProblem | None,
    settings: Mapping[str, Any] | None,
    redactions: int | None,
) -> tuple[Any, ...]:
    """Everything `table_status` makes a table's status from but what it waits for (which the
    flush appends), compared before computing it.

    Objects the engine replaces rather than changes (the spec, each maintenance run, the
    settings) are held as they are: a tuple compares its items by identity first, so an
    unchanged one costs nothing. The number of credential values the redaction knows is in it
    too: a value learnt later must be masked in texts written before. It holds all that
    `why_waiting` reads of a table that is not pending, so that wait need not be asked again
    while they are the same."""
    return (
        runtime.state,
        runtime.evaluated_snapshot_id,
        runtime.snapshot_id,
        runtime.table_uuid,
        round(occupation, 4),
        runtime.data_files,
        runtime.delete_files,
        runtime.last_minor_s,
        runtime.last_major_s,
        runtime.last_full_s,
        runtime.last_result,
        runtime.process_id,
        runtime.pending_reason,
        runtime.last_error,
        runtime.refusal,
        runtime.refusal_reason,
        runtime.catalog_error,
        runtime.spec,
        tuple(runtime.maintenance_runs.items()),
        tuple(runtime.runs),
        problem,
        settings,
        redactions,
        runtime.health,
        runtime.refresh.interval_s,
    )


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: a map's keys that `new` lacks
    are sent as null, or the API server would keep them."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    patch = {k: merge_patch(old.get(k), v) for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def catalog_condition(
    runtime: TableRuntime, problem: CatalogProblem | None, redact: Callable[[str], str]
) -> dict[str, str]:
    """``CatalogReady`` of a table the engine knows (the rule is in this module's docstring)."""
    if problem is not None:
        return condition(CATALOG_READY, False, problem.reason, problem.message)
    catalog = runtime.spec.catalog
    if runtime.catalog_error is None:
        if runtime.state == TableState.DISABLED:
            return condition(
                CATALOG_READY, None, "Disabled", "the catalog of a disabled table is not contacted"
            )
        return condition(CATALOG_READY, None, "NotChecked", f"catalog {catalog.name!r} not contacted yet")
    if runtime.catalog_error:
        return condition(CATALOG_READY, False, "CatalogUnavailable", redact(runtime.catalog_error))
    source = f", with the properties of Secret {catalog.secret_ref!r}" if catalog.secret_ref else ""
    return condition(CATALOG_READY, True, "CatalogAvailable", f"catalog {catalog.name!r} answered{source}")


def awaiting_status(problem: CatalogProblem) -> Status:
    """The status of a table that never reached the engine, because its catalog Secret cannot be read."""
    return {
        "conditions": [
            condition(CATALOG_READY, False, problem.reason, problem.message),
            condition("Degraded", True, problem.reason, problem.message),
        ]
    }


def maintenance_status(runtime: TableRuntime, redact: Callable[[str], str]) -> Status:
    """Per job that ran: its last run, result and reclaimed files and bytes, when it is due next,
    and why floe refused it, if it did."""
    out: Status = {}
    for job, run in sorted(runtime.maintenance_runs.items()):
        out[job.value] = {
            "lastRun": timestamp(run.finished_s),
            "nextDue": timestamp(runtime.next_maintenance_s(job, run.finished_s)),
            "lastResult": clip(redact(run.result)),
            "filesReclaimed": run.files_removed,
            "bytesReclaimed": run.bytes_removed,
            **({"refused": run.refused} if run.refused else {}),
        }
    return out


def history_status(runtime: TableRuntime, redact: Callable[[str], str]) -> list[Status]:
    """The table's last runs, oldest first, their texts redacted."""
    return [
        run.model_copy(update={"trigger": redact(run.trigger), "error": redact(run.error)}).model_dump(
            by_alias=True, mode="json"
        )
        for run in runtime.runs
    ]


def restore_history(runtime: TableRuntime, status: Mapping[str, Any]) -> None:
    """The runs recorded in a table's status, so a restarted operator keeps showing them."""
    runtime.runs.restore(status_runs(status))


def restore_maintenance(runtime: TableRuntime, status: Mapping[str, Any]) -> None:
    """Last runs recorded in a table's status, so a restarted operator keeps each job's schedule."""
    recorded = status.get("maintenance")
    if not isinstance(recorded, Mapping):
        return
    for name, job_status in recorded.items():
        finished = epoch(job_status.get("lastRun")) if isinstance(job_status, Mapping) else None
        try:
            job = MaintenanceJob(name)
        except ValueError:
            continue  # a job this version does not know
        if finished is None:
            continue
        result = str(job_status.get("lastResult") or "")
        runtime.restore_maintenance_run(
            job,
            MaintenanceRun(
                finished,
                result,
                int(job_status.get("filesReclaimed") or 0),
                int(job_status.get("bytesReclaimed") or 0),
                failed=result.startswith(("failed:", "refused:")),
                refused=str(job_status.get("refused") or ""),
            ),
        )


def degraded_reason(runtime: TableRuntime) -> str:
    """Why the table is Degraded, as a condition reason (``Healthy`` when it is not).

    ``TableUnavailable``: the catalog or the table cannot be read (wrong catalog properties
    or Secret, catalog down, table gone); ``PlanningFailed``; ``CommitDelayed``: the process's
    commit could not be finished yet and is being retried; ``OptimizingFailed``: the last
    process failed or its commit was refused, and nothing was committed; ``Unsupported``: the
    table uses a feature floe cannot handle (named in the message), so it is neither optimized
    nor maintained; ``InvalidTableProperty``: a table property floe applies (the target file
    size, a ``write.parquet.*`` option) has a value floe cannot use, so it is not optimized.
    """
    error = runtime.last_error
    if not error:
        return "Healthy"
    if runtime.refusal:
        return runtime.refusal_reason
    if error.startswith("planning failed"):
        return "PlanningFailed"
    if runtime.state == TableState.COMMITTING:
        return "CommitDelayed"
    if runtime.last_result == f"failed: {error}":
        return "OptimizingFailed"
    return "TableUnavailable"


class TableStatusFlusher:
    """Writes changed table status fields back, one merge patch per table per flush.

    It writes the tables the engine knows, and the tables waiting for their catalog Secret
    (`CatalogProblems`), which the engine does not know yet. A periodic flush looks only at
    the tables whose status can have changed (`_candidates`), so at 10,000 idle tables it costs
    next to nothing; and at each table once a minute, a share of them each flush. With `max_writes_per_s`, the
    periodic flushes send at most that many patches a second on average (a token bucket
    holding `burst_s` seconds of them): when thousands of tables change at once (the operator
    starting, a group's defaults edited) the API server is not flooded, and the tables left
    over go first at the next flush. A flush of named tables (a handler's, at once) is never
    held back, though it uses up the budget too.
    """

    def __init__(
        self,
        kube: Kube,
        engine: OptimizingEngine,
        redact: Callable[[str], str],
        now: Callable[[], float],
        problems: CatalogProblems | None = None,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        max_writes_per_s: float | None = None,
        burst_s: float = 5.0,
        drain_events: Callable[[float], bool] | None = None,
    ) -> None:
        self.kube = kube
        self.drain_events = drain_events
        """Waits for the Events queued so far (`ControllerEvents.drain`): each flush first gives
        them `EVENT_DRAIN_S`, so an Event is never later than the status showing its state."""
        self.engine = engine
        self.redact = redact
        self.now = now
        self.problems = problems or CatalogProblems()
        self.settings = settings if settings is not None else {}
        self._written: dict[str, Status] = {}
        self._inputs: dict[str, tuple[Any, ...]] = {}
        """Per table: what its status was last made of (`_status_inputs`); while that is the same,
        its status is not computed again, so an idle table costs a flush next to nothing."""
        # The engine thread flushes every few seconds; a kopf handler flushes its table at once.
        self._lock = threading.Lock()
        self.patches = 0
        """API calls made so far (tests check that flushing batches)."""
        self.max_writes_per_s = max_writes_per_s
        self._capacity = max(1.0, (max_writes_per_s or 0.0) * burst_s)
        self._tokens = self._capacity
        self._filled_at = now()
        self._resume_after = ""
        """The last table a rate-limited flush wrote: the next one starts after it."""
        self._backstop = Rotation(BACKSTOP_FLUSH_PERIOD_S)
        self._looked_at_all = False
        self._redactions: int | None = None
        self._again: set[str] = set()
        """Tables a periodic flush did not get to (the rate limit) or could not write: the next
        one looks at them whatever the engine says."""
        self._occupied: set[str] = set()
        """Tables with quota occupation at the last periodic flush: their status shows it
        falling, down to 0."""
        self._senders = ThreadPoolExecutor(max_workers=PATCH_CONCURRENCY, thread_name_prefix="floe-status")

    def seed(self, table_id: str, status: Mapping[str, Any]) -> None:
        """What the resource's status already holds (at resume), so unchanged fields are not re-sent."""
        with self._lock:
            self._written[table_id] = dict(status)

    def look_at(self, table_ids: Collection[str]) -> None:
        """Tables whose status may have changed outside the engine (their inherited settings
        resolved again): the next periodic flush looks at them."""
        with self._lock:
            self._again.update(table_ids)

    def forget(self, table_id: str) -> None:
        """The table is gone; stop writing its status."""
        with self._lock:
            self._written.pop(table_id, None)
            self._inputs.pop(table_id, None)

    def flush(self, only: Collection[str] | None = None) -> int:
        """Patch every table (or those in ``only``) whose status changed; returns the patches sent."""
        if self.drain_events is not None:
            self.drain_events(EVENT_DRAIN_S)
        with self._lock:
            return self._flush(only)

    def _flush(self, only: Collection[str] | None) -> int:
        redactions = len(self.redact) if isinstance(self.redact, Sized) else None
        candidates = self._candidates(only, redactions)
        occupations = self.engine.occupations(candidates)
        runtimes = self.engine.runtimes
        made_of = {
            table_id: _status_inputs(
                runtime,
                occupations.get(table_id, 0.0),
                self.problems.get(table_id),
                self.settings.get(table_id),
                redactions,
            )
            for table_id in candidates
            if (runtime := runtimes.get(table_id)) is not None
        }
        # What a table that is not pending waits for follows from the rest of its inputs: while
        # they are what its status was last made of, neither its wait nor its status is made again
        # (an idle catalog's probe has the engine look at every table every few seconds).
        asked = [
            t
            for t, inputs in made_of.items()
            if runtimes[t].state == TableState.PENDING or not self._last_made_of(t, inputs)
        ]
        waits = self.engine.waits(occupations, asked)
        self._refill()
        writes: list[_Write] = []
        reached: list[str] = []
        for table_id in self._in_turn(candidates):
            if only is None and self.max_writes_per_s is not None and self._tokens < len(writes) + 1:
                break  # the rest go first at the next flush
            reached.append(table_id)
            runtime, problem = runtimes.get(table_id), self.problems.get(table_id)
            inputs: tuple[Any, ...] | None = None
            if runtime is not None:
                settings, occupation = self.settings.get(table_id), occupations.get(table_id, 0.0)
                waiting = waits.get(table_id)
                if waiting is None and table_id in made_of:
                    continue  # not pending, and made of what it was made of last
                made = made_of.get(table_id) or _status_inputs(
                    runtime, occupation, problem, settings, redactions
                )
                inputs = (*made, waiting)
                if self._inputs.get(table_id) == inputs:
                    continue
                status = table_status(runtime, occupation, self.redact, problem, settings, waiting)
            elif problem is not None:
                status = awaiting_status(problem)
            else:
                continue
            written = self._written.setdefault(table_id, {})
            status["conditions"] = with_transition_times(
                status["conditions"], written.get("conditions"), self.now
            )
            changed = {k: v for k, v in status.items() if written.get(k) != v}
            if not changed:
                self._remember(table_id, inputs)
                continue
            patch = {k: merge_patch(written.get(k), v) for k, v in changed.items()}
            writes.append(_Write(table_id, patch, changed, inputs))
        sent = 0
        failed = []
        for write, done in zip(writes, self._senders.map(self._send, writes), strict=True):
            if done:
                self._written[write.table_id].update(write.changed)
                self._remember(write.table_id, write.inputs)
                sent += 1
            else:
                failed.append(write.table_id)
        self._tokens -= len(writes)
        if writes:
            self._resume_after = writes[-1].table_id
        if only is None:
            self._again = (set(candidates) - set(reached)) | set(failed)
        self.patches += sent
        return sent

    def _candidates(self, only: Collection[str] | None, redactions: int | None) -> set[str]:
        """The tables this flush looks at: those of `only`; or, periodically, those the engine
        looked at since the last flush, those with quota occupation now or at the last flush,
        those awaiting their catalog Secret or whose Secret was just read again, and those the
        last flush left; the backstop's share of every table (each once a
        `BACKSTOP_FLUSH_PERIOD_S`); and every table at the first flush, or when the redaction
        learnt a value (texts written before must be masked again)."""
        runtimes, awaiting = self.engine.runtimes, set(self.problems.tables())
        if only is None:
            looked_at = self.engine.take_looked_at() | self.problems.take_cleared()
            occupied = set(self.engine.occupied())
            # Taken before a full look too, which covers the turn: the first flush starts the pass.
            turn = self._backstop.take(self.now(), runtimes.keys)
            if not self._looked_at_all or redactions != self._redactions:
                self._looked_at_all = True
                self._redactions = redactions
                self._occupied = occupied
                return set(runtimes) | awaiting
            only = looked_at | occupied | self._occupied | self._again | awaiting | set(turn)
            self._occupied = occupied
        return {t for t in only if t in runtimes or t in awaiting}

    def _send(self, write: _Write) -> bool:
        """Patch one table's status; False when the API server refused it (404: the table is gone)."""
        namespace, name = write.table_id.split("/", 1)
        try:
            self.kube.patch_status(TABLE_PLURAL, name, namespace, write.patch)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("status of %s not written: %s", write.table_id, exc.reason)
            return False
        return True

    def close(self) -> None:
        """Stop the patch senders (after the last flush)."""
        self._senders.shutdown(wait=True)

    def _last_made_of(self, table_id: str, made_of: tuple[Any, ...]) -> bool:
        """Whether the table's status was last made of `made_of` and a wait (which comes last)."""
        last = self._inputs.get(table_id)
        return last is not None and last[:-1] == made_of

    def _remember(self, table_id: str, inputs: tuple[Any, ...] | None) -> None:
        if inputs is None:
            self._inputs.pop(table_id, None)
        else:
            self._inputs[table_id] = inputs

    def _refill(self) -> None:
        now = self.now()
        if self.max_writes_per_s is not None:
            elapsed = max(0.0, now - self._filled_at)
            self._tokens = min(self._capacity, self._tokens + elapsed * self.max_writes_per_s)
        self._filled_at = now

    def _in_turn(self, table_ids: Collection[str]) -> list[str]:
        """`table_ids` sorted, from the first after the last one a flush wrote: when writes are
        rate-limited, every table gets its turn."""
        ordered = sorted(table_ids)
        start = bisect.bisect_right(ordered, self._resume_after)
        return ordered[start:] + ordered[:start]
