"""The optimizer's driver loop: register, heartbeat, and per thread poll → ack → run → complete.

One session thread keeps the registration alive (registering again when the service has
dropped this optimizer) and `threads` poll threads each run one task at a time. Nothing
the service does makes the process crash: unreachable → retry with backoff, refused →
log and carry on. A thread's completion asks for its next task (``next_poll``), so while
work is queued a task costs an ack and a complete, and the thread polls only when the
completion brought none.

Stopping is graceful (`stop`): no new task is started, the running ones finish within
the grace period and are completed, then the optimizer unregisters, which hands any
task still held back to the queue. `kill` abandons everything at once without telling
the service, as a crash would; the service reclaims the tasks after its heartbeat timeout.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import SparkSession

from floe.protocol.assignment import TaskAssignment
from floe.protocol.client import (
    RegistrationToken,
    RequestFailed,
    ServiceUnavailable,
    StaleAttempt,
    TaskServiceClient,
    Unauthorized,
    UnknownGroup,
)
from floe.protocol.file_tasks import DeleteFilesSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.protocol.wire import CompleteRequest, NextPoll, RegisterRequest, RegisterResponse
from floe_optimizer.retry import Backoff, Outage
from floe_optimizer.runner import SparkTaskRunner, TaskRunner, discard_written_files
from floe_optimizer.spark_runner import TaskOutcome

log = logging.getLogger(__name__)

UNREGISTER_ATTEMPTS = 3
CANCEL_WAIT_S = 60.0
"""How long a stop past its grace period waits for the cancelled tasks to end."""
CANCEL_RETRY_S = 0.5

_T = TypeVar("_T")


class _Delivery(enum.Enum):
    ACCEPTED = "accepted"
    REFUSED = "refused"  # definitely ignored: refused at the first attempt
    UNKNOWN = "unknown"  # given up, or refused after an attempt whose fate is unknown


class Optimizer:
    """One optimizer: a registration with the task service and the threads that serve it."""

    def __init__(
        self,
        service: str | TaskServiceClient,
        group: str,
        threads: int,
        *,
        spark: SparkSession | None = None,
        runner: TaskRunner | None = None,
        memory_bytes: int = 0,
        name: str = "",
        poll_wait_s: float = 20.0,
        registration_token: str | RegistrationToken | None = None,
    ) -> None:
        """Serve `group` of the task service at `service` (a URL or a client) with `threads` threads.

        Tasks run as Spark jobs on `spark`, or through `runner` when one is given instead.
        `registration_token` is what registering presents, for a URL (a client has its own).
        """
        if runner is None:
            if spark is None:
                raise ValueError("give a SparkSession (or a runner) to run the tasks on")
            runner = SparkTaskRunner(spark)
        elif spark is not None:
            raise ValueError("give either a SparkSession or a runner, not both")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if isinstance(service, TaskServiceClient):
            if registration_token is not None:
                raise ValueError("give the registration token to the client, not to the optimizer")
            self.client = service
        else:
            self.client = TaskServiceClient(service, registration_token=registration_token)
        self.group = group
        self.threads = threads
        self.memory_bytes = memory_bytes
        self.name = name
        self.poll_wait_s = poll_wait_s
        self.runner = runner
        self._cond = threading.Condition()
        self._session: RegisterResponse | None = None
        self._busy = 0
        self._stopping = False
        self._finished = False
        self._killed = False
        self._deadline = float("inf")
        self._outage = Outage(log)
        self._threads: list[threading.Thread] = []

    @property
    def optimizer_id(self) -> str | None:
        """The id the service gave this optimizer; None while it is not registered."""
        session = self._session
        return None if session is None else session.optimizer_id

    def start(self) -> None:
        """Start the session and poll threads; returns at once (registration happens in the background)."""
        if self._threads:
            raise RuntimeError("the optimizer was already started")
        self._threads.append(threading.Thread(target=self._keep_session, name="floe-optimizer-session"))
        for thread in range(self.threads):
            self._threads.append(
                threading.Thread(target=self._serve, args=(thread,), name=f"floe-optimizer-{thread}")
            )
        for worker in self._threads:
            worker.daemon = True
            worker.start()

    def stop(self, grace_s: float = 60.0) -> None:
        """Stop gracefully: start no new task, let running ones finish and complete within
        `grace_s`, unregister (tasks still held go back to the queue), cancel what still runs,
        and end the threads."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._deadline = time.monotonic() + grace_s
            self._cond.notify_all()
            if self._busy:
                log.info("stopping: waiting up to %.0f s for %d running task(s)", grace_s, self._busy)
            in_time = self._cond.wait_for(lambda: self._busy == 0, timeout=grace_s)
            running = self._busy
        # Unregistering first hands the unfinished tasks back without using a retry; the
        # cancelled tasks' completions then arrive too late to count as failures.
        self._unregister()
        if not in_time:
            log.warning("grace period over with %d task(s) still running: cancelling them", running)
            self._cancel_until_idle()
        with self._cond:
            self._finished = True
            self._cond.notify_all()
        self.client.close()
        if in_time:
            log.info("stopped: every running task finished and was reported")
        else:
            log.info(
                "stopped: %d task(s) abandoned; they go back to the queue, and the task service removes "
                "their files when their process ends",
                running,
            )

    def _cancel_until_idle(self, timeout_s: float = CANCEL_WAIT_S) -> None:
        """Cancel the running tasks until no thread runs one. Cancelling once is not enough: a
        thread between its ack and its job's start when the cancel came starts the job after
        it, and that job would write files after the caller took the task for stopped."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.runner.cancel()
            with self._cond:
                if self._cond.wait_for(lambda: self._busy == 0, timeout=CANCEL_RETRY_S):
                    return
                running = self._busy
            if time.monotonic() > deadline:
                log.warning("%d cancelled task(s) still running after %.0f s", running, timeout_s)
                return

    def kill(self) -> None:
        """Abandon everything at once, as a crash would: cancel running tasks, complete nothing,
        stop heartbeating and do not unregister."""
        with self._cond:
            self._stopping = self._finished = self._killed = True
            self._cond.notify_all()
        self.client.close()
        self.runner.cancel()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every thread to end (after `stop` or `kill`); False if some still run at `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in self._threads:
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(worker.is_alive() for worker in self._threads)

    # -- session thread ------------------------------------------------------------------

    def _keep_session(self) -> None:
        backoff = Backoff()
        while True:
            with self._cond:
                if self._finished or (self._stopping and self._session is None):
                    return
                session = self._session
            if session is None:
                self._register(backoff)
                continue
            ended = functools.partial(self._session_ended, session)
            with self._cond:
                if self._cond.wait_for(ended, timeout=session.heartbeat_interval_s):
                    continue
            try:
                self.client.heartbeat(session.token)
            except Unauthorized:
                self._drop(session)
            except ServiceUnavailable as exc:
                self._outage.failed(exc)
            except Exception:
                log.exception("heartbeat failed")
            else:
                self._outage.succeeded()

    def _session_ended(self, session: RegisterResponse) -> bool:
        """Whether `session` is over: dropped, replaced, or the optimizer finished (hold the lock)."""
        return self._finished or self._session is not session

    def _register(self, backoff: Backoff) -> None:
        request = RegisterRequest(
            group=self.group, threads=self.threads, memory_bytes=self.memory_bytes, name=self.name
        )
        try:
            session = self.client.register(request)
        except ServiceUnavailable as exc:
            self._outage.failed(exc)
        except (UnknownGroup, Unauthorized) as exc:
            self._outage.succeeded()
            log.error("cannot register: %s; trying again", exc)
        except (OSError, ValueError) as exc:
            # The registration token file: missing until the Secret is mounted, or empty.
            log.error("cannot read the registration token: %s; trying again", exc)
        except Exception:
            log.exception("registering failed; trying again")
        else:
            self._outage.succeeded()
            backoff.reset()
            with self._cond:
                stopping = self._stopping
                if not stopping:
                    self._session = session
                    self._cond.notify_all()
            if stopping:
                # stop() ran while this registration was on its way and found nothing to unregister.
                self._unregister_token(session.token)
                return
            log.info(
                "registered with the task service as %s in group %s (%d threads)",
                session.optimizer_id,
                self.group,
                self.threads,
            )
            return
        self._pause(backoff.next_delay())

    def _drop(self, session: RegisterResponse) -> None:
        """The service no longer knows `session`: forget it so the session thread registers again."""
        with self._cond:
            if self._session is not session:
                return
            self._session = None
            self._cond.notify_all()
        if not self._stopping:
            log.warning(
                "the task service dropped optimizer %s (silent past its heartbeat timeout?); "
                "registering again",
                session.optimizer_id,
            )

    def _unregister(self) -> None:
        with self._cond:
            session, self._session = self._session, None
        if session is not None:
            self._unregister_token(session.token)
            log.info("unregistered optimizer %s", session.optimizer_id)

    def _unregister_token(self, token: str) -> None:
        backoff = Backoff()
        for attempt in range(1, UNREGISTER_ATTEMPTS + 1):
            try:
                self.client.unregister(token)
                return
            except Unauthorized:
                return
            except (ServiceUnavailable, RequestFailed) as exc:
                if attempt == UNREGISTER_ATTEMPTS:
                    log.warning(
                        "could not unregister (%s); the service drops this optimizer after its "
                        "heartbeat timeout and hands its tasks out again",
                        exc,
                    )
                else:
                    time.sleep(backoff.next_delay())

    def _pause(self, seconds: float) -> None:
        """Sleep, waking early when the optimizer stops."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=seconds)

    # -- poll threads ----------------------------------------------------------------------

    def _serve(self, thread: int) -> None:
        backoff = Backoff()
        handed: TaskAssignment | None = None  # what the last completion brought
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._session is not None)
                if self._stopping:
                    return
                session = self._session
            assert session is not None
            try:
                assignment = (
                    handed
                    if handed is not None
                    else self.client.poll(session.token, thread, self.poll_wait_s)
                )
                handed = None
            except Unauthorized:
                self._drop(session)
                continue
            except ServiceUnavailable as exc:
                if not self._stopping:
                    self._outage.failed(exc)
                    self._pause(backoff.next_delay())
                continue
            except RequestFailed as exc:
                log.error("thread %d: poll refused: %s", thread, exc)
                self._pause(backoff.next_delay())
                continue
            except Exception:
                log.exception("thread %d: polling failed", thread)
                self._pause(backoff.next_delay())
                continue
            backoff.reset()
            self._outage.succeeded()
            if assignment is None:
                continue
            with self._cond:
                if self._stopping:
                    log.info(
                        "thread %d: not starting task %s while stopping; it goes back to the queue",
                        thread,
                        assignment.task_id,
                    )
                    return
                self._busy += 1
            try:
                handed = self._execute(thread, session, assignment)
            except Exception:
                log.exception("thread %d: task %s failed unexpectedly", thread, assignment.task_id)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _execute(
        self, thread: int, session: RegisterResponse, assignment: TaskAssignment
    ) -> TaskAssignment | None:
        """Ack, run and complete the attempt; returns the next task its completion brought, if any."""
        token, attempt = session.token, assignment.attempt_id
        acked, _ = self._deliver(session, f"ack of {attempt}", lambda: self.client.ack(token, attempt))
        if acked is not _Delivery.ACCEPTED:
            log.warning(
                "thread %d: not running task %s: its ack was not accepted", thread, assignment.task_id
            )
            return None
        log.info(
            "thread %d: running task %s of %s (%s)",
            thread,
            assignment.task_id,
            assignment.table,
            _describe(assignment),
        )
        started, handed_at = time.monotonic(), time.time()
        try:
            outcome = self.runner.run(assignment.spec)
        except Exception as exc:
            log.exception("thread %d: task %s raised", thread, assignment.task_id)
            outcome = TaskOutcome(assignment.task_id, None, f"{type(exc).__name__}: {exc}")
        if self._killed:
            return None
        # A stopping optimizer starts no new task, so it does not ask for one.
        next_poll = None if self._stopping else NextPoll(thread=thread)
        if outcome.result is not None:
            request = CompleteRequest(result=outcome.result, next_poll=next_poll)
            log.info(
                "thread %d: task %s ended in %.1f s%s",
                thread,
                assignment.task_id,
                time.monotonic() - started,
                _waited(outcome, handed_at),
            )
        else:
            request = CompleteRequest(
                error=outcome.error or "the task ended with neither result nor error", next_poll=next_poll
            )
            log.warning("thread %d: task %s failed: %s", thread, assignment.task_id, request.error)
        # A completion that landed unheard may have handed this thread a task we never saw;
        # the thread's next poll takes it back (a poll returns what its thread still held).
        completed, handed = self._deliver(
            session, f"completion of {attempt}", lambda: self.client.complete(token, attempt, request)
        )
        if completed is _Delivery.ACCEPTED:
            return handed
        if not isinstance(outcome.result, RewriteTaskResult) or not isinstance(
            assignment.spec, RewriteTaskSpec
        ):
            return None  # file tasks write nothing
        if completed is _Delivery.REFUSED:
            discard_written_files(assignment.spec, outcome.result)
        else:
            log.warning("task %s: files it wrote are left for orphan cleanup", assignment.task_id)
        return None

    def _deliver(
        self, session: RegisterResponse, what: str, call: Callable[[], _T]
    ) -> tuple[_Delivery, _T | None]:
        """Make `call` until the service answers; while it is unreachable retry, unless the
        optimizer was killed or its stop is past the grace deadline. Returns how it went and,
        when accepted, what the call returned."""
        backoff = Backoff()
        # After a failed attempt the service may have acted on the call without our hearing
        # back, so a later refusal no longer proves that it ignored the call.
        maybe_delivered = False
        while True:
            try:
                answer = call()
            except ServiceUnavailable as exc:
                self._outage.failed(exc)
                maybe_delivered = True
                remaining = self._deadline - time.monotonic()
                if self._killed or remaining <= 0:
                    log.warning("giving up the %s: %s", what, exc)
                    return _Delivery.UNKNOWN, None
                with self._cond:
                    self._cond.wait_for(lambda: self._killed, timeout=min(remaining, backoff.next_delay()))
                continue
            except (Unauthorized, StaleAttempt, RequestFailed) as exc:
                log.warning("the %s was refused: %s", what, exc)
                if isinstance(exc, Unauthorized):
                    self._drop(session)
                return (_Delivery.UNKNOWN if maybe_delivered else _Delivery.REFUSED), None
            self._outage.succeeded()
            return _Delivery.ACCEPTED, answer


def _describe(assignment: TaskAssignment) -> str:
    """What the task works on, for the log."""
    spec = assignment.spec
    if isinstance(spec, RewriteTaskSpec):
        return f"{spec.kind}: {len(spec.data_files)} data, {len(spec.delete_files)} delete files"
    if isinstance(spec, DeleteFilesSpec):
        return f"delete {len(spec.paths)} files"
    return f"orphan scan of {len(spec.roots)} location(s)"


def _waited(outcome: TaskOutcome, handed_at: float) -> str:
    """How long the task waited for an executor and its Python worker before it began, for the
    log: the wake of a group scaling up from zero shows here."""
    if outcome.started_at is None:
        return ""
    return f" (began on an executor after {max(0.0, outcome.started_at - handed_at):.1f} s)"
