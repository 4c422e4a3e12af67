"""A real Iceberg REST catalog on a real S3-protocol object store, as test infrastructure.

Two servers, each a subprocess of the test run that logs to a file and is stopped by its
context manager (SIGTERM, then SIGKILL):

* moto's S3 server (from ``scripts/moto/build.sh``), the object store: ``moto_server``;
* Iceberg Java's REST catalog test server (from ``scripts/rest-catalog/build.sh``) backed by
  ``JdbcCatalog`` on a SQLite file, with ``S3FileIO`` writing to ``s3://<bucket>/warehouse``
  on that moto server: ``rest_catalog_server``.

``rest_s3_stack`` starts both, with a bucket. Both bind the address they are given: loopback
for tests on the host, the kind network's gateway for end-to-end tests whose pods must reach
them. The catalog hands out ``s3://`` locations and clients reach the object store at the same
endpoint URL, so ``client_properties`` are the same for the host and for pods when the servers
are bound to an address both reach.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyarrow.fs import S3FileSystem
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
MOTO_BUILD = SCRIPTS / "moto" / "build.sh"
REST_CATALOG_BUILD = SCRIPTS / "rest-catalog" / "build.sh"
LAUNCHER_CLASS = "org.apache.iceberg.rest.FloeRESTCatalogServer"

# moto accepts any credentials; these are the conventional fake ones.
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"

_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 20.0


def free_port(host: str) -> int:
    """Return a TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _build_output(script: Path) -> str:
    """Run a cached build script (cheap once built) and return what it prints."""
    return subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


class ServerProcess:
    """A server subprocess whose stdout and stderr go to ``log_path``."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: Mapping[str, str] | None = None):
        """Start ``command``; ``env`` replaces the environment when given."""
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
            )

    def wait_for_http(self, url: str, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Wait until ``url`` answers an HTTP GET (any status); raise if the process dies or time runs out."""

        def answers() -> None:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # the server is up; it just did not like the request

        self._wait_for(answers, url, timeout_s)

    def wait_for_port(self, host: str, port: int, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Wait until ``host``:``port`` takes a TCP connection; raise if the process dies or time runs out."""

        def accepts() -> None:
            with socket.create_connection((host, port), timeout=2):
                return

        self._wait_for(accepts, f"{_url_host(host)}:{port}", timeout_s)

    def _wait_for(self, probe: Callable[[], None], what: str, timeout_s: float) -> None:
        """Call ``probe`` until it raises no OSError."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                probe()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.process.returncode} before answering {what}; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name} did not answer {what} within {timeout_s:.0f}s; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the process, killing it if it has not exited within a grace period."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=_STOP_TIMEOUT_S)


@dataclass(frozen=True)
class MotoServer:
    """A running moto S3 server."""

    host: str
    port: int
    process: ServerProcess

    @property
    def endpoint(self) -> str:
        """The server's S3 endpoint URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://{_url_host(self.host)}:{self.port}"


@contextmanager
def moto_server(host: str, log_dir: Path, port: int | None = None) -> Iterator[MotoServer]:
    """Run moto's S3 server on ``host``:``port`` (a free port if None), logging to ``log_dir/moto.log``."""
    python = _build_output(MOTO_BUILD)
    port = free_port(host) if port is None else port
    process = ServerProcess(
        "moto S3 server",
        [python, "-m", "moto.server", "-H", host, "-p", str(port)],
        log_dir / "moto.log",
    )
    try:
        server = MotoServer(host, port, process)
        process.wait_for_http(f"{server.endpoint}/moto-api/")
        yield server
    finally:
        process.stop()


def s3_filesystem(endpoint: str) -> S3FileSystem:
    """Return a pyarrow S3 filesystem on ``endpoint`` with the fake credentials."""
    return S3FileSystem(
        access_key=ACCESS_KEY_ID,
        secret_key=SECRET_ACCESS_KEY,
        region=REGION,
        endpoint_override=endpoint,
        allow_bucket_creation=True,
    )


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the S3 server at ``endpoint`` (no error if it exists)."""
    s3_filesystem(endpoint).create_dir(bucket)


@dataclass(frozen=True)
class RestCatalogServer:
    """A running Iceberg REST catalog server (JDBC on SQLite behind it, S3FileIO for files)."""

    host: str
    port: int
    warehouse: str
    s3_endpoint: str
    database: Path
    process: ServerProcess

    @property
    def uri(self) -> str:
        """The catalog's base URI, e.g. ``http://127.0.0.1:41235`` (clients append ``/v1/...``)."""
        return f"http://{_url_host(self.host)}:{self.port}"


FAKETIME_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
"""Debian's libfaketime: a process it is preloaded into reads its clock's offset from a file."""


def _faked_clock(offset_file: Path) -> dict[str, str]:
    """The environment that runs a process on a clock `offset_file` moves (``+<seconds>s``, read
    at each reading of the clock): a benchmark's simulated time, which its writers stamp commits with."""
    if not FAKETIME_LIBRARY.exists():
        raise RuntimeError(f"{FAKETIME_LIBRARY} is missing: `make host-env` installs Debian's libfaketime")
    offset_file.write_text("+0s\n")  # the real time until the benchmark moves it
    return {
        "LD_PRELOAD": str(FAKETIME_LIBRARY),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        # The monotonic clock is moved too: with it left alone, the JVM's timed waits return at
        # once (their deadlines mix the two clocks) and its threads spin.
    }


