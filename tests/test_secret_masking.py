"""Secrets are masked by a rule over names, not a list of them, and everything the user marks
secret is masked too, on every path floe prints or writes text: CLI errors, ``floe run``'s
console, status and Events (the controller's redactor), kopf's record of the handled spec."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from pyspark.sql import SparkSession

from floe.api.models import OptimizedTable
from floe.cli import main
from floe.controller.diffbase import DIGEST_PREFIX, CredentialFreeDiffBase
from floe.controller.status import table_status
from floe.kit.redaction import MASK, Redactor, is_credential_key, mask_credentials
from floe.kit.secret_names import suggests_secret
from floe.local.run import ManifestWatcher, render
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.optimizing.views import TableView
from floe.service.task_service import TaskService
from floe.tables.catalog import CatalogConfigError, catalog_ref_from_file

SECRET_NAMES = [
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "AWSAccessKeyId",
    "Signature",
    "sig",
    "api_key",
    "apiKey",
    "x-api-key",
    "code",
    "auth",
    "pwd",
    "passwd",
    "JSESSIONID",
    "session",
    "private_key_id",
    "s3.sse.key",
    "gcs.oauth2.token",
    "adls.sas-token.account",
    "jdbc.password",
    "key",
]
ORDINARY_NAMES = [
    "sv",
    "se",
    "sp",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-Algorithm",
    "X-Amz-SignedHeaders",
    "warehouse",
    "token_type",
    "expires_in",
    "token-expires-in-ms",
    "client_id",
    "rest.sigv4-enabled",
    "rest.signing-name",
    "rest.authorization-url",
    "oauth2-server-uri",
    "secretRef",
    "secretProperties",
    "codec",
    "tokenizer",
    "keyspace",
    "partition-key",
    "scope",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_name_that_suggests_a_secret_is_one_as_property_and_as_parameter(name: str) -> None:
    assert suggests_secret(name) and is_credential_key(name)
    text = f"GET https://h/p?a=1&{name}=V4LUE-{len(name)}&b=2 failed"
    assert mask_credentials(text) == f"GET https://h/p?a=1&{name}={MASK}&b=2 failed"


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_an_ordinary_name_stays_readable(name: str) -> None:
    assert not is_credential_key(name)
    text = f"GET https://h/p?{name}=plain-value"
    assert mask_credentials(text) == text


def test_parameters_are_masked_in_sas_tokens_encoded_urls_and_printed_mappings() -> None:
    assert (
        mask_credentials("sv=2022-11-02&ss=b&sp=rl&sig=SAS%2Bs3cr3t%3D")
        == f"sv=2022-11-02&ss=b&sp=rl&sig={MASK}"
    )
    encoded = "next=https%3A%2F%2Fh%2Fcb%3Fcode%3DC0DE%26state%3Dok"
    assert mask_credentials(encoded) == f"next=https%3A%2F%2Fh%2Fcb%3Fcode%3D{MASK}%26state%3Dok"
    printed = """{'client_secret': 'shh', "access_token": "tok", 'client_id': 'me'}"""
    assert (
        mask_credentials(printed)
        == f"""{{'client_secret': '{MASK}', "access_token": "{MASK}", 'client_id': 'me'}}"""
    )


def test_properties_the_user_marks_are_masked_before_and_after_they_are_read() -> None:
    redact = Redactor()
    redact.add({"tenant-handle": "T3NANT-opaque", "uri": "http://h"})
    assert "T3NANT-opaque" in redact("calling tenant T3NANT-opaque")
    redact.add({}, marked=["tenant-handle"])
    assert redact("calling tenant T3NANT-opaque") == f"calling tenant {MASK}"
    redact.add({"tenant-handle": "0THER-opaque"})
    assert redact("and 0THER-opaque") == f"and {MASK}"
    assert redact("at http://h") == "at http://h", "what is not a credential stays readable"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SECRETS = ("AT-s3cr3t", "SIG-s3cr3t", "SAS-s3cr3t", "AK-s3cr3t", "PW-s3cr3t", "T3NANT-s3cr3t")


def _unreachable_catalog() -> dict[str, Any]:
    """A REST catalog on a closed port whose URI carries every kind of secret: the error names
    the URL (requests puts it in its message)."""
    query = "access_token=AT-s3cr3t&X-Amz-Signature=SIG-s3cr3t&sv=2022&sig=SAS-s3cr3t&api_key=AK-s3cr3t"
    return {
        "type": "rest",
        "uri": f"http://127.0.0.1:{_closed_port()}/T3NANT-s3cr3t/api?password=PW-s3cr3t&{query}",
        "tenant": "T3NANT-s3cr3t",
    }


def test_cli_errors_mask_every_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "catalog.yaml"
    config.write_text(
        yaml.safe_dump({"name": "prod", "secretProperties": ["tenant"], **_unreachable_catalog()})
    )
    assert main(["-v", "optimize", "--catalog-config", str(config), "db.t"]) == 2
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "catalog 'prod' is unreachable" in printed and "sv=2022" in printed
    assert not [secret for secret in SECRETS if secret in printed], printed


def test_a_catalog_config_names_its_secret_properties_in_either_layout(tmp_path: Path) -> None:
    config = tmp_path / "catalog.yaml"
    config.write_text(yaml.safe_dump({"secretProperties": ["tenant"], "catalog": {"prod": {"tenant": "x"}}}))
    assert catalog_ref_from_file(config).secret_properties == ["tenant"]
    config.write_text(yaml.safe_dump({"name": "prod", "secretProperties": "tenant"}))
    with pytest.raises(CatalogConfigError, match="secret_properties"):
        catalog_ref_from_file(config)


def test_floe_run_masks_every_secret_it_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark: SparkSession
) -> None:
    """A table set and a table whose inline catalog cannot be reached: the set's listing error and
    the table's, printed by `floe run`, name the catalog's URL without its secrets."""
    catalog = {"name": "prod", "properties": _unreachable_catalog(), "secretProperties": ["tenant"]}
    manifests = [
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": "g"},
            "spec": {"executors": 1, "executorCores": 1},
        },
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTableSet",
            "metadata": {"name": "all"},
            "spec": {"catalog": catalog, "include": ["db.*"], "group": "g"},
        },
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t"},
            "spec": {"catalog": catalog, "table": "db.t", "group": "g"},
        },
    ]
    manifest = tmp_path / "floe.yaml"
    manifest.write_text(yaml.safe_dump_all(manifests))
    main(["run", "-f", str(manifest), "--once", "--timeout", "30", "--cores", "1"])
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "cannot list catalog 'prod'" in printed
    assert not [secret for secret in SECRETS if secret in printed], printed


def test_the_live_view_masks_what_the_manifests_catalogs_hold(tmp_path: Path) -> None:
    manifest = tmp_path / "t.yaml"
    catalog = {"name": "c", "properties": {"type": "sql", "jdbc.password": "PW-s3cr3t"}}
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "t"},
                "spec": {"catalog": catalog, "table": "db.t", "group": "g"},
            }
        )
    )
    watcher = ManifestWatcher(manifest, None)
    watcher.load()
    view = TableView(
        table_id="default/t",
        table="db.t",
        group="g",
        group_key="g",
        state="PENDING",
        quota=1.0,
        occupation=0.0,
        data_files=0,
        delete_files=0,
        running_tasks=0,
        queued_tasks=0,
        pending_reason="",
        last_result="",
        last_error="refused PW-s3cr3t [bold]x",
    )
    event = EngineEvent("default/t", "Warning", "CommitFailed", "at https://h/?X-Amz-Credential=AKIA1")
    table = render([view], [event], watcher.redact)
    cells = [str(cell) for column in table.columns for cell in column._cells]
    shown = "\n".join([*cells, str(table.caption)])
    assert "PW-s3cr3t" not in shown and "AKIA1" not in shown
    assert "\\[bold]" in shown, "texts are shown as they are, not read as rich markup"


def test_status_and_events_of_a_table_whose_catalog_fails_mask_every_secret() -> None:
    """The operator's status and Events pass through the redactor that learned the table's
    catalog (`Controller.redact`); here the engine tries the unreachable catalog for real."""
    catalog = {"name": "prod", "properties": _unreachable_catalog(), "secretProperties": ["tenant"]}
    table = OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"table": "db.t", "catalog": catalog, "group": "g"},
        }
    )
    redact = Redactor()
    redact.add(table.spec.catalog.properties, table.spec.catalog.secret_properties)
    engine = OptimizingEngine(TaskService(clock=time.time, registration_token="t"), refresh_interval_s=0.0)
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    try:
        runtime = engine.apply_table(table)
        engine.tick()
        written = json.dumps(table_status(runtime, 0.0, redact=redact)) + "".join(
            redact(e.message) for e in events
        )
    finally:
        engine.close()
    assert "is unreachable" in written and "sv=2022" in written
    assert not [secret for secret in SECRETS if secret in written], written


def _body(properties: dict[str, str], marked: list[str]) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t", "namespace": "ns", "uid": "3f0c-uid"},
            "spec": {
                "table": "db.t",
                "catalog": {"name": "c", "properties": properties, "secretProperties": marked},
            },
        }
    )


def test_kopfs_record_of_the_spec_holds_digests_not_credentials() -> None:
    storage = CredentialFreeDiffBase(prefix="floe.dev", secret=b"registration-token")
    properties = {"type": "rest", "uri": "http://h", "credential": "id:PW-s3cr3t", "tenant": "T3NANT-s3cr3t"}
    essence = storage.build(body=_body(properties, ["tenant"]))
    record = json.dumps(essence)
    assert "PW-s3cr3t" not in record and "T3NANT-s3cr3t" not in record
    stored = essence["spec"]["catalog"]["properties"]
    assert stored["uri"] == "http://h" and stored["credential"].startswith(DIGEST_PREFIX)
    assert storage.build(body=_body(properties, ["tenant"])) == essence, "the same spec, the same record"
    changed = storage.build(body=_body({**properties, "credential": "id:0ther"}, ["tenant"]))
    assert changed != essence, "a changed credential is a changed spec"
    other_key = CredentialFreeDiffBase(prefix="floe.dev", secret=b"another-token")
    digest = other_key.build(body=_body(properties, ["tenant"]))["spec"]["catalog"]["properties"][
        "credential"
    ]
    assert digest != stored["credential"], "without the operator's secret the digest cannot be made"
