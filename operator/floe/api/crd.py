"""The CustomResourceDefinitions of ``floe.dev/v1alpha1``, generated from the pydantic models.

``python -m floe.api.crd crds/`` writes ``crds/optimizergroups.floe.dev.yaml`` and
``crds/optimizedtables.floe.dev.yaml``; with ``--check`` it only compares and exits 1 on drift.
``tests/test_crd_generation.py`` fails when the committed files differ from what this module makes.

The schemas come from `floe.api.crd_schema`, their Kubernetes-only rules from `floe.api.crd_rules`;
this module adds each kind's names, printer columns and subresources, and writes the files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from floe.api.crd_schema import ResourceModel, openapi_schema
from floe.api.group import OptimizerGroup
from floe.api.models import API_GROUP, GROUP_PLURAL, TABLE_PLURAL, TABLE_SET_PLURAL, VERSION, OptimizedTable
from floe.api.table_set import OptimizedTableSet

CATEGORY = "floe"

HEADER = (
    "# Generated from operator/floe/api/models.py by `python -m floe.api.crd crds/`. Do not edit:\n"
    "# change the models (or operator/floe/api/crd.py) and regenerate.\n"
)


@dataclass(frozen=True)
class Column:
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


_AGE = Column("Age", "date", ".metadata.creationTimestamp", "time since the resource was created")


@dataclass(frozen=True)
class KindSpec:
    """Names, columns and subresources of one kind."""

    model: ResourceModel
    plural: str
    short_name: str
    description: str
    columns: tuple[Column, ...]
    scale: dict[str, str] | None = None
    extra_names: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.model.__name__

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{API_GROUP}"

    @property
    def file_name(self) -> str:
        return f"{self.crd_name}.yaml"


KIND_SPECS: tuple[KindSpec, ...] = (
    KindSpec(
        model=OptimizerGroup,
        plural=GROUP_PLURAL,
        short_name="og",
        description="OptimizerGroup is a pool of Spark executors and the scheduling policy that shares its "
        "task threads between the OptimizedTables of the group.",
        columns=(
            Column("Policy", "string", ".spec.policy", "how the group picks the next table to plan"),
            Column("Desired", "integer", ".status.desiredExecutors", "executor pods wanted now"),
            Column("Ready", "integer", ".status.readyExecutors", "executor pods ready"),
            Column("Threads", "integer", ".status.threads", "optimizer threads registered"),
            Column("Tables", "integer", ".status.tables", "OptimizedTables served by the group"),
            Column("Running Tasks", "integer", ".status.runningTasks", "tasks running now"),
            _AGE,
        ),
        scale={
            "specReplicasPath": ".spec.executors",
            "statusReplicasPath": ".status.readyExecutors",
            "labelSelectorPath": ".status.selector",
        },
    ),
    KindSpec(
        model=OptimizedTable,
        plural=TABLE_PLURAL,
        short_name="ot",
        description="OptimizedTable is one Apache Iceberg table that floe keeps compacted: the "
        "OptimizerGroup serving it, its quota and its self-optimizing thresholds.",
        columns=(
            Column("Group", "string", ".spec.group", "the OptimizerGroup serving the table"),
            Column("Table", "string", ".spec.table", "catalog identifier, namespace.table"),
            Column("State", "string", ".status.state", "optimizing state of the table"),
            Column(
                "Quota",
                "number",
                ".status.effectiveSpec.quota",
                "CPU share in threads (<= 1: fraction of the group), its own or inherited",
            ),
            Column("Occupation", "number", ".status.quotaOccupation", "quota used over the last hour"),
            Column("Health", "integer", ".status.health.score", "health score, 0 to 100"),
            Column("Waiting", "string", ".status.waiting.reason", "what the table waits for", priority=1),
            Column("Data Files", "integer", ".status.dataFiles", "live data files"),
            Column("Delete Files", "integer", ".status.deleteFiles", "live delete files"),
            Column("Last Optimized", "date", ".status.lastOptimized", "end of the latest optimizing"),
            _AGE,
        ),
    ),
    KindSpec(
        model=OptimizedTableSet,
        plural=TABLE_SET_PLURAL,
        short_name="ots",
        description="OptimizedTableSet keeps every table of a catalog that matches its patterns "
        "optimized: the operator lists the catalog and makes one OptimizedTable per selected table "
        "from the set's template.",
        columns=(
            Column("Group", "string", ".spec.group", "the OptimizerGroup serving the tables"),
            Column("Catalog", "string", ".spec.catalog.name", "the catalog listed"),
            Column("Matched", "integer", ".status.matchedTables", "catalog tables the patterns select"),
            Column("Managed", "integer", ".status.managedTables", "OptimizedTables the set owns"),
            Column(
                "Claimed", "integer", ".status.claimedTables", "selected tables other OptimizedTables serve"
            ),
            Column("Last Listed", "date", ".status.lastListed", "the set's latest listing of its catalog"),
            _AGE,
        ),
    ),
)


def crd(spec: KindSpec) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one kind."""
    subresources: dict[str, Any] = {"status": {}}
    if spec.scale is not None:
        subresources["scale"] = dict(spec.scale)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.crd_name, "labels": {"app.kubernetes.io/part-of": "floe"}},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": spec.plural,
                "singular": spec.kind.lower(),
                "shortNames": [spec.short_name],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": [column.render() for column in spec.columns],
                    "schema": {"openAPIV3Schema": openapi_schema(spec.model, spec.description)},
                }
            ],
        },
    }


def crds() -> dict[str, dict[str, Any]]:
    """Every CRD, by the name of its file in ``crds/``."""
    return {spec.file_name: crd(spec) for spec in KIND_SPECS}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (class docstrings) as ``|`` blocks; nothing else wrapped."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def render(document: dict[str, Any]) -> str:
    """The YAML text of a generated file, header included."""
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)
    return HEADER + body


def write_crds(directory: Path) -> list[Path]:
    """Writes every CRD into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, document in crds().items():
        path = directory / name
        path.write_text(render(document))
        written.append(path)
    return written


def stale_files(directory: Path) -> list[str]:
    """Names of the CRD files in ``directory`` that are missing or differ from freshly generated ones."""
    return [
        name
        for name, document in crds().items()
        if not (directory / name).is_file() or (directory / name).read_text() != render(document)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m floe.api.crd", description="Generate floe's CRDs from the pydantic models."
    )
    parser.add_argument("directory", type=Path, help="where to write the CRD YAML files, e.g. crds/")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the files drift")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.directory)
        for name in stale:
            print(f"{args.directory / name} is out of date", file=sys.stderr)
        if stale:
            print(f"regenerate with: python -m floe.api.crd {args.directory}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_crds(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