def _server_environment(s3_endpoint: str, database: Path, warehouse: str) -> dict[str, str]:
    # CATALOG_X is catalog property x, with `__` for `-` and `_` for `.` (Iceberg's RCKUtils).
    catalog = {
        "CATALOG_URI": f"jdbc:sqlite:{database}",
        "CATALOG_WAREHOUSE": warehouse,
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        # One connection: concurrent commits through a pool of SQLite connections lock up.
        "CATALOG_CLIENTS": "1",
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": s3_endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_S3_ACCESS__KEY__ID": ACCESS_KEY_ID,
        "CATALOG_S3_SECRET__ACCESS__KEY": SECRET_ACCESS_KEY,
        "CATALOG_CLIENT_REGION": REGION,
    }
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("CATALOG_")}
    # The AWS SDK must not pick up a real profile or endpoint of the machine.
    for key in list(inherited):
        if key.startswith("AWS_"):
            del inherited[key]
    return {**inherited, **catalog, "AWS_REGION": REGION}


@contextmanager
def rest_catalog_server(
    host: str,
    s3_endpoint: str,
    bucket: str,
    work_dir: Path,
    port: int | None = None,
    java: str = "java",
    clock_file: Path | None = None,
) -> Iterator[RestCatalogServer]:
    """Run the REST catalog server on ``host``:``port`` (a free port if None).

    Its warehouse is ``s3://<bucket>/warehouse`` on the S3 server at ``s3_endpoint`` (the
    bucket must exist); its SQLite database is ``work_dir/rest-catalog.db`` and its log
    ``work_dir/rest-catalog.log``. With `clock_file`, its clock is offset by what that file says
    (`_faked_clock`). Returns once ``GET /v1/config`` answers.
    """
    lib = Path(_build_output(REST_CATALOG_BUILD))
    port = free_port(host) if port is None else port
    work_dir.mkdir(parents=True, exist_ok=True)
    database = (work_dir / "rest-catalog.db").resolve()
    warehouse = f"s3://{bucket}/warehouse"
    process = ServerProcess(
        "REST catalog server",
        [java, "-Xmx512m", "-cp", f"{lib}/*", LAUNCHER_CLASS, host, str(port)],
        work_dir / "rest-catalog.log",
        env={
            **_server_environment(s3_endpoint, database, warehouse),
            **(_faked_clock(clock_file) if clock_file else {}),
        },
    )
    try:
        server = RestCatalogServer(host, port, warehouse, s3_endpoint, database, process)
        process.wait_for_http(f"{server.uri}/v1/config")
        yield server
    finally:
        process.stop()


def client_properties(catalog_uri: str, s3_endpoint: str) -> dict[str, str]:
    """Return the catalog properties of a client of the REST catalog at ``catalog_uri``.

    They serve pyiceberg 0.12 (``type``, ``uri``, ``s3.*``; pyarrow's S3 filesystem is
    path-style with an endpoint unless ``s3.force-virtual-addressing``) and carry what Iceberg
    Java's ``S3FileIO`` reads as well (``s3.path-style-access``, ``client.region``), so
    ``ReferenceReader.register_catalog`` takes them as they are.
    """
    return {
        "type": "rest",
        "uri": catalog_uri,
        "s3.endpoint": s3_endpoint,
        "s3.access-key-id": ACCESS_KEY_ID,
        "s3.secret-access-key": SECRET_ACCESS_KEY,
        "s3.region": REGION,
        "s3.force-virtual-addressing": "false",
        "s3.path-style-access": "true",
        "client.region": REGION,
    }


def rest_catalog(name: str, properties: Mapping[str, str]) -> RestCatalog:
    """Return a pyiceberg REST catalog client named ``name`` with ``properties``."""
    catalog = load_catalog(name, **properties)
    assert isinstance(catalog, RestCatalog), type(catalog)
    return catalog


@dataclass(frozen=True)
class RestS3Stack:
    """A moto S3 server and a REST catalog whose warehouse is a bucket on it."""

    moto: MotoServer
    catalog: RestCatalogServer
    bucket: str

    @property
    def properties(self) -> dict[str, str]:
        """The catalog properties of a client (see ``client_properties``)."""
        return client_properties(self.catalog.uri, self.moto.endpoint)

    def client(self, name: str = "rest") -> RestCatalog:
        """Return a new pyiceberg client of the catalog."""
        return rest_catalog(name, self.properties)


@contextmanager
def rest_s3_stack(
    host: str, work_dir: Path, bucket: str = "warehouse", clock_file: Path | None = None
) -> Iterator[RestS3Stack]:
    """Run moto and a REST catalog on ``host`` (free ports), with ``bucket`` created; logs in
    ``work_dir``; the catalog's clock offset by `clock_file` where given (`_faked_clock`)."""
    with ExitStack() as stack:
        moto = stack.enter_context(moto_server(host, work_dir))
        create_bucket(moto.endpoint, bucket)
        catalog = stack.enter_context(
            rest_catalog_server(host, moto.endpoint, bucket, work_dir, clock_file=clock_file)
        )
        yield RestS3Stack(moto, catalog, bucket)


def kind_network_gateway() -> str:
    """The host's IPv4 address on the network of kind's nodes: pods reach a server bound there
    through their node, and the host reaches it directly, at the same URL."""
    if os.environ.get("KIND_EXPERIMENTAL_PROVIDER") == "podman":
        command = ["podman", "network", "inspect", "kind"]
    else:
        command = ["docker", "network", "inspect", "kind"]
    inspected = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)[0]
    if "subnets" in inspected:  # podman
        gateways = [str(s.get("gateway", "")) for s in inspected.get("subnets") or []]
    else:  # docker
        gateways = [str(c.get("Gateway", "")) for c in inspected["IPAM"]["Config"]]
    for gateway in gateways:
        if gateway and ":" not in gateway:
            return gateway
    raise RuntimeError(f"the kind network has no IPv4 gateway: {gateways}")
