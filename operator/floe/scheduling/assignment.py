"""One attempt at one task, as the scheduler hands it to an optimizer thread (wire format v1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from floe.optimizer.task_spec import RewriteTaskSpec


class TaskAssignment(BaseModel):
    """One attempt at one task; ``attempt_id`` names this attempt and no other."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt_id: str
    task_id: str
    process_id: str
    table: str
    spec: RewriteTaskSpec
