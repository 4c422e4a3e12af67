"""`floe optimize` on bad input: clear messages, exit code 2, nothing changed."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from floe.cli import build_parser, main, operator_config
from floe.tables.writer import conform


def _catalog(tmp_path: Path) -> tuple[SqlCatalog, Path]:
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    catalog = SqlCatalog("cli", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("db")
    config = tmp_path / "catalog.yaml"
    config.write_text(yaml.safe_dump({"name": "cli", **props}))
    return catalog, config


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unknown_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, config = _catalog(tmp_path)
    assert main(["optimize", "--catalog-config", str(config), "db.nope"]) == 2
    assert "table 'db.nope' not found in catalog 'cli'" in capsys.readouterr().err


def test_unreachable_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "rest.yaml"
    config.write_text(
        yaml.safe_dump({"catalog": {"prod": {"type": "rest", "uri": f"http://127.0.0.1:{_closed_port()}"}}})
    )
    assert main(["optimize", "--catalog-config", str(config), "db.t"]) == 2
    assert "catalog 'prod' is unreachable" in capsys.readouterr().err


def test_credentials_never_reach_the_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    config = tmp_path / "rest.yaml"
    properties = {"type": "rest", "uri": f"http://floe:hunter2@127.0.0.1:{port}", "token": "tok-s3cr3t-value"}
    config.write_text(yaml.safe_dump({"catalog": {"prod": properties}}))
    assert main(["-v", "optimize", "--catalog-config", str(config), "db.t"]) == 2
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "catalog 'prod' is unreachable" in printed
    assert "hunter2" not in printed and "tok-s3cr3t-value" not in printed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("type: sql\nuri: x\n", "missing 'name'"),
        ("name: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("catalog: {}\n", "names no catalog"),
    ],
)
def test_malformed_catalog_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    assert main(["optimize", "--catalog-config", str(config), "db.t"]) == 2
    assert message in capsys.readouterr().err


def test_missing_catalog_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", "--catalog-config", str(tmp_path / "none.yaml"), "db.t"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_paths_are_not_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog, config = _catalog(tmp_path)
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    table = catalog.create_table("db.t", schema)
    table.append(conform(table, pa.table({"id": [1, 2]})))
    location = table.metadata.location.removeprefix("file://")

    assert main(["optimize", "--catalog-config", str(config), location]) == 2
    assert "is an Iceberg table location, not a catalog identifier" in capsys.readouterr().err
    assert main(["optimize", "--catalog-config", str(config), str(tmp_path)]) == 2
    assert "is not an Iceberg table" in capsys.readouterr().err


def test_bad_target_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog, config = _catalog(tmp_path)
    catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=True)))
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--target-size", "big"]) == 2
    assert "invalid --target-size 'big'" in capsys.readouterr().err


def test_bad_type_is_rejected_by_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["optimize", "--catalog-config", "x", "db.t", "--type", "huge"])
    assert info.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_dry_run_prints_the_plan_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, config = _catalog(tmp_path)
    table = catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=True)))
    for start in range(0, 30, 10):
        table.append(conform(table, pa.table({"id": list(range(start, start + 10))})))
    snapshot = table.current_snapshot()

    assert main(["optimize", "--catalog-config", str(config), "db.t", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "minor, 1 tasks" in printed and "<unpartitioned>" in printed
    table.refresh()
    assert table.current_snapshot() == snapshot


def test_dry_run_of_an_empty_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog, config = _catalog(tmp_path)
    catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=True)))
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--dry-run"]) == 0
    assert "nothing to optimize" in capsys.readouterr().out


def _small_table(tmp_path: Path) -> tuple[SqlCatalog, Path]:
    catalog, config = _catalog(tmp_path)
    table = catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=True)))
    for start in range(0, 30, 10):
        table.append(conform(table, pa.table({"id": list(range(start, start + 10))})))
    return catalog, config


def test_orphans_dry_run_lists_and_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, config = _small_table(tmp_path)
    data = Path(catalog.load_table("db.t").location().removeprefix("file://")) / "data"
    orphan = data / "left-behind.parquet"
    orphan.write_bytes(b"x" * 100)
    os.utime(orphan, (time.time() - 5 * 86400, time.time() - 5 * 86400))
    args = ["optimize", "--catalog-config", str(config), "db.t", "--type", "orphans"]

    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("would remove")] == [
        next(line for line in out.splitlines() if "left-behind.parquet" in line)
    ]
    assert "dry run: nothing changed" in out and orphan.exists()

    assert main(args) == 0
    assert "removed" in capsys.readouterr().out and not orphan.exists()
    assert len(catalog.load_table("db.t").scan().to_arrow()) == 30


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--type", "orphans", "--older-than", "10m"], "olderThan must be at least 1h"),
        (["--type", "retention", "--older-than", "30d"], "--type retention needs --column and --older-than"),
        (["--type", "expire", "--max-age", "soon"], "invalid duration 'soon'"),
        (
            ["--type", "expire", "--min-snapshots", "0"],
            "minSnapshots: Input should be greater than or equal to 1",
        ),
        (["--type", "manifests", "--manifest-trigger", "1"], "triggerSmallManifests"),
        (["--type", "retention", "--column", "nope", "--older-than", "1d"], "nope"),
    ],
)
def test_bad_maintenance_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    catalog, config = _small_table(tmp_path)
    snapshots = len(catalog.load_table("db.t").metadata.snapshots)
    assert main(["optimize", "--catalog-config", str(config), "db.t", *extra]) == 2
    assert message in capsys.readouterr().err
    assert len(catalog.load_table("db.t").metadata.snapshots) == snapshots


def test_expire_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog, config = _small_table(tmp_path)
    args = ["optimize", "--catalog-config", str(config), "db.t", "--type", "expire", "--max-age", "1ms"]
    assert main([*args, "--min-snapshots", "2"]) == 0
    assert len(catalog.load_table("db.t").metadata.snapshots) == 2
    assert len(catalog.load_table("db.t").scan().to_arrow()) == 30


# -- floe operator -----------------------------------------------------------------------------


def test_operator_flags_reach_its_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOE_REGISTRATION_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("chart-generated-token\n")
    args = build_parser().parse_args(
        [
            "operator",
            "--namespace=a,b",
            f"--registration-token-file={token_file}",
            "--peering-lifetime=15",
            "--secret-interval=2.5",
            "--refresh-interval=60",
            "--liveness=http://0.0.0.0:8081/healthz",
            "--driver-service-account=team-driver",
            "--external-metrics-port=6443",
            f"--external-metrics-cert-dir={tmp_path}",
            "--ui-port=0",
        ]
    )

    config = operator_config(args)

    assert config.namespaces == ["a", "b"]
    assert config.registration_token == "chart-generated-token"
    assert (config.peering_lifetime_s, config.secret_interval_s, config.refresh_interval_s) == (15, 2.5, 60)
    assert config.liveness_endpoint == "http://0.0.0.0:8081/healthz"
    assert config.driver_service_account == "team-driver"
    assert config.ui_port == 0  # not served
    assert config.external_metrics is not None
    assert (config.external_metrics.port, config.external_metrics.cert_dir) == (6443, tmp_path)
    defaults = operator_config(build_parser().parse_args(["operator"]))
    assert (
        defaults.peering_lifetime_s,
        defaults.secret_interval_s,
        defaults.refresh_interval_s,
        defaults.liveness_endpoint,
    ) == (60, 30.0, 10.0, None)
    # Without the chart's flag, the drivers run as the account the chart makes for release "floe".
    assert defaults.driver_service_account == "floe-driver"
    assert defaults.external_metrics is None  # not served unless asked for
    assert defaults.ui_port == 8080  # served unless turned off: the chart's port-forward target
    assert build_parser().parse_args(["run", "-f", "x"]).ui_port == 0  # floe run: only when asked
    # Without a token given, each process makes its own: never an open registration.
    assert defaults.registration_token and defaults.registration_token != config.registration_token
    monkeypatch.setenv("FLOE_REGISTRATION_TOKEN", "from-the-environment")
    from_env = operator_config(build_parser().parse_args(["operator"]))
    assert from_env.registration_token == "from-the-environment"
    assert defaults.history is None


def test_operator_history_flags_go_together_and_name_a_readable_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config_file = _catalog(tmp_path)
    args = ["operator", "--history-table", "floe_history.runs", "--history-catalog-config", str(config_file)]
    config = operator_config(build_parser().parse_args(args))
    assert config.history is not None and config.history.table == "floe_history.runs"
    assert config.history.catalog.name == "cli" and config.history.catalog.properties["type"] == "sql"
    assert main(["operator", "--history-table", "floe_history.runs"]) == 2
    assert "--history-table and --history-catalog-config go together" in capsys.readouterr().err
    assert main(["operator", "--history-catalog-config", str(config_file)]) == 2
    assert (
        main(["operator", "--history-table", "h.r", "--history-catalog-config", str(tmp_path / "no.yaml")])
        == 2
    )
    assert "no.yaml" in capsys.readouterr().err


def test_standalone_runs_kopf_without_peering() -> None:
    """kopf takes a peering name as "peering is mandatory": given one while standalone, it found no
    peering to watch and paused every handler for good, so `--standalone` reconciled nothing."""
    from floe.controller.leader import Leadership
    from floe.controller.main import kopf_settings

    standalone = operator_config(build_parser().parse_args(["operator", "--standalone"]))
    settings = kopf_settings(standalone)
    assert settings["standalone"] is True
    assert "peering_name" not in settings and "priority" not in settings
    peered = kopf_settings(operator_config(build_parser().parse_args(["operator", "--namespace=a"])))
    assert (
        peered["standalone"] is False and peered["peering_name"] == "floe" and peered["namespaces"] == ["a"]
    )

    class NoPeering:
        """A Kube on which reading or making a peering object fails the test."""

        @property
        def custom(self) -> object:
            raise AssertionError("a standalone replica touched the peering objects")

    leadership = Leadership(NoPeering(), "me", 1, "floe", ["a"], standalone=True)  # type: ignore[arg-type]
    leadership.ensure_peering_objects()
    assert leadership.is_leader() and leadership.is_leader()


def test_operator_refuses_a_missing_token_file_and_bad_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["operator", f"--registration-token-file={tmp_path / 'absent'}"]) == 2
    assert "--registration-token-file" in capsys.readouterr().err
    (tmp_path / "empty").write_text("\n")
    assert main(["operator", f"--registration-token-file={tmp_path / 'empty'}"]) == 2
    assert "is empty" in capsys.readouterr().err
    for flag in ("--peering-lifetime=0", "--secret-interval=-1", "--refresh-interval=0"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["operator", flag])
        assert "must be positive" in capsys.readouterr().err
    for flag in ("--external-metrics-port=-1", "--external-metrics-port=65536", "--external-metrics-port=x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["operator", flag])
        assert "--external-metrics-port" in capsys.readouterr().err


def test_history_without_a_reachable_cluster_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{_closed_port()}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "analytics"}}
                ],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["history", "orders"]) == 1
    assert "cannot read OptimizedTable 'orders'" in capsys.readouterr().err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["history", "orders"]) == 1
    assert "cannot read OptimizedTable 'orders'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["run", "-f", "m.yaml", "--history-table", "runs"], ["history", "t", "--history-table", "no dots.x y"]],
)
def test_a_history_table_that_is_not_an_identifier_is_refused_by_the_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert f"{argv[-1]!r} is not a table identifier, namespace.table" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history", "t", "--history-table", "floe.runs"], "--history-table needs --catalog-config"),
        (["run", "-f", "m.yaml", "--history-table", "floe.runs"], "--history-table needs --catalog-config"),
        (
            ["history", "t", "--history-table", "floe.runs", "--catalog-config", "c.yaml", "--limit", "0"],
            "--limit must be positive, not 0",
        ),
    ],
)
def test_history_options_without_what_they_need_exit_2_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text("")
    assert main(argv) == 2
    assert message in capsys.readouterr().err
