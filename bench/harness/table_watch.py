"""A watch on a namespace's OptimizedTables: each one's status, and when and what in it changed."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TableWatch:
    """A watch on the namespace's OptimizedTables: each one's status, and when and what changed."""

    namespace: str
    status: dict[str, dict[str, Any]] = field(default_factory=dict)
    changes: dict[str, list[tuple[float, frozenset[str]]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from kubernetes import client, watch

        api = client.CustomObjectsApi()
        version = ""
        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    api.list_namespaced_custom_object,
                    "floe.dev",
                    "v1alpha1",
                    self.namespace,
                    "optimizedtables",
                    resource_version=version,
                    timeout_seconds=300,
                )
                for event in stream:
                    item = event["object"]
                    version = item["metadata"]["resourceVersion"]
                    self._seen(event["type"], item["metadata"]["name"], item.get("status") or {})
                    if self._stop.is_set():
                        return
            except Exception as exc:  # the API server went away, or the version expired (410)
                if self._stop.is_set():
                    return
                print(f"watch of {self.namespace}: {exc}; watching again", file=sys.stderr)
                version = ""  # a fresh list: unchanged tables are not counted as changes
                time.sleep(1.0)

    def _seen(self, kind: str, name: str, status: dict[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            if kind == "DELETED":
                self.status.pop(name, None)
                return
            old = self.status.get(name, {})
            changed = frozenset(k for k in set(old) | set(status) if old.get(k) != status.get(k))
            self.status[name] = status
            if changed:
                self.changes.setdefault(name, []).append((now, changed))

    def count(self, ready: Callable[[dict[str, Any]], bool]) -> int:
        """How many tables' status satisfies `ready`."""
        with self._lock:
            return sum(1 for status in self.status.values() if ready(status))

    def known(self) -> int:
        with self._lock:
            return len(self.status)
