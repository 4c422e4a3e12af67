"""Wire format of the task service, API version v1 (HTTP/JSON, paths under ``/v1``).

Optimizers register (getting a token), heartbeat, poll per thread for a task, ack it
when they start, and complete it with the files written or an error. Register carries
``Authorization: Bearer <registration token>`` when the service has one; every call after
it carries ``Authorization: Bearer <token>``, the token register returned.

Within v1, fields are only ever added, and only optional ones: a completion may ask for
the thread's next task (``next_poll``), saving the poll's round trip; the answer then
carries ``task``, and only then, so clients that never ask see the answer they always did.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from floe.api.meta import MAX_EXECUTOR_CORES, MAX_EXECUTORS, MAX_SUBDOMAIN_LENGTH
from floe.protocol.assignment import TaskAssignment
from floe.protocol.file_tasks import DeleteFilesResult, OrphanScanResult
from floe.protocol.rewrite_task import RewriteTaskResult

API_VERSION = "v1"
MAX_OPTIMIZER_THREADS = MAX_EXECUTORS * MAX_EXECUTOR_CORES
"""Most task threads one optimizer registers: a group's at its largest. Quotas and the scheduler's
thread count are computed from it, so a larger claim is refused (422), not believed."""
MAX_GROUP_KEY_LENGTH = 2 * MAX_SUBDOMAIN_LENGTH + 1
"""A group's key in the service: its name, or ``namespace/name``."""
MAX_MEMORY_BYTES = 2**63 - 1
"""int64, as every quantity floe reads."""


def _result_kind(value: object) -> str | None:
    if isinstance(value, dict):
        fields = value
    elif hasattr(value, "__dict__"):
        fields = vars(value)
    else:
        return None  # not an object (a list, a number): no kind, and validation refuses it (422)
    kind = fields.get("kind")
    if isinstance(kind, str):
        return kind
    # The v1 compatibility path: optimizers older than the result's `kind` are told by fields.
    return "orphan-scan" if "orphans" in fields else "delete-files" if "deleted" in fields else "rewrite"


TaskResult = Annotated[
    Annotated[RewriteTaskResult, Tag("rewrite")]
    | Annotated[OrphanScanResult, Tag("orphan-scan")]
    | Annotated[DeleteFilesResult, Tag("delete-files")],
    Discriminator(_result_kind),
]
"""What a rewrite task or a maintenance job's file task returns, told apart by its `kind`, so a
body is checked against one of them and its errors name that one's fields. A result without
`kind` (from an optimizer older than the field) is told apart by its fields instead."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RegisterRequest(_Wire):
    """An optimizer introduces itself to the group it serves."""

    group: str = Field(min_length=1, max_length=MAX_GROUP_KEY_LENGTH)
    threads: int = Field(
        ge=1, le=MAX_OPTIMIZER_THREADS, description="task threads this optimizer runs in parallel"
    )
    memory_bytes: int = Field(ge=0, le=MAX_MEMORY_BYTES, description="memory available to its tasks")
    name: str = Field(
        default="", max_length=MAX_SUBDOMAIN_LENGTH, description="free-form, e.g. the driver pod name"
    )


class RegisterResponse(_Wire):
    """Identity and timing the optimizer must respect."""

    optimizer_id: str
    token: str
    heartbeat_interval_s: float
    heartbeat_timeout_s: float


class PollRequest(_Wire):
    """A thread asks for work, waiting up to ``wait_s`` for some (long poll)."""

    thread: int = Field(ge=0, lt=MAX_OPTIMIZER_THREADS)
    wait_s: float = Field(default=20.0, ge=0, le=60)


class PollResponse(_Wire):
    """The task handed out, or none when the wait ran out."""

    task: TaskAssignment | None = None


class NextPoll(_Wire):
    """With a completion: hand this thread its next task in the same answer, if one is ready."""

    thread: int = Field(ge=0, lt=MAX_OPTIMIZER_THREADS)


class CompleteRequest(_Wire):
    """The outcome of an attempt: exactly one of ``result`` and ``error``."""

    result: TaskResult | None = None
    error: str | None = None
    next_poll: NextPoll | None = Field(
        default=None,
        description="Also poll for this thread once the outcome is recorded, without waiting: the "
        "answer's `task` is its next task, or null when none is ready now (then poll as usual). "
        "Added in v1 after the first release; a service without it answers 422.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> CompleteRequest:
        if (self.result is None) == (self.error is None):
            raise ValueError("exactly one of result and error must be given")
        return self


class Accepted(_Wire):
    """Answer to heartbeat, ack, complete and unregister."""

    accepted: bool = True


class CompleteResponse(Accepted):
    """Answer to complete: ``task`` is present only when the request carried ``next_poll``."""

    task: TaskAssignment | None = Field(
        default=None, description="The thread's next task (only when asked for with `next_poll`)."
    )


class ExecutorsQuery(_Wire):
    """A driver asks how many executors its group should run, waiting up to ``wait_s`` for the
    count to differ from ``known`` (long poll)."""

    group: str = Field(
        min_length=1,
        max_length=MAX_GROUP_KEY_LENGTH,
        description="the group, as the driver registers with it",
    )
    known: int | None = Field(
        default=None, ge=0, le=MAX_EXECUTORS, description="the count the driver runs now"
    )
    wait_s: float = Field(default=0.0, ge=0, le=60, description="seconds to wait for another count")


class GroupExecutors(_Wire):
    """The executor count a group's driver should run, as the operator decided it."""

    group: str
    executors: int | None = Field(
        ge=0,
        le=MAX_EXECUTORS,
        description="null while the operator has not decided one since it started: the driver "
        "then keeps following its scale file",
    )


class ChangeNotice(_Wire):
    """What a change notice may add to the table its path names."""

    catalog: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="only the tables of this catalog (by the name their manifests give it); unset: every "
        "table floe optimizes under that identifier",
    )


class TablesNotified(_Wire):
    """The tables a change notice named: each is refreshed at the engine's next round."""

    tables: list[str] = Field(description="the OptimizedTables, as namespace/name")


class ErrorResponse(_Wire):
    """Body of every 4xx/5xx answer."""

    error: str
    detail: str = ""
