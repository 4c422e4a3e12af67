"""Errors a group's scheduler refuses an optimizer's call with; nothing changes when one is raised.

The task service answers them as it answers its own (`floe.service.errors`): 409 and 422.
"""

from __future__ import annotations


class StaleAttempt(Exception):
    """An ack or completion for an attempt that is no longer current, or not the caller's."""

    def __init__(self, attempt_id: str, reason: str) -> None:
        super().__init__(f"attempt {attempt_id!r} is stale ({reason}); its outcome is ignored")
        self.attempt_id = attempt_id
        self.reason = reason


class InvalidRequest(ValueError):
    """A well-formed call that contradicts what the optimizer registered or was given."""
