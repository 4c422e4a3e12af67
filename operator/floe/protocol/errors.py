"""Errors the task service and a group's scheduler refuse an optimizer's call with; the HTTP
layer maps each to one status code.

Every one of them but `ResultRefused` is raised before anything changes: a rejected call has
no effect. A refused result is recorded as the attempt's failure.
"""

from __future__ import annotations


class Unauthorized(Exception):
    """The token is unknown, or belongs to an optimizer that unregistered or was dropped.

    On register: the registration token is missing or wrong (``message`` says which).
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "unknown or expired optimizer token: register again (optimizers silent past the "
            "group's heartbeat timeout are dropped)"
        )


class UnknownGroup(Exception):
    """No optimizer group of that name exists."""

    def __init__(self, group: str, known: list[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown optimizer group {group!r} (known groups: {listed})")
        self.group = group


class ResultRefused(Exception):
    """A completion's result failed the service's checks (rows, files, metrics): the attempt is
    recorded as failed, using one of the task's retries, and the files it names are deleted."""

    def __init__(self, attempt_id: str, check: str, message: str) -> None:
        super().__init__(f"the result of attempt {attempt_id!r} is refused: {message}")
        self.attempt_id = attempt_id
        self.check = check


class ResultUnverifiable(Exception):
    """The result could not be checked now (its files' storage did not answer): nothing changed,
    send the completion again later."""


class StaleAttempt(Exception):
    """An ack or completion for an attempt that is no longer current, or not the caller's."""

    def __init__(self, attempt_id: str, reason: str) -> None:
        super().__init__(f"attempt {attempt_id!r} is stale ({reason}); its outcome is ignored")
        self.attempt_id = attempt_id
        self.reason = reason


class InvalidRequest(ValueError):
    """A well-formed call that contradicts what the optimizer registered or was given."""
