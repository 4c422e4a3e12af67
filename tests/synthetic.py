"""Task specs and results whose content does not matter: for scheduling and service tests."""

from __future__ import annotations

from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec


def spec(task_id: str) -> RewriteTaskSpec:
    """A task spec that is only ever queued and handed out, never executed."""
    return RewriteTaskSpec(
        task_id=task_id,
        io_properties={},
        table_schema_json="{}",
        partition_spec_json="{}",
        output_dir="file:///tmp/out",
        data_files=[],
        target_file_size_bytes=1024,
        delete_memory_limit_bytes=1024,
        file_name_prefix=f"{task_id}-prefix",
    )


def result(task_id: str) -> RewriteTaskResult:
    """A successful result that wrote nothing."""
    return RewriteTaskResult(task_id=task_id, files=[], rows_read=0, rows_deleted=0, bytes_read=0)
