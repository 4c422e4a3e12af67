"""The task service: the optimizers' API (wire v1) over the groups' schedulers, without HTTP.

Optimizers register with a group and get a token; every later call carries it. Any
authenticated call counts as a sign of life. When the service has a registration token,
register itself must present it: tasks carry catalog and storage credentials, so only
the optimizers the operator started (which were handed the token) may take them.

The keeper (`run_keeper`, called periodically by the host) drops optimizers silent past
their group's heartbeat timeout and applies the groups' ack and execute timeouts. `poll`
never blocks: the HTTP layer waits, and `subscribe` wakes it when tasks may have become
available.

One re-entrant lock (in the shared `ChangeMonitor`) guards the service and all its
groups, because the HTTP layer and the engine call in from different threads.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from floe.api.group import SchedulingPolicy
from floe.kit.monitor import ChangeMonitor
from floe.protocol.assignment import TaskAssignment
from floe.protocol.errors import InvalidRequest, ResultRefused, ResultUnverifiable, Unauthorized, UnknownGroup
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.protocol.wire import (
    CompleteRequest,
    PollRequest,
    RegisterRequest,
    RegisterResponse,
)
from floe.rewrite.result_check import ResultCheckFailed
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import GroupSchedulingStats, ResultCheck
from floe.service.change_notices import ChangeNotices
from floe.service.metrics import ServiceMetrics
from floe.service.results import ResultChecker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefusedResult:
    """A task result the service refused, for Events and logs."""

    table_id: str
    process_id: str
    task_id: str
    attempt_id: str
    check: str
    message: str
    files_deleted: int


@dataclass
class OptimizerInfo:
    """A registered optimizer (never its token); `TaskService.optimizers` hands out copies."""

    optimizer_id: str
    group: str
    name: str
    threads: int
    memory_bytes: int
    registered_at: float
    last_seen_at: float


@dataclass
class _Group:
    scheduler: GroupScheduler
    heartbeat_timeout_s: float


class TaskService:
    """Optimizer registry and wire API over one `GroupScheduler` per optimizer group."""

    def __init__(
        self,
        clock: Callable[[], float],
        heartbeat_interval_s: float = 10.0,
        registration_token: str | None = None,
        result_checker: ResultChecker | None = None,
    ) -> None:
        """``registration_token``: the shared secret register must present; None admits anyone.
        ``result_checker`` checks the results of processes added without a check of their own
        (one on the storage the task's spec names by default)."""
        if registration_token is not None and not registration_token:
            raise ValueError("the registration token must not be empty")
        self.metrics = ServiceMetrics()
        self.metrics.watch_groups(self.snapshot)
        self._clock = clock
        self._registration_token = registration_token
        self._heartbeat_interval_s = heartbeat_interval_s
        self._monitor = ChangeMonitor()
        self._groups: dict[str, _Group] = {}
        self._optimizers: dict[str, OptimizerInfo] = {}
        self._executors: dict[str, int] = {}
        self.results = result_checker or ResultChecker()
        """Checks every result before it is accepted."""
        self._refusal_listeners: list[Callable[[RefusedResult], None]] = []
        self.notices = ChangeNotices()
        """Who may tell floe a table changed, and where the notices go (`floe.service.change_notices`)."""

    # -- groups --------------------------------------------------------------------------

    def add_group(
        self,
        name: str,
        policy: SchedulingPolicy = SchedulingPolicy.QUOTA,
        heartbeat_timeout_s: float = 60.0,
        ack_timeout_s: float = 30.0,
        execute_timeout_s: float = 3600.0,
    ) -> GroupScheduler:
        """Create a group's scheduler; ValueError if the group exists."""
        with self._monitor.hold():
            if name in self._groups:
                raise ValueError(f"optimizer group {name!r} already exists")
            scheduler = GroupScheduler(name, policy, ack_timeout_s, execute_timeout_s, self._monitor)
            self._groups[name] = _Group(scheduler, heartbeat_timeout_s)
            return scheduler

    def update_group(
        self,
        name: str,
        policy: SchedulingPolicy,
        heartbeat_timeout_s: float,
        ack_timeout_s: float,
        execute_timeout_s: float,
    ) -> None:
        """Apply a changed group spec; the next keeper run and poll use it."""
        with self._monitor.hold():
            group = self._group(name)
            group.heartbeat_timeout_s = heartbeat_timeout_s
            group.scheduler.set_policy(policy)
            group.scheduler.set_timeouts(ack_timeout_s, execute_timeout_s)

    def remove_group(self, name: str) -> None:
        """Delete a group; UnknownGroup if there is none.

        Its optimizers are dropped (their tokens stop working, so they register again and are
        refused until the group exists again) and its scheduler, with every process in it,
        is forgotten: the engine cancels those processes on its side.
        """
        with self._monitor.hold():
            self._group(name)
            for token in [t for t, o in self._optimizers.items() if o.group == name]:
                del self._optimizers[token]
            del self._groups[name]
            self._executors.pop(name, None)
            self._monitor.changed()

    def set_executors(self, name: str, executors: int) -> None:
        """The executor count the group's driver should run (the operator's decision); drivers
        waiting on another count hear it at once. Kept for a group the service does not have yet."""
        with self._monitor.hold():
            if self._executors.get(name) != executors:
                self._executors[name] = executors
                self._monitor.changed()

    def executors(self, name: str) -> int | None:
        """The group's executor count as last set, None before; UnknownGroup if there is no group."""
        with self._monitor.hold():
            self._group(name)
            return self._executors.get(name)

    def group(self, name: str) -> GroupScheduler:
        """The group's scheduler, for the engine; UnknownGroup if there is none."""
        with self._monitor.hold():
            return self._group(name).scheduler

    def optimizers(self, group: str) -> list[OptimizerInfo]:
        """The group's registered optimizers, in registration order."""
        with self._monitor.hold():
            self._group(group)
            return [replace(o) for o in self._optimizers.values() if o.group == group]

    def snapshot(self) -> list[tuple[str, GroupSchedulingStats, int]]:
        """Each group's name, scheduling totals and registered optimizer count, read at one instant."""
        now = self._clock()
        with self._monitor.hold():
            optimizers: dict[str, int] = {}
            for optimizer in self._optimizers.values():
                optimizers[optimizer.group] = optimizers.get(optimizer.group, 0) + 1
            return [
                (name, group.scheduler.group_stats(now), optimizers.get(name, 0))
                for name, group in self._groups.items()
            ]

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (outside the lock) whenever tasks may have become available."""
        self._monitor.subscribe(callback)

    # -- the wire API --------------------------------------------------------------------

    @property
    def requires_registration_token(self) -> bool:
        """Whether register must present the registration token."""
        return self._registration_token is not None

    def check_registration_token(self, registration_token: str | None) -> None:
        """Unauthorized unless `registration_token` may register (the service's token, if it has
        one); counted as a refused registration. The HTTP layer calls it before reading a body."""
        try:
            self._check_registration_token(registration_token)
        except Unauthorized:
            self.metrics.registrations.labels("refused").inc()
            raise

    def check_driver_token(self, registration_token: str | None) -> None:
        """Unauthorized unless `registration_token` may register: a driver asking for its group's
        executor count presents it (not counted as a refused registration)."""
        self._check_registration_token(registration_token)

    def check_token(self, token: str) -> None:
        """Unauthorized unless `token` is a registered optimizer's; a sign of life otherwise. The
        HTTP layer calls it before reading a body, so strangers cannot make the service read one."""
        with self._monitor.hold():
            self._authenticate(token, self._clock())

    def register(self, request: RegisterRequest, registration_token: str | None = None) -> RegisterResponse:
        """Admit an optimizer into its group.

        Unauthorized if the service has a registration token and ``registration_token`` is
        not it; UnknownGroup if the group does not exist.
        """
        self.check_registration_token(registration_token)
        now = self._clock()
        with self._monitor.hold():
            group = self._group(request.group)
            optimizer = OptimizerInfo(
                optimizer_id=f"{request.group}-{uuid.uuid4().hex[:12]}",
                group=request.group,
                name=request.name,
                threads=request.threads,
                memory_bytes=request.memory_bytes,
                registered_at=now,
                last_seen_at=now,
            )
            token = secrets.token_urlsafe(32)
            self._optimizers[token] = optimizer
            self._sync_threads(request.group)
            self.metrics.registrations.labels("accepted").inc()
            return RegisterResponse(
                optimizer_id=optimizer.optimizer_id,
                token=token,
                heartbeat_interval_s=self._heartbeat_interval_s,
                heartbeat_timeout_s=group.heartbeat_timeout_s,
            )

    def heartbeat(self, token: str) -> None:
        """The optimizer is alive."""
        with self._monitor.hold():
            self._authenticate(token, self._clock())

    def poll(self, token: str, request: PollRequest) -> TaskAssignment | None:
        """A task for the optimizer's thread ``request.thread``, or None right away (never waits)."""
        started = time.perf_counter()
        now = self._clock()
        with self._monitor.hold():
            optimizer = self._authenticate(token, now)
            self._check_thread(optimizer, request.thread)
            scheduler = self._groups[optimizer.group].scheduler
            task = scheduler.poll(optimizer.optimizer_id, request.thread, now)
        self.metrics.poll_seconds.observe(time.perf_counter() - started)
        return task

    def ack(self, token: str, attempt_id: str) -> None:
        """The optimizer started the attempt; StaleAttempt if it is not its current one."""
        now = self._clock()
        with self._monitor.hold():
            optimizer = self._authenticate(token, now)
            scheduler = self._groups[optimizer.group].scheduler
            scheduler.ack(attempt_id, optimizer.optimizer_id, now)

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """The attempt's result or error; StaleAttempt if it is not the optimizer's current one.

        A result is first checked against the attempt's spec and its files in storage, by its
        process's own check (`GroupScheduler.result_check`; `ResultChecker` for a process added
        without one), outside the lock: one that fails is recorded as the attempt's failure
        (using a retry), the files it names that the attempt may have written are deleted, the
        refusal listeners hear of it, and ResultRefused is raised. ResultUnverifiable when the
        storage did not answer: nothing changed.

        With ``request.next_poll``, then a poll for that thread (which never waits), under the
        same lock: its task, or None. Without, always None. A refused completion (stale,
        invalid, a thread out of range) changes nothing and hands out nothing; a refused result
        hands out nothing either.
        """
        outcome = request.result or request.error
        assert outcome is not None, "CompleteRequest validates that exactly one is set"
        refusal = assignment = None
        # File tasks write nothing to check here; the maintenance job checks what they found.
        if isinstance(request.result, RewriteTaskResult):
            with self._monitor.hold():
                optimizer = self._authenticate(token, self._clock())
                scheduler = self._groups[optimizer.group].scheduler
                assignment = scheduler.assignment(attempt_id, optimizer.optimizer_id)
                check = scheduler.result_check(attempt_id, optimizer.optimizer_id) or self.results
            # A result for another task is the scheduler's InvalidRequest, not a refusal.
            if request.result.task_id == assignment.task_id:
                refusal = self._check_result(assignment, request.result, check)
            if refusal is not None:
                outcome = f"result refused ({refusal.check}): {refusal}"
        now = self._clock()
        task = None
        with self._monitor.hold():
            optimizer = self._authenticate(token, now)
            if request.next_poll is not None and refusal is None:
                self._check_thread(optimizer, request.next_poll.thread)
            scheduler = self._groups[optimizer.group].scheduler
            scheduler.complete(attempt_id, optimizer.optimizer_id, outcome, now)
            if request.next_poll is not None and refusal is None:
                task = scheduler.poll(optimizer.optimizer_id, request.next_poll.thread, now)
        succeeded = not isinstance(outcome, str)
        self.metrics.tasks_completed.labels(optimizer.group, "success" if succeeded else "failure").inc()
        if refusal is not None:
            assert assignment is not None and isinstance(request.result, RewriteTaskResult)
            self._refuse(optimizer.group, assignment, request.result, refusal, check)
        return task

    def on_refused(self, listener: Callable[[RefusedResult], None]) -> None:
        """Call `listener` with every refused result (the engine posts an Event)."""
        self._refusal_listeners.append(listener)

    def _check_result(
        self, assignment: TaskAssignment, result: RewriteTaskResult, check: ResultCheck
    ) -> ResultCheckFailed | None:
        if not isinstance(assignment.spec, RewriteTaskSpec):
            raise InvalidRequest(f"attempt {assignment.attempt_id!r} is a file task, not a rewrite")
        try:
            check.check(assignment.spec, result)
        except ResultCheckFailed as exc:
            return exc
        except OSError as exc:
            raise ResultUnverifiable(
                f"could not check the result of attempt {assignment.attempt_id!r} against storage: {exc}; "
                "nothing changed, send the completion again"
            ) from None
        return None

    def _refuse(
        self,
        group: str,
        assignment: TaskAssignment,
        result: RewriteTaskResult,
        refusal: ResultCheckFailed,
        check: ResultCheck,
    ) -> None:
        self.metrics.results_refused.labels(group, refusal.check).inc()
        assert isinstance(assignment.spec, RewriteTaskSpec), "`_check_result` refuses file tasks"
        deleted = check.delete_refused(assignment.spec, result)
        refused = RefusedResult(
            table_id=assignment.table,
            process_id=assignment.process_id,
            task_id=assignment.task_id,
            attempt_id=assignment.attempt_id,
            check=refusal.check,
            message=str(refusal),
            files_deleted=len(deleted),
        )
        log.warning("%s: refused the result of %s: %s", refused.table_id, refused.attempt_id, refused.message)
        for listener in self._refusal_listeners:
            listener(refused)
        raise ResultRefused(assignment.attempt_id, refusal.check, str(refusal))

    def unregister(self, token: str) -> None:
        """Graceful leave: the optimizer's unfinished tasks go back to PLANNED without using retries."""
        now = self._clock()
        with self._monitor.hold():
            self._authenticate(token, now)
            self._drop(token, now)

    # -- keeper --------------------------------------------------------------------------

    def run_keeper(self) -> list[str]:
        """Drop optimizers silent past their group's heartbeat timeout, then expire attempts.

        Returns the ids of the optimizers dropped.
        """
        now = self._clock()
        with self._monitor.hold():
            silent = [
                (token, o)
                for token, o in self._optimizers.items()
                if now - o.last_seen_at > self._groups[o.group].heartbeat_timeout_s
            ]
            for token, _ in silent:
                self._drop(token, now)
            for group in self._groups.values():
                group.scheduler.expire(now)
            return [o.optimizer_id for _, o in silent]

    # -- internals -----------------------------------------------------------------------

    def _group(self, name: str) -> _Group:
        group = self._groups.get(name)
        if group is None:
            raise UnknownGroup(name, list(self._groups))
        return group

    def _check_registration_token(self, presented: str | None) -> None:
        expected = self._registration_token
        if expected is None:
            return
        if not presented:
            raise Unauthorized(
                "missing registration token: register with 'Authorization: Bearer <registration token>' "
                "(the operator's registration Secret, given to optimizers as FLOE_REGISTRATION_TOKEN or "
                "FLOE_REGISTRATION_TOKEN_FILE)"
            )
        # Constant time: the comparison must not tell a caller how much of its guess was right.
        if not hmac.compare_digest(presented.encode(), expected.encode()):
            raise Unauthorized("wrong registration token: it is not the one the task service was given")

    def _authenticate(self, token: str, now: float) -> OptimizerInfo:
        """The token's optimizer, marked seen at ``now``; Unauthorized (changing nothing) if unknown."""
        optimizer = self._optimizers.get(token)
        if optimizer is None:
            raise Unauthorized()
        optimizer.last_seen_at = now
        return optimizer

    @staticmethod
    def _check_thread(optimizer: OptimizerInfo, thread: int) -> None:
        if thread >= optimizer.threads:
            raise InvalidRequest(
                f"thread {thread} is out of range: optimizer {optimizer.optimizer_id!r} "
                f"registered {optimizer.threads} threads (0..{optimizer.threads - 1})"
            )

    def _drop(self, token: str, now: float) -> None:
        optimizer = self._optimizers.pop(token)
        scheduler = self._groups[optimizer.group].scheduler
        scheduler.release_optimizer(optimizer.optimizer_id, now)
        self._sync_threads(optimizer.group)
        self._monitor.changed()

    def _sync_threads(self, group: str) -> None:
        self._groups[group].scheduler.threads = sum(
            o.threads for o in self._optimizers.values() if o.group == group
        )
