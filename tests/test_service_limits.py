"""Strangers make the task service read nothing: tokens are checked on the headers, bodies are
bounded per call and in time, over real HTTP.

The memory test runs the service in a process of its own and measures its peak resident
memory (the kernel's VmHWM) while 20 clients without a token each send a 64 MiB body.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.protocol.client import TaskServiceClient
from floe.protocol.rewrite_task import RewriteTaskResult, WrittenFile
from floe.protocol.wire import CompleteRequest, RegisterRequest
from floe.service.http import COMPLETE_MAX_BYTES, SMALL_MAX_BYTES, TaskServiceServer
from floe.service.task_service import TaskService

GROUP = "g"
TOKEN = "limits-test-registration-token"
MiB = 1024 * 1024


@pytest.fixture
def server() -> Iterator[TaskServiceServer]:
    service = TaskService(clock=time.time, registration_token=TOKEN)
    service.add_group(GROUP)
    service.group(GROUP).upsert_table("ns/t", quota=1.0, last_optimized_s=None)
    with TaskServiceServer(service, keeper_interval_s=60, body_timeout_s=1.0) as running:
        yield running


def _raw(server_url: str, head: str, body: bytes = b"", pause_s: float = 0.0) -> tuple[int, str]:
    """Send `head` and `body` on a new connection (pausing before the body); the status and text
    of the answer, and (0, "") when the server closed the connection without one."""
    url = urllib.parse.urlsplit(server_url)
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=30) as sock:
        sock.sendall(head.encode())
        if pause_s:
            time.sleep(pause_s)
        with contextlib.suppress(OSError):  # closed on us: what the answer says is what counts
            sock.sendall(body)
        data = b""
        while chunk := _recv(sock):
            data += chunk
    if not data:
        return 0, ""
    status_line, _, rest = data.decode(errors="replace").partition("\r\n")
    return int(status_line.split()[1]), rest


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except (ConnectionResetError, TimeoutError):
        return b""


def _head(method: str, path: str, length: int, token: str | None = None) -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: floe\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{auth}\r\n"
    )


def _registered(server: TaskServiceServer) -> str:
    client = TaskServiceClient(server.url, registration_token=TOKEN)
    try:
        return client.register(RegisterRequest(group=GROUP, threads=1, memory_bytes=0)).token
    finally:
        client.close()


def test_a_stranger_is_refused_before_its_body_is_read(server: TaskServiceServer) -> None:
    # The body never comes: a service that read it first would wait for it.
    for path in ("/v1/poll", "/v1/tasks/x-a1/complete"):
        status, text = _raw(server.url, _head("POST", path, 64 * MiB, token="forged"), pause_s=0)
        assert status == 401 and "unauthorized" in text, (path, status, text)
    status, text = _raw(server.url, _head("POST", "/v1/optimizers", 64 * MiB))
    assert status == 401 and "missing registration token" in text


def test_bodies_over_the_calls_limit_are_refused_with_413(server: TaskServiceServer) -> None:
    token = _registered(server)
    status, text = _raw(server.url, _head("POST", "/v1/poll", SMALL_MAX_BYTES + 1, token))
    assert status == 413 and "payload_too_large" in text
    status, text = _raw(server.url, _head("POST", "/v1/tasks/x-a1/complete", COMPLETE_MAX_BYTES + 1, token))
    assert status == 413 and str(COMPLETE_MAX_BYTES) in text
    # A chunked body declares no length: it is cut off once it passes the limit.
    chunked = (
        f"POST /v1/poll HTTP/1.1\r\nHost: floe\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"x" * 8192
    body = b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
    status, text = _raw(server.url, chunked, body)
    assert status == 413 and "over the" in text


def test_a_body_that_does_not_arrive_in_time_is_refused_with_408(server: TaskServiceServer) -> None:
    token = _registered(server)
    body = json.dumps({"thread": 0, "wait_s": 0}).encode()
    status, text = _raw(server.url, _head("POST", "/v1/poll", len(body), token), body, pause_s=3.0)
    assert status == 408 and "did not arrive within 1 s" in text


def _widest_completion(files: int, columns: int) -> CompleteRequest:
    """A completion as large as the wire format makes one for `files` files of `columns` columns."""
    big = 10**15
    written = WrittenFile(
        path="s3://a-bucket-with-a-long-name/warehouse/analytics.db/events/data/day=2026-11-25/"
        "analytics.events-20261125T120000-abcdef-t0000-0a1b2c3d-a1-00000.parquet",
        record_count=big,
        size_bytes=big,
        column_sizes=dict.fromkeys(range(1, columns + 1), big),
        value_counts=dict.fromkeys(range(1, columns + 1), big),
        null_value_counts=dict.fromkeys(range(1, columns + 1), big),
        nan_value_counts=dict.fromkeys(range(1, columns + 1), big),
        lower_bounds=dict.fromkeys(range(1, columns + 1), "ab" * 16),
        upper_bounds=dict.fromkeys(range(1, columns + 1), "cd" * 16),
        split_offsets=[4] * 64,
    )
    result = RewriteTaskResult(
        task_id="t", files=[written] * files, rows_read=big, rows_deleted=0, bytes_read=big
    )
    return CompleteRequest(result=result)


def test_the_completion_limit_holds_64_files_of_a_1000_column_table_with_room_to_spare(
    server: TaskServiceServer,
) -> None:
    size = len(_widest_completion(64, 1000).model_dump_json())
    assert 4 * MiB < size < COMPLETE_MAX_BYTES // 1.5, size
    # Such a completion is read and judged, not refused for its size.
    token = _registered(server)
    body = _widest_completion(64, 1000).model_dump_json().encode()
    status, text = _raw(server.url, _head("POST", "/v1/tasks/unknown-a1/complete", len(body), token), body)
    assert status == 409 and "stale" in text


_SERVE = """
import sys, time
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
service = TaskService(clock=time.time, registration_token="secret")
service.add_group("g")
server = TaskServiceServer(service, keeper_interval_s=60)
server.start()
print(server.url, flush=True)
sys.stdin.read()
"""


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_twenty_strangers_sending_64_mib_each_leave_memory_where_it_was() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        # Warm up: a few honest-sized calls, so the baseline includes what serving costs anyway.
        for _ in range(3):
            _raw(url, _head("POST", "/v1/poll", 2, token="x"), b"{}")
        before = _peak_rss(process.pid)
        payload = b"{" + b" " * (64 * MiB - 2) + b"}"
        results: list[int] = []

        def stranger(path: str) -> None:
            results.append(_raw(url, _head("POST", path, len(payload), token="forged"), payload)[0])

        paths = ["/v1/tasks/x-a1/complete", "/v1/poll", "/v1/optimizers"] * 7
        threads = [threading.Thread(target=stranger, args=(path,)) for path in paths[:20]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        after = _peak_rss(process.pid)
    finally:
        process.kill()
        process.wait()
    assert after - before < 50 * MiB, f"peak memory grew by {(after - before) / MiB:.0f} MiB"
    assert len(results) == 20 and set(results) <= {401, 0}, results
