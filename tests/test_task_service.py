"""The task service: registration, tokens, the wire calls and the keeper, on a fake clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from synthetic import result, spec

from floe.api.group import SchedulingPolicy
from floe.protocol.assignment import TaskAssignment
from floe.protocol.errors import InvalidRequest, StaleAttempt, Unauthorized, UnknownGroup
from floe.protocol.wire import CompleteRequest, NextPoll, PollRequest, RegisterRequest
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.task_service import TaskService


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def succeeded(task_id: str) -> CompleteRequest:
    """A completion carrying an empty result."""
    return CompleteRequest(result=result(task_id))


def failed(error: str) -> CompleteRequest:
    """A completion carrying an error."""
    return CompleteRequest(error=error)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(clock: Clock) -> TaskService:
    """A service with group "g": heartbeat timeout 60 s, ack 30 s, execute 600 s."""
    service = TaskService(clock, heartbeat_interval_s=10.0)
    service.add_group("g", SchedulingPolicy.QUOTA, 60.0, 30.0, 600.0)
    return service


def register(service: TaskService, threads: int = 2, name: str = "driver") -> str:
    """Register an optimizer with group "g"; returns its token."""
    return service.register(
        RegisterRequest(group="g", threads=threads, memory_bytes=1 << 30, name=name)
    ).token


def add_process(group: GroupScheduler, tasks: int, max_retries: int = 2, table_id: str = "t") -> list[str]:
    """Add a table with a process of ``tasks`` tasks; returns the task ids."""
    group.upsert_table(table_id, 1.0, None)
    task_ids = [f"{table_id}-p-t{index}" for index in range(tasks)]
    group.add_process(table_id, f"{table_id}-p", [spec(t) for t in task_ids], max_retries, False)
    return task_ids


def take(service: TaskService, token: str, thread: int = 0) -> TaskAssignment:
    """Poll and ack one task; fails the test when nothing is handed out."""
    assignment = service.poll(token, PollRequest(thread=thread))
    assert assignment is not None
    service.ack(token, assignment.attempt_id)
    return assignment


# -- registration and the happy path -----------------------------------------------------


def test_register_returns_identity_and_timing_and_adds_threads(service: TaskService) -> None:
    response = service.register(RegisterRequest(group="g", threads=3, memory_bytes=1, name="pod-0"))
    assert response.heartbeat_interval_s == 10.0
    assert response.heartbeat_timeout_s == 60.0
    assert response.optimizer_id.startswith("g-")
    assert len(response.token) >= 32
    register(service, threads=2)
    assert service.group("g").threads == 5
    [first, _] = service.optimizers("g")
    assert (first.optimizer_id, first.name, first.threads) == (response.optimizer_id, "pod-0", 3)


@pytest.mark.parametrize(
    ("presented", "message"),
    [(None, "missing registration token"), ("", "missing registration token"), ("guess", "wrong")],
)
def test_register_without_the_registration_token_is_refused_and_adds_nothing(
    clock: Clock, presented: str | None, message: str
) -> None:
    service = TaskService(clock, registration_token="the-registration-token")
    service.add_group("g")
    request = RegisterRequest(group="g", threads=2, memory_bytes=0)

    with pytest.raises(Unauthorized, match=message) as refused:
        service.register(request, presented)

    assert "the-registration-token" not in str(refused.value)
    assert service.optimizers("g") == [] and service.group("g").threads == 0
    token = service.register(request, "the-registration-token").token
    service.heartbeat(token)  # its own session token, not the registration token, from now on
    assert service.requires_registration_token and [o.threads for o in service.optimizers("g")] == [2]


def test_a_service_without_a_registration_token_admits_anyone(service: TaskService) -> None:
    request = RegisterRequest(group="g", threads=1, memory_bytes=0)
    assert not service.requires_registration_token
    service.register(request)
    service.register(request, "anything")
    assert len(service.optimizers("g")) == 2


def test_register_with_an_unknown_group_is_refused_and_adds_nothing(service: TaskService) -> None:
    with pytest.raises(UnknownGroup, match=r"unknown optimizer group 'nope' \(known groups: g\)"):
        service.register(RegisterRequest(group="nope", threads=1, memory_bytes=0))
    with pytest.raises(UnknownGroup):
        service.group("nope")
    assert service.optimizers("g") == []
    assert service.group("g").threads == 0


def test_an_optimizer_polls_acks_and_completes_a_process(service: TaskService, clock: Clock) -> None:
    token = register(service)
    group = service.group("g")
    assert service.poll(token, PollRequest(thread=0)) is None
    task_ids = add_process(group, 2)
    first = take(service, token, 0)
    second = take(service, token, 1)
    assert first.table == "t" and first.process_id == "t-p"
    clock.now += 60
    service.complete(token, first.attempt_id, succeeded(first.task_id))
    service.complete(token, second.attempt_id, succeeded(second.task_id))
    [outcome] = group.take_finished()
    assert outcome.succeeded
    assert [r.task_id for r in outcome.results] == task_ids
    assert group.stats(clock.now)["t"].occupation == pytest.approx(120.0 / 3600 / 2)


def test_poll_with_a_thread_the_optimizer_does_not_have_is_refused(service: TaskService) -> None:
    token = register(service, threads=2)
    add_process(service.group("g"), 1)
    with pytest.raises(InvalidRequest, match="thread 2 is out of range"):
        service.poll(token, PollRequest(thread=2))
    assert service.group("g").stats(0.0)["t"].planned == 1


def test_group_changes_apply_to_the_next_poll_and_keeper_run(service: TaskService, clock: Clock) -> None:
    token = register(service, threads=1)
    group = service.group("g")
    add_process(group, 1)
    service.update_group(
        "g", SchedulingPolicy.BALANCED, heartbeat_timeout_s=5.0, ack_timeout_s=1.0, execute_timeout_s=10.0
    )
    assert group.policy is SchedulingPolicy.BALANCED
    assert (group.ack_timeout_s, group.execute_timeout_s) == (1.0, 10.0)
    assert service.poll(token, PollRequest(thread=0)) is not None
    clock.now += 6
    assert len(service.run_keeper()) == 1
    with pytest.raises(UnknownGroup):
        service.update_group("nope", SchedulingPolicy.QUOTA, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="already exists"):
        service.add_group("g")


# -- tokens ------------------------------------------------------------------------------


def test_a_wrong_token_is_unauthorized_everywhere_and_changes_nothing(service: TaskService) -> None:
    token = register(service)
    group = service.group("g")
    add_process(group, 1)
    attempt = take(service, token)
    before = (group.stats(0.0), group.group_stats(0.0), service.optimizers("g"))
    calls: list[Callable[[], object]] = [
        lambda: service.heartbeat("forged"),
        lambda: service.poll("forged", PollRequest(thread=0)),
        lambda: service.ack("forged", attempt.attempt_id),
        lambda: service.complete("forged", attempt.attempt_id, succeeded(attempt.task_id)),
        lambda: service.unregister("forged"),
    ]
    for call in calls:
        with pytest.raises(Unauthorized, match="register again"):
            call()
    assert (group.stats(0.0), group.group_stats(0.0), service.optimizers("g")) == before


def test_an_unregistered_token_is_expired(service: TaskService) -> None:
    token = register(service)
    service.unregister(token)
    with pytest.raises(Unauthorized):
        service.heartbeat(token)
    assert service.group("g").threads == 0


# -- the keeper --------------------------------------------------------------------------


def test_heartbeats_keep_an_optimizer_and_silence_drops_it(service: TaskService, clock: Clock) -> None:
    token = register(service, threads=2)
    group = service.group("g")
    add_process(group, 2, max_retries=0)
    attempts = [take(service, token, 0), take(service, token, 1)]
    for _ in range(3):
        clock.now += 50
        service.heartbeat(token)
        assert service.run_keeper() == []
    optimizer_id = service.optimizers("g")[0].optimizer_id
    clock.now += 61
    assert service.run_keeper() == [optimizer_id]
    stats = group.stats(clock.now)["t"]
    assert (stats.planned, stats.running, stats.retries) == (2, 0, 0)
    assert group.threads == 0
    assert service.optimizers("g") == []
    with pytest.raises(Unauthorized):  # the dropped optimizer's token no longer works
        service.complete(token, attempts[0].attempt_id, succeeded(attempts[0].task_id))
    # Back under a new registration, its old attempts are stale and change nothing.
    token = register(service, threads=2)
    for attempt in attempts:
        with pytest.raises(StaleAttempt):
            service.ack(token, attempt.attempt_id)
        with pytest.raises(StaleAttempt):
            service.complete(token, attempt.attempt_id, succeeded(attempt.task_id))
    after = group.stats(clock.now)["t"]
    assert (after.planned, after.running, after.retries, after.succeeded) == (2, 0, 0, 0)


def test_any_call_counts_as_a_sign_of_life(service: TaskService, clock: Clock) -> None:
    token = register(service)
    for _ in range(3):
        clock.now += 50
        assert service.poll(token, PollRequest(thread=0)) is None
        assert service.run_keeper() == []


def test_the_keeper_returns_unacked_attempts_after_the_ack_timeout(
    service: TaskService, clock: Clock
) -> None:
    token = register(service, threads=1)
    group = service.group("g")
    add_process(group, 1, max_retries=0)
    lost = service.poll(token, PollRequest(thread=0))
    assert lost is not None
    clock.now += 31
    service.heartbeat(token)
    service.run_keeper()
    stats = group.stats(clock.now)["t"]
    assert (stats.planned, stats.retries) == (1, 0)
    with pytest.raises(StaleAttempt):
        service.ack(token, lost.attempt_id)
    again = take(service, token)
    assert again.task_id == lost.task_id and again.attempt_id != lost.attempt_id


def test_the_keeper_fails_overlong_attempts_using_retries_until_the_process_fails(
    service: TaskService, clock: Clock
) -> None:
    token = register(service, threads=1)
    group = service.group("g")
    [task_id] = add_process(group, 1, max_retries=1)
    take(service, token)
    clock.now += 601
    service.heartbeat(token)
    service.run_keeper()
    assert group.stats(clock.now)["t"].retries == 1
    take(service, token)
    clock.now += 601
    service.heartbeat(token)
    service.run_keeper()
    [outcome] = group.take_finished()
    assert not outcome.succeeded
    assert outcome.failures == {
        task_id: "no completion within the execute timeout of 600s (failed 2 of 2 attempts)"
    }


def test_reported_failures_use_retries(service: TaskService) -> None:
    token = register(service, threads=1)
    group = service.group("g")
    [task_id] = add_process(group, 1, max_retries=1)
    service.complete(token, take(service, token).attempt_id, failed("out of memory"))
    assert group.stats(0.0)["t"].retries == 1
    service.complete(token, take(service, token).attempt_id, failed("out of memory again"))
    [outcome] = group.take_finished()
    assert outcome.failures == {task_id: "out of memory again (failed 2 of 2 attempts)"}


def test_unregister_gives_tasks_back_without_using_retries(service: TaskService) -> None:
    leaving = register(service, threads=1)
    staying = register(service, threads=1)
    group = service.group("g")
    add_process(group, 2, max_retries=0)
    given_back = take(service, leaving)
    kept = take(service, staying)
    service.unregister(leaving)
    stats = group.stats(0.0)["t"]
    assert (stats.planned, stats.running, stats.retries) == (1, 1, 0)
    assert group.threads == 1
    service.complete(staying, kept.attempt_id, succeeded(kept.task_id))
    again = take(service, staying)
    assert again.task_id == given_back.task_id
    service.complete(staying, again.attempt_id, succeeded(again.task_id))
    [outcome] = group.take_finished()
    assert outcome.succeeded


# -- change notifications ----------------------------------------------------------------


def test_subscribers_are_woken_when_tasks_may_have_become_available(
    service: TaskService, clock: Clock
) -> None:
    calls: list[int] = []
    service.subscribe(lambda: calls.append(1))
    token = register(service, threads=1)
    group = service.group("g")
    calls.clear()
    add_process(group, 1)
    assert len(calls) == 2  # the new table (its quota limit), then the process
    lost = service.poll(token, PollRequest(thread=0))
    assert lost is not None
    assert len(calls) == 2
    clock.now += 31
    service.heartbeat(token)
    service.run_keeper()  # ack timeout: the task is PLANNED again
    assert len(calls) == 3
    clock.now += 61
    service.run_keeper()  # the optimizer is dropped
    assert len(calls) == 4


def test_a_subscriber_may_call_back_into_the_service(service: TaskService) -> None:
    seen: list[int] = []
    service.subscribe(lambda: seen.append(service.group("g").group_stats(0.0).pending_tasks))
    add_process(service.group("g"), 3)
    assert seen[-1] == 3


# -- complete with the next poll ---------------------------------------------------------


def test_a_completion_with_next_poll_hands_the_thread_its_next_task(service: TaskService) -> None:
    task_ids = add_process(service.group("g"), tasks=2)
    token = register(service)
    first = take(service, token)
    assert service.complete(token, first.attempt_id, succeeded(first.task_id)) is None  # did not ask

    second = service.poll(token, PollRequest(thread=0))
    assert second is not None
    request = CompleteRequest(result=result(second.task_id), next_poll=NextPoll(thread=1))
    assert service.complete(token, second.attempt_id, request) is None  # nothing left to hand out
    [outcome] = service.group("g").take_finished()
    assert outcome.succeeded and [r.task_id for r in outcome.results] == task_ids

    add_process(service.group("g"), tasks=1, table_id="u")
    third = take(service, token)
    add_process(service.group("g"), tasks=1, table_id="v")
    request = CompleteRequest(error="boom", next_poll=NextPoll(thread=0))
    handed = service.complete(token, third.attempt_id, request)
    # The failure is recorded first, so its retry is what the thread gets (ahead of "v" by id).
    assert handed is not None and handed.task_id == third.task_id and handed.attempt_id != third.attempt_id
    service.ack(token, handed.attempt_id)  # a task handed with a completion is acked as usual
    assert service.group("g").stats(0)["u"].retries == 1


def test_a_completion_with_next_poll_respects_the_quota_cap(service: TaskService) -> None:
    group = service.group("g")
    token = register(service, threads=4)
    for table_id, tasks in (("capped", 3), ("free", 1)):
        group.upsert_table(table_id, 0.25, None)  # one thread of four each
        group.add_process(
            table_id, f"{table_id}-p", [spec(f"{table_id}-t{i}") for i in range(tasks)], 2, False
        )
    group.upsert_table("planning", 0.25, None)
    group.set_pending("planning", True)
    assert group.next_table_to_plan(0.0) == "planning"  # while it plans, the cap is kept
    capped = take(service, token, thread=0)
    free = take(service, token, thread=1)
    assert (capped.table, free.table) == ("capped", "free")

    # "free" has nothing left and "capped" is at its limit: the chained poll gets nothing ...
    request = CompleteRequest(result=result(free.task_id), next_poll=NextPoll(thread=1))
    assert service.complete(token, free.attempt_id, request) is None
    # ... until a completion frees "capped"'s slot, which the chained poll takes again.
    request = CompleteRequest(result=result(capped.task_id), next_poll=NextPoll(thread=0))
    handed = service.complete(token, capped.attempt_id, request)
    assert handed is not None and handed.table == "capped"
    assert service.poll(token, PollRequest(thread=2)) is None


def test_a_refused_completion_hands_out_nothing_and_changes_nothing(service: TaskService) -> None:
    group = service.group("g")
    add_process(group, tasks=3)
    token = register(service, threads=2)
    first = service.poll(token, PollRequest(thread=0))
    assert first is not None
    superseding = service.poll(token, PollRequest(thread=0))  # the first attempt is stale now
    assert superseding is not None

    with pytest.raises(StaleAttempt):
        service.complete(token, first.attempt_id, CompleteRequest(error="late", next_poll=NextPoll(thread=1)))
    with pytest.raises(InvalidRequest, match="thread 2 is out of range"):
        service.complete(
            token, superseding.attempt_id, CompleteRequest(error="x", next_poll=NextPoll(thread=2))
        )
    stats = group.stats(0)["t"]
    assert (stats.running, stats.planned, stats.failed, stats.retries) == (1, 2, 0, 0)
