"""One attempt at one task, as the scheduler hands it to an optimizer thread (wire format v1)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Discriminator, Tag

from floe.protocol.file_tasks import DeleteFilesSpec, OrphanScanSpec
from floe.protocol.rewrite_task import RewriteTaskSpec


def _spec_kind(value: object) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in ("orphan-scan", "delete-files") else "rewrite"


TaskSpec = Annotated[
    Annotated[RewriteTaskSpec, Tag("rewrite")]
    | Annotated[OrphanScanSpec, Tag("orphan-scan")]
    | Annotated[DeleteFilesSpec, Tag("delete-files")],
    Discriminator(_spec_kind),
]
"""A rewrite task of an optimizing process (its kind left out of the JSON, or "positions"), or
a file task of a maintenance job."""


class TaskAssignment(BaseModel):
    """One attempt at one task; ``attempt_id`` names this attempt and no other."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt_id: str
    task_id: str
    process_id: str
    table: str
    spec: TaskSpec
