"""mkdocs hooks (mkdocs.yml ``hooks:``): the reference pages generated from the code at build time.

* ``reference/cli.md``: the argparse parsers of ``floe`` and ``floe-optimizer`` (`ref_cli`);
* ``reference/manifests.md``: every field of the three kinds, from the CRDs the pydantic models
  generate (`ref_manifests`);
* ``reference/helm-values.md``: the chart's values, from ``charts/floe/values.schema.json`` and
  ``values.yaml`` (`values_reference`, which writes the chart README's table too);
* ``reference/task-service-api.md``: the task service's OpenAPI document (`ref_api`);
* the metrics table of ``reference/metrics.md``, where the page has ``<!-- metrics-table -->``
  (`ref_metrics`).

They are never written to ``docs/``, so they cannot go stale. A generator that fails stops the
build with the page and the error named.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
# This checkout's code, ahead of any installed copy of floe.
for path in (REPO_ROOT / "optimizer_image", REPO_ROOT / "operator"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))

import ref_api  # noqa: E402
import ref_cli  # noqa: E402
import ref_manifests  # noqa: E402
import ref_metrics  # noqa: E402
import values_reference  # noqa: E402
from ref_text import page_head, table  # noqa: E402

METRICS_PAGE = "reference/metrics.md"


def helm_values_page() -> str:
    """The chart's values: every key of values.schema.json with its type, default and description."""
    chart = values_reference.DEFAULT_CHART
    schema = json.loads((chart / "values.schema.json").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text()) or {}
    rows = list(values_reference.rows(schema, values))
    head = page_head(
        "values_reference",
        "charts/floe/values.schema.json and values.yaml",
        "Helm values",
        "Every value of the `floe` chart (`charts/floe`), with its type, its default (from "
        "`values.yaml`) and what it does. The chart refuses a value its schema does not "
        "describe, or one out of bounds, with the key named: `helm install` fails before "
        "anything is applied. Set values with `--set key=value` or `-f my-values.yaml`.",
    )
    body = table(("Key", "Type", "Default", "Description"), [(f"`{key}`", *rest) for key, *rest in rows])
    return "\n".join([*head, body])


GENERATED: dict[str, Callable[[], str]] = {
    "reference/cli.md": ref_cli.render,
    "reference/manifests.md": ref_manifests.render,
    "reference/helm-values.md": helm_values_page,
    "reference/task-service-api.md": ref_api.render,
}


def generate(name: str, render: Callable[[], str]) -> str:
    """``render()``, or a `PluginError` naming the page: the build stops, strict or not."""
    try:
        return render()
    except Exception as exc:
        raise PluginError(f"floe docs: cannot generate {name}: {type(exc).__name__}: {exc}") from exc


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the generated reference pages; a page of the same name in docs/ is an error."""
    for name, render in GENERATED.items():
        if files.get_file_from_path(name) is not None:
            raise PluginError(f"floe docs: {name} is generated at build time; remove docs/{name}")
        files.append(File.generated(config, name, content=generate(name, render)))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    """Fill the metrics table into the metrics page."""
    if page.file.src_uri != METRICS_PAGE:
        return markdown
    if ref_metrics.MARKER not in markdown:
        raise PluginError(f"floe docs: {METRICS_PAGE} lost its {ref_metrics.MARKER} line")
    return markdown.replace(ref_metrics.MARKER, generate(METRICS_PAGE, ref_metrics.render_table))
