"""Storage credentials from a catalog Secret reach the executor through the mounted Secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from synthetic import spec

from floe.api.group import OptimizerGroupSpec
from floe.controller.objects import GroupRef, config_hash, driver_pod, executor_template, spark_config_map
from floe.protocol.storage import (
    CATALOG_SECRETS_DIR_ENV,
    StorageCredentialsMissing,
    executor_io_properties,
    task_io_properties,
)

SECRET = {
    "type": "rest",
    "uri": "https://catalog",
    "credential": "client:secret",
    "s3.endpoint": "http://s3",
    "s3.access-key-id": "AKIA",
    "s3.secret-access-key": "shh",
}


def test_tasks_never_carry_the_catalogs_authentication() -> None:
    io, secret = task_io_properties({**SECRET, "token": "t"}, None, {})
    assert "credential" not in io and "token" not in io
    assert io["s3.secret-access-key"] == "shh" and secret is None


def test_storage_credentials_from_the_secret_stay_behind_vended_ones_travel() -> None:
    # The REST catalog vended a session for this table: other keys, and a token the Secret lacks.
    table_io = {**SECRET, "s3.access-key-id": "ASIAVENDED", "s3.session-token": "vended-session"}
    io, secret = task_io_properties(table_io, "catalog", SECRET)
    assert secret == "catalog"
    assert io == {
        "type": "rest",
        "uri": "https://catalog",
        "s3.endpoint": "http://s3",
        "s3.access-key-id": "ASIAVENDED",
        "s3.session-token": "vended-session",
    }
    # Nothing of the Secret left out: the task names no Secret.
    assert task_io_properties({"s3.endpoint": "http://s3"}, "catalog", SECRET) == (
        {"s3.endpoint": "http://s3"},
        None,
    )


def _mount(root: Path, name: str, data: dict[str, str]) -> None:
    """A Secret volume as kubelet lays it out: ``..data`` → a timestamped dir, keys as symlinks."""
    directory = root / name
    stamped = directory / "..2026_11_25_12_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, value in data.items():
        (stamped / key).write_text(value)
    os.symlink(stamped.name, directory / "..data")
    for key in data:
        os.symlink(f"..data/{key}", directory / key)


def test_the_executor_reads_the_storage_credentials_of_the_mounted_secret(tmp_path: Path) -> None:
    _mount(tmp_path, "catalog", SECRET)
    task = spec("t").model_copy(
        update={"io_properties": {"s3.endpoint": "http://s3"}, "storage_secret": "catalog"}
    )
    properties = executor_io_properties(task, {CATALOG_SECRETS_DIR_ENV: str(tmp_path)})
    assert properties == {
        "s3.endpoint": "http://s3",
        "s3.access-key-id": "AKIA",
        "s3.secret-access-key": "shh",
    }


def test_a_secret_not_mounted_is_named(tmp_path: Path) -> None:
    task = spec("t").model_copy(update={"storage_secret": "catalog"})
    with pytest.raises(StorageCredentialsMissing, match=f"'catalog' are not mounted at {tmp_path}/catalog"):
        executor_io_properties(task, {CATALOG_SECRETS_DIR_ENV: str(tmp_path)})


def test_older_optimizers_see_no_new_field_when_unset() -> None:
    assert "storage_secret" not in spec("t").model_dump_json()


def test_a_groups_pods_mount_the_catalog_secrets_of_its_tables() -> None:
    ref = GroupRef(name="g", namespace="analytics", uid="u")
    spec = OptimizerGroupSpec()
    template = executor_template(None, ["lake", "warehouse"])
    executor = template["spec"]
    assert [v["secret"]["secretName"] for v in executor["volumes"]] == ["lake", "warehouse"]
    assert all(v["secret"]["optional"] and v["secret"]["defaultMode"] == 0o440 for v in executor["volumes"])
    assert [m["mountPath"] for m in executor["containers"][0]["volumeMounts"]] == [
        "/etc/floe/catalog-secrets/lake",
        "/etc/floe/catalog-secrets/warehouse",
    ]
    assert executor["securityContext"]["fsGroup"] == 185 and executor["automountServiceAccountToken"] is False
    pod = driver_pod(ref, spec, "img", "http://svc", "hash", None, "floe-driver", ["lake"])
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "catalog-secret-0",
        "mountPath": "/etc/floe/catalog-secrets/lake",
        "readOnly": True,
    } in mounts
    # Another set of Secrets is another driver: the config hash changes with it.
    assert config_hash(spark_config_map(ref, spec, "img", None, ["lake"])) != config_hash(
        spark_config_map(ref, spec, "img", None, ["lake", "warehouse"])
    )
    assert "volumes" not in executor_template(None)["spec"]
