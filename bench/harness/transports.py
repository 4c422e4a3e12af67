"""How the scheduling benchmark's simulated optimizers reach the task service: over HTTP with the real
client, or calling the in-memory service directly (no HTTP)."""

from __future__ import annotations

from typing import Protocol

from floe.protocol.assignment import TaskAssignment
from floe.protocol.client import TaskServiceClient
from floe.protocol.wire import CompleteRequest, PollRequest, RegisterRequest
from floe.service.task_service import TaskService

HTTP_POLL_WAIT_S = 1.0


class Transport(Protocol):
    """How a simulated optimizer reaches the service."""

    def register(self, group: str, threads: int) -> str:
        """Register an optimizer; returns its token."""
        ...

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """A task for the thread, or None."""
        ...

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack the attempt."""
        ...

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete the attempt; the next task when the request asked for it and one was ready."""
        ...


class HttpTransport:
    """The real `TaskServiceClient` (a keep-alive connection per thread, as optimizers have)."""

    def __init__(self, url: str) -> None:
        self.client = TaskServiceClient(url)

    def register(self, group: str, threads: int) -> str:
        """Register over HTTP."""
        request = RegisterRequest(group=group, threads=threads, memory_bytes=0, name="bench")
        return self.client.register(request).token

    def heartbeat(self, token: str) -> None:
        """Heartbeat over HTTP."""
        self.client.heartbeat(token)

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """Long poll over HTTP."""
        return self.client.poll(token, thread, wait_s=HTTP_POLL_WAIT_S)

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack over HTTP."""
        self.client.ack(token, attempt_id)

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete over HTTP."""
        return self.client.complete(token, attempt_id, request)


class DirectTransport:
    """The in-memory TaskService, called from the optimizer threads themselves."""

    def __init__(self, service: TaskService) -> None:
        self.service = service
        # Built once: validating a PollRequest per call would count as service CPU.
        self._polls = [PollRequest(thread=t, wait_s=0) for t in range(1024)]

    def register(self, group: str, threads: int) -> str:
        """Register in memory."""
        request = RegisterRequest(group=group, threads=threads, memory_bytes=0, name="bench")
        return self.service.register(request).token

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """Poll in memory; never waits."""
        return self.service.poll(token, self._polls[thread])

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack in memory."""
        self.service.ack(token, attempt_id)

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete in memory."""
        return self.service.complete(token, attempt_id, request)
