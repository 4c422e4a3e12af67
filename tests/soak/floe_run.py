"""``floe run`` as a subprocess (the real CLI) over the soak's catalog, with aggressive settings.

One process serves the whole soak: each seed's tables join by a manifest file of their own in the
watched directory and leave when it is removed (``floe run`` re-reads its manifests on change).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from .background import end_process
from .rows import RETENTION_DAYS
from .writers import SoakTable

GROUP = "soak"
LOG_TAIL_LINES = 30
# With -v floe logs every Event it posts: "INFO <kind> <table> <reason>: <message>".
EVENT = re.compile(r"^INFO Warning (?P<table>\S+) (?P<reason>\w+): (?P<message>.*)$")
# What floe's messages say when a job or a commit lost to a concurrent commit (after its own
# retries): no failure of floe's.
FLOE_CONFLICTS = (
    "CommitFailedException",
    "RetentionAbandoned",
    "after planning",
    "that may target data file",
    "no longer an ancestor of main",
    "main moved during each of",
    "main kept moving",
)


@dataclass(frozen=True)
class FloeWarning:
    """A Warning Event ``floe run`` posted for one table."""

    table: str
    """The OptimizedTable (``default/s3-v3-flat``)."""
    reason: str
    message: str

    @property
    def conflict(self) -> bool:
        """Whether it says a job or commit lost to a concurrent commit."""
        return any(marker in self.message for marker in FLOE_CONFLICTS)


def table_manifest(table: SoakTable, seed: int) -> dict[str, Any]:
    """An OptimizedTable for ``table``: small files, low triggers, every maintenance job on short
    intervals (orphan cleanup at its least age, 1h, so it mostly lists); some choices follow the
    seed."""
    rng = random.Random(f"manifest-{seed}-{table.identifier}")
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": f"{table.namespace}-{table.name}".replace("_", "-")},
        "spec": {
            "table": table.identifier,
            "catalog": {"name": table.catalog},
            "group": GROUP,
            "quota": 1,
            "targetSize": rng.choice(["4Ki", "16Ki", "64Ki"]),
            "fragmentRatio": rng.choice([2, 4, 8]),
            "minor": {"triggerFileCount": rng.choice([2, 3, 5]), "triggerInterval": "10s"},
            "major": {"duplicateRatio": rng.choice([0.01, 0.05, 0.2])},
            "full": {"triggerInterval": rng.choice(["20s", "45s"])},
            "minPlanInterval": "1s",
            "maintenance": {
                "snapshotRetention": {"maxAge": "45s", "minSnapshots": 1, "interval": "5s"},
                "orphanFiles": {"olderThan": "1h", "interval": "10s"},
                "manifests": {"triggerSmallManifests": 2, "interval": "5s"},
                "danglingDeletes": {"interval": "5s"},
                "dataRetention": {"column": "ts", "olderThan": f"{RETENTION_DAYS}d", "interval": "7s"},
                # 0: orphan cleanup and expiry hand their file work to the executors.
                "executorsAtFiles": rng.choice([0, 10000]),
            },
        },
    }


class FloeRun:
    """The ``floe run`` subprocess and its manifest directory."""

    def __init__(self, workdir: Path, catalog: str, properties: Mapping[str, str]) -> None:
        """Prepare ``workdir`` (manifests, catalog config, log) for catalog ``catalog``."""
        self.workdir = workdir
        self.manifests = workdir / "manifests"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "floe-run.log"
        self.config = workdir / "catalog.yaml"
        self.config.write_text(yaml.safe_dump({"catalog": {catalog: dict(properties)}}))
        group = {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": GROUP},
            "spec": {"executors": 1, "executorCores": 2, "executorMemory": "1Gi"},
        }
        (self.manifests / "group.yaml").write_text(yaml.safe_dump(group))
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._parsed = 0

    def start(self) -> None:
        """Start ``floe run`` (in the background; its Spark starts meanwhile)."""
        command = [
            sys.executable,
            "-m",
            "floe.cli",
            "-v",  # floe then logs each Event it posts
            "run",
            "-f",
            str(self.manifests),
            "--catalog-config",
            str(self.config),
            "--refresh-interval",
            "1",
            "--cores",
            "2",
        ]
        self._log = self.log_path.open("wb")
        env = {**os.environ, "COLUMNS": "220", "TERM": "dumb"}
        self._process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )

    def add(self, seed: int, tables: list[SoakTable]) -> None:
        """Have floe optimize and maintain ``tables`` (seed ``seed``'s)."""
        documents = [table_manifest(t, seed) for t in tables]
        path = self.manifests / f"seed-{seed}.yaml"
        staging = path.with_suffix(".tmp")
        staging.write_text(yaml.safe_dump_all(documents))
        staging.replace(path)

    def remove(self, seed: int) -> None:
        """Have floe leave seed ``seed``'s tables."""
        (self.manifests / f"seed-{seed}.yaml").unlink(missing_ok=True)

    def problem(self) -> str | None:
        """Why ``floe run`` is not running (its exit code and last lines), or None."""
        if self._process is None:
            return "floe run was not started"
        code = self._process.poll()
        return None if code is None else f"floe run exited with {code}:\n{self.tail()}"

    def tail(self) -> str:
        """The last lines ``floe run`` printed."""
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def warnings(self) -> list[FloeWarning]:
        """The Warning Events floe posted since the last call, from its log."""
        if not self.log_path.exists():
            return []
        with self.log_path.open("rb") as log:
            log.seek(self._parsed)
            text = log.read()
        complete = text.rfind(b"\n") + 1
        self._parsed += complete
        lines = text[:complete].decode(errors="replace").splitlines()
        return [
            FloeWarning(m["table"], m["reason"], m["message"][:400])
            for m in map(EVENT.match, lines)
            if m is not None
        ]

    def stop(self) -> None:
        """Stop it as Ctrl-C would (in-flight processes abandoned), then make sure it is gone."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            end_process(process, timeout_s=120)
        if self._log is not None:
            self._log.close()
