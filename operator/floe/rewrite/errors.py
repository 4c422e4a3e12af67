"""The errors a rewrite task fails with."""

from __future__ import annotations


class RewriteError(RuntimeError):
    """A rewrite task cannot be carried out; nothing it wrote is left behind."""


class DeleteSetTooLarge(RewriteError):
    """The task's delete sets do not fit in `delete_memory_limit_bytes`."""
