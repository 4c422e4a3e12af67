"""The Flink writer's process: ``flink_job.py`` on PyFlink in its own virtualenv (made by
``scripts/flink/build.sh``), fed one upsert at a time over stdin."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from .background import end_process
from .rows import Row
from .writers import SoakTable

JOB_SCRIPT = Path(__file__).resolve().parent / "flink_job.py"
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "flink" / "build.sh"
START_TIMEOUT_S = 300.0
UPSERT_TIMEOUT_S = 300.0


def flink_home() -> Path:
    """Build (once; cached) and return the directory with Flink's virtualenv and jars."""
    out = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True).stdout
    return Path(out.strip())


class FlinkHelper:
    """A long-lived PyFlink process that upserts through Iceberg's Flink sink."""

    def __init__(self, home: Path, catalog: str, properties: Mapping[str, str], workdir: Path) -> None:
        """Write to ``catalog`` (pyiceberg SQL catalog ``properties``) with Flink from ``home``."""
        self.home = home
        self.catalog = catalog
        database = Path(properties["uri"].removeprefix("sqlite:///")).resolve()
        self._args = [catalog, f"jdbc:sqlite:{database}", properties["warehouse"]]
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "flink.log"
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._ready = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the process; its JVM and catalog come up while the soak goes on."""
        jars = sorted(str(p) for p in (self.home / "jars").glob("*.jar"))
        env = {**os.environ, "HADOOP_CLASSPATH": os.pathsep.join(jars)}
        env.pop("PYTHONPATH", None)  # floe's modules are not for this interpreter
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            [str(self.home / "venv" / "bin" / "python"), str(JOB_SCRIPT), *self._args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )

    def upsert(self, table: SoakTable, rows: Sequence[Row]) -> None:
        """Upsert ``rows`` into ``table`` with one Flink job; raises RuntimeError with Flink's
        error when the job fails."""
        with self._lock:
            process = self._running()
            if not self._ready:
                self._expect_line(process, START_TIMEOUT_S, lambda line: line == "ready")
                self._ready = True
            request = {
                "table": table.identifier,
                "rows": [[k, c, v, int(ts.timestamp()), note] for k, c, v, ts, note in rows],
            }
            assert process.stdin is not None
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            reply = json.loads(
                self._expect_line(process, UPSERT_TIMEOUT_S, lambda line: line.startswith("{"))
            )
        if not reply["ok"]:
            raise RuntimeError(f"Flink's upsert job failed: {reply['error']}")

    def stop(self) -> None:
        """End the process (its stdin closed: it exits after the job in flight)."""
        process = self._process
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            end_process(process, timeout_s=60)
        if self._log is not None:
            self._log.close()

    def _running(self) -> subprocess.Popen[str]:
        process = self._process
        if process is None or process.poll() is not None:
            raise RuntimeError(f"the Flink process is not running; see {self.log_path}")
        return process

    def _expect_line(
        self, process: subprocess.Popen[str], timeout_s: float, wanted: Callable[[str], bool]
    ) -> str:
        """The next line of stdout that ``wanted`` accepts (PyFlink's own lines skipped)."""
        found: list[str] = []

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if wanted(line.strip()):
                    found.append(line.strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not found:
            raise RuntimeError(f"no answer from the Flink process within {timeout_s:g}s; see {self.log_path}")
        return found[0]
