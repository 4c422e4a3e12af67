"""The docs site's reference pages (docs/reference/) against the code they describe.

The generated pages (CLI, manifests, Helm values, task service API, the metrics table) are
checked against what they are generated from, walked here independently of the generators: every
subcommand and option of the real parsers, every field of each kind's CRD schema with its bounds
and defaults, every chart value, every API operation and schema field, every metric. The pages
written by hand are checked against the code: every Event reason and condition type the operator
can post (read from the source's calls) is named on the events page, and every reason the page
names exists in the code, so the page cannot drift either way.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS_SCRIPTS = ROOT / "scripts" / "docs"
REFERENCE = ROOT / "docs" / "reference"
OPERATOR = ROOT / "operator" / "floe"
GENERATED = {"cli.md", "manifests.md", "helm-values.md", "task-service-api.md"}


def _load(name: str) -> ModuleType:
    if str(DOCS_SCRIPTS) not in sys.path:
        sys.path.append(str(DOCS_SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, DOCS_SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    return _load("mkdocs_hooks")


def sections(page: str, level: int) -> dict[str, str]:
    """The text under each heading of ``level`` (up to the next heading of that level or above)."""
    out: dict[str, str] = {}
    current = None
    for line in page.splitlines():
        match = re.match(r"^(#+) (.*)$", line)
        if match and len(match.group(1)) <= level:
            current = match.group(2).strip() if len(match.group(1)) == level else None
            if current is not None:
                out[current] = ""
            continue
        if current is not None:
            out[current] += line + "\n"
    return out


def row(text: str, first_cell: str) -> str:
    """The table row of ``text`` whose first cell is ``first_cell``."""
    for line in text.splitlines():
        if line.startswith(f"| {first_cell} |"):
            return line
    raise AssertionError(f"no row {first_cell}")


# --------------------------------------------------------------------------------------------------
# The site's configuration


def test_docs_the_nav_names_every_generated_page_and_the_hook_is_the_one_configured() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["hooks"] == ["scripts/docs/mkdocs_hooks.py"]
    nav = json.dumps(config["nav"])
    for name in [*GENERATED, "index.md", "metrics.md", "events-and-conditions.md"]:
        assert f'"reference/{name}"' in nav
    for name in GENERATED:
        assert not (REFERENCE / name).exists(), f"docs/reference/{name} is generated: it must not be in docs/"
    for name in ("index.md", "metrics.md", "events-and-conditions.md"):
        assert (REFERENCE / name).is_file()


def test_docs_the_hook_adds_the_generated_pages_and_refuses_a_written_copy(tmp_path: Path) -> None:
    from mkdocs.config import load_config
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File, Files

    docs, site = tmp_path / "docs", tmp_path / "site"
    docs.mkdir()
    config_file = tmp_path / "mkdocs.yml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "site_name": "floe",
                "docs_dir": str(docs),
                "site_dir": str(site),
                "hooks": [str(DOCS_SCRIPTS / "mkdocs_hooks.py")],
            }
        )
    )
    config = load_config(config_file=str(config_file))
    files = config.plugins.on_files(Files([]), config=config)
    assert {file.src_uri for file in files} == {f"reference/{name}" for name in GENERATED}
    for file in files:
        assert file.content_string.startswith("<!-- generated at build time")

    (docs / "reference").mkdir()
    (docs / "reference" / "cli.md").write_text("# CLI\n")
    written = Files([File("reference/cli.md", str(docs), str(site), False)])
    with pytest.raises(PluginError, match=r"reference/cli\.md is generated"):
        config.plugins.on_files(written, config=config)


def test_docs_a_failing_generator_fails_the_build_with_the_page_named(hooks: ModuleType) -> None:
    from mkdocs.exceptions import PluginError

    def broken() -> str:
        raise ValueError("the field spec.x has no description")

    message = r"cannot generate reference/cli\.md: ValueError: the field spec\.x"
    with pytest.raises(PluginError, match=message):
        hooks.generate("reference/cli.md", broken)


# --------------------------------------------------------------------------------------------------
# CLI


def test_docs_the_cli_page_has_every_subcommand_and_option_of_the_real_parsers() -> None:
    import argparse

    from floe.cli import build_parser
    from floe_optimizer.main import parser as optimizer_parser

    page = _load("ref_cli").render()
    commands = {**sections(page, 2), **sections(page, 3)}
    floe = build_parser()
    (sub_action,) = [a for a in floe._actions if isinstance(a, argparse._SubParsersAction)]
    parsers = {"floe": floe, "floe-optimizer": optimizer_parser()}
    parsers |= {f"floe {name}": sub for name, sub in sub_action.choices.items()}
    assert {"floe optimize", "floe demo", "floe run", "floe operator"} <= set(parsers)
    for name, parser in parsers.items():
        assert name in commands, f"no section for {name}"
        text = commands[name]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            for option in names:
                assert re.search(rf"`{re.escape(option)}[ `]", text), f"{name}: {option} is missing"
            line = next(line for line in text.splitlines() if f"`{names[0]}" in line)
            if action.required or not action.option_strings:
                assert "| required |" in line
            elif action.default not in (None, False, [], True):
                assert str(action.default) in line or "the host name" in line, f"{name} {names[0]}"
            if action.help:
                assert action.help.split()[0] in line


# --------------------------------------------------------------------------------------------------
# Manifests


def _schema_fields(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield path, sub
        yield from _schema_fields(sub, f"{path}.")
        yield from _schema_fields(sub.get("items", {}), f"{path}[].")
        values = sub.get("additionalProperties")
        if isinstance(values, dict):
            yield from _schema_fields(values, f"{path}.<key>.")


def test_docs_the_manifests_page_has_every_field_of_each_kind_with_its_bounds_and_defaults() -> None:
    from floe.api.crd import KIND_SPECS, crd
    from floe.api.crd_rules import INHERITED
    from floe.api.table import SET_OWN_FIELDS, OptimizedTableSpec

    page = _load("ref_manifests").render()
    for spec in KIND_SPECS:  # each kind with a real manifest of examples/
        block = r'\?\?\? example "Example: `examples/[-\w]+\.yaml`"\n\n    ```yaml\n(    .*\n)*?'
        assert re.search(rf"{block}    kind: {spec.kind}\n", page), spec.kind
    headings = sections(page, 3)
    settings = {path[1] for path in INHERITED["OptimizedTable"]}
    floe_defaults = OptimizedTableSpec.model_validate({"table": "a.b", "catalog": {"name": "c"}}).model_dump(
        mode="json", by_alias=True, exclude=set(SET_OWN_FIELDS)
    )
    table_spec = headings["OptimizedTable spec"]
    checked = 0
    for spec in KIND_SPECS:
        schema = crd(spec)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            text = headings[f"{spec.kind} {part}"]
            collapsed: list[str] = []
            for path, node in _schema_fields(schema["properties"][part], ""):
                under = next((c for c in collapsed if path.startswith(f"{c}.")), None)
                if under is not None:  # a table's settings, shown once under OptimizedTable spec
                    row(table_spec, f"`{path.removeprefix(under + '.')}`")
                    continue
                line = row(text, f"`{path}`")
                checked += 1
                if set(node.get("properties", {})) == settings and (spec.kind, part) != (
                    "OptimizedTable",
                    "spec",
                ):
                    assert "#optimizedtable-spec" in line
                    collapsed.append(path)
                    continue
                for key in ("maximum", "maxItems", "maxProperties"):
                    if key in node:
                        assert f"≤ {node[key]}" in line or f"< {node[key]}" in line, line
                if "enum" in node:
                    assert all(f"`{value}`" in line for value in node["enum"]), line
                if "default" in node and node["default"] != {}:
                    assert json.dumps(node["default"]).strip('"') in line, line
                top = path.split(".")[0]
                if (spec.kind, part) == ("OptimizedTable", "spec") and top in settings:
                    assert "inherited" in line or "| required |" in line, line
                    value: Any = floe_defaults
                    for key in path.split("."):
                        value = value.get(key) if isinstance(value, dict) else None
                    if value is not None and not isinstance(value, dict):
                        assert json.dumps(value).strip('"') in line, line
    assert checked > 100


# --------------------------------------------------------------------------------------------------
# Helm values


def test_docs_the_helm_values_page_has_every_value_of_the_chart(hooks: ModuleType) -> None:
    chart = ROOT / "charts" / "floe"
    schema = json.loads((chart / "values.schema.json").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    page = hooks.helm_values_page()
    keys = [key for key, *_ in _load("values_reference").rows(schema, values)]
    assert len(keys) > 30
    table_rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(table_rows) == len(keys)
    for key in keys:
        line = row(page, f"`{key}`")
        leaf: Any = values
        for part in key.split("."):
            leaf = leaf.get(part) if isinstance(leaf, dict) else None
        if isinstance(leaf, str | int | bool) and leaf != "":
            assert json.dumps(leaf) in line, line


# --------------------------------------------------------------------------------------------------
# Task service API


def test_docs_the_task_service_page_has_every_operation_and_every_schema_field() -> None:
    from floe.service.openapi import ROUTES

    document = json.loads((ROOT / "docs" / "task-service-openapi.json").read_text())
    page = _load("ref_api").render()
    operations = sections(page, 3)
    for route in ROUTES:
        assert f"`{route.method} {route.path}`" in page
        text = operations[route.summary]
        assert f"`{route.method} {route.path}`" in text
        if route.request is not None:
            assert f"[{route.request.__name__}](#{route.request.__name__.lower()})" in text
        for status in route.errors:
            assert f"| `{status}` |" in text
    for name, schema in document["components"]["schemas"].items():
        text = operations[name]
        for field in schema.get("properties", {}):
            row(text, f"`{field}`")


# --------------------------------------------------------------------------------------------------
# Metrics


def _metric_names() -> set[str]:
    """The name of every metric the source makes, read from the calls that make them."""
    tree = ast.parse((OPERATOR / "service" / "metrics.py").read_text())
    names = set()
    for node in ast.walk(tree):
        makers = ("Counter", "Gauge", "Histogram", "Summary", "GaugeMetricFamily")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in makers:
            first = node.args[0]
            assert isinstance(first, ast.Constant), ast.unparse(node)
            names.add(str(first.value))
    return names


def _metrics_page(hooks: ModuleType) -> str:
    class _Page:
        class file:
            src_uri = "reference/metrics.md"

    markdown: str = hooks.on_page_markdown((REFERENCE / "metrics.md").read_text(), _Page())
    return markdown


def test_docs_the_metrics_page_has_every_metric_and_every_label_value(hooks: ModuleType) -> None:
    names = _metric_names()
    assert {"floe_tasks_completed", "floe_group_demand_tasks", "floe_poll_duration_seconds"} <= names
    page = _metrics_page(hooks)
    assert "<!-- metrics-table -->" not in page
    for name in names:
        assert re.search(rf"`{name}(_total|_bucket)?`", page), f"{name} is not on the metrics page"
    labels = set()
    for path in OPERATOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "labels"
            ):
                labels |= {
                    str(leaf.value)
                    for arg in node.args
                    for leaf in ast.walk(arg)
                    if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str)
                }
    assert {"committed", "refused", "done", "accepted", "success", "failure"} <= labels
    for value in labels:
        assert f"`{value}`" in page, f"the label value {value!r} is not on the metrics page"


def test_docs_the_metrics_page_keeps_its_marker(hooks: ModuleType) -> None:
    from mkdocs.exceptions import PluginError

    class _Page:
        class file:
            src_uri = "reference/metrics.md"

    with pytest.raises(PluginError, match="metrics-table"):
        hooks.on_page_markdown("# Metrics\n", _Page())


# --------------------------------------------------------------------------------------------------
# Events and conditions


REASON = re.compile(r"^[A-Z][a-z]+[A-Za-z]*$")


class _Reasons(ast.NodeVisitor):
    """Event reasons and condition types and reasons in the calls that post or make them."""

    def __init__(self, constants: dict[str, str], tree: ast.Module, module: str) -> None:
        self.constants = constants
        self.module = module
        # Names assigned a reason in the module (``reason = "ScaledUp" if ... else "ScaledDown"``).
        self.assigned: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.IfExp | ast.Constant)
            ):
                self.assigned.setdefault(node.targets[0].id, set()).update(self.values(node.value))
        self.events: set[str] = set()
        self.condition_types: set[str] = set()
        self.condition_reasons: set[str] = set()

    def values(self, node: ast.expr | None) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name):
            found = set(getattr(self, "assigned", {}).get(node.id, set()))
            return found | ({self.constants[node.id]} if node.id in self.constants else set())
        if isinstance(node, ast.IfExp):
            return self.values(node.body) | self.values(node.orelse)
        return set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """A function named ``*_reason`` returns a condition reason (``degraded_reason``)."""
        if node.name.endswith("_reason"):
            for leaf in ast.walk(node):
                if isinstance(leaf, ast.Return):
                    self.condition_reasons |= self.values(leaf.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        args: list[ast.expr | None] = [*node.args, None, None, None, None]
        keywords = {k.arg: k.value for k in node.keywords}
        if name == "post_event":
            self.events |= self.values(keywords.get("reason", args[3]))
        elif name in ("post", "emit") and len(node.args) == 4:
            self.events |= self.values(args[2])
        elif name == "condition":
            self.condition_types |= self.values(args[0])
            self.condition_reasons |= self.values(args[2])
        elif name == "CatalogProblem":  # an unreadable Secret: an Event and a condition reason
            self.events |= self.values(args[1])
            self.condition_reasons |= self.values(args[1])
        elif name == "PodProblem":  # a pod problem: the group's Degraded reason
            self.condition_reasons |= self.values(args[3])
        elif name == "MaintenanceRefused":
            self.condition_reasons |= self.values(keywords.get("reason", args[2]))
        elif name == "_refuse" and len(node.args) > 2:  # a refused table: an Event and Degraded's reason
            self.events |= self.values(args[1])
            self.condition_reasons |= self.values(args[1])
        elif name == "add" and self.module == "pod_health":  # a pod problem: an Event and Degraded's reason
            for cause in self.values(args[0]):
                self.events |= {f"Driver{cause}", f"Executor{cause}"}
                self.condition_reasons |= {f"Driver{cause}", f"Executor{cause}"}
        self.generic_visit(node)


def code_reasons() -> tuple[set[str], set[str], set[str]]:
    """(Event reasons, condition types, condition reasons) the operator's code can write."""
    trees = {path: ast.parse(path.read_text()) for path in OPERATOR.rglob("*.py")}
    constants = {
        target.id: node.value.value
        for tree in trees.values()
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    events: set[str] = set()
    types: set[str] = set()
    reasons: set[str] = set()
    for path, tree in trees.items():
        visitor = _Reasons(constants, tree, path.stem)
        visitor.visit(tree)
        events |= visitor.events
        types |= visitor.condition_types
        reasons |= visitor.condition_reasons
    return {e for e in events if REASON.match(e)}, types, {r for r in reasons if REASON.match(r)}


def test_docs_the_reason_collector_finds_what_the_code_posts() -> None:
    events, types, reasons = code_reasons()
    assert {
        "Committed",
        "ScaledUp",
        "ScaledDown",
        "Scaled",
        "DriverOOMKilled",
        "ExecutorOutOfMemory",
    } <= events
    assert {"Unsupported", "InvalidTableProperty", "SecretNotFound", "ListFailed", "TableRenamed"} <= events
    assert {"Optimizing", "Pending", "Degraded", "CatalogReady", "MaintenanceAllowed", "Ready"} <= types
    assert {"Healthy", "GcDisabled", "LocationNotOwned", "Listed", "ScaledToZero", "NotChecked"} <= reasons
    assert {"TableUnavailable", "PlanningFailed", "CommitDelayed", "OptimizingFailed"} <= reasons
    assert {"SecretNotFound", "Unsupported", "ExecutorOOMKilled", "ExecutorOutOfMemory"} <= reasons


def _page_names(page: str, heading: str) -> set[str]:
    """The backticked names in the first columns of the tables under ``heading`` (## level)."""
    text = sections(page, 2)[heading]
    names = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            first = cells[0] if heading == "Events" else " ".join((cells[0], cells[2]))
            names |= set(re.findall(r"`([^`]+)`", first))
    return names


def test_docs_the_events_page_names_every_reason_and_condition_of_the_code_and_no_other() -> None:
    page = (REFERENCE / "events-and-conditions.md").read_text()
    events, types, reasons = code_reasons()
    on_page_events = _page_names(page, "Events")
    on_page_conditions = _page_names(page, "Conditions")
    from floe.optimizing.table_state import TableState

    states = {state.value for state in TableState}
    for reason in events:
        assert reason in on_page_events, f"the Event reason {reason} is not on the events page"
    for name in types | reasons:
        assert name in on_page_conditions, f"the condition type or reason {name} is not on the events page"
    known = events | types | reasons | states | {"Logging"}
    assert on_page_events <= known, f"not in the code: {sorted(on_page_events - known)}"
    assert on_page_conditions <= known, f"not in the code: {sorted(on_page_conditions - known)}"
