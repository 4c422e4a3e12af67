"""The shape of floe's code: no module over 600 lines, no class over 400, and pyiceberg's private
API touched only in `floe.tables.pyiceberg_compat`, where an upgrade is reviewed, with the
pyiceberg that module was tested with installed.

Each allowlist names today's offenders exactly. A new offender fails with its file named; an
entry that no longer offends fails too, so whoever splits a module or routes a contact through
the compatibility module deletes its line, and the lists only shrink.
"""

from __future__ import annotations

import ast
from importlib.metadata import version
from pathlib import Path

from floe.tables.pyiceberg_compat import PYICEBERG_TESTED

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (ROOT / "operator", ROOT / "optimizer_image")

MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400

# Modules over MAX_MODULE_LINES, relative to the repository root.
LONG_MODULES: frozenset[str] = frozenset()

# Classes over MAX_CLASS_LINES, as "module:Class".
LONG_CLASSES: frozenset[str] = frozenset()

# The one module that may touch pyiceberg's private API: what a pyiceberg upgrade must review.
PYICEBERG_COMPAT = "operator/floe/tables/pyiceberg_compat.py"

# Any other module's contacts with pyiceberg's private API: none is left; the list stays to
# name one, should a contact ever have to wait for the compatibility module.
PYICEBERG_CONTACTS: dict[str, frozenset[str]] = {}


def long_classes(source: str) -> dict[str, int]:
    """Each class in `source` over MAX_CLASS_LINES, with its length in lines."""
    return {
        node.name: length
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_CLASS_LINES
    }


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def pyiceberg_contacts(source: str) -> set[str]:
    """How `source` touches pyiceberg's private API.

    A private name imported from pyiceberg, a pyiceberg class subclassed or patched, and, in a
    module that imports pyiceberg, a ``_name`` read from anything but ``self``/``cls`` that the
    module does not define itself, from no other library's name (``getattr(x, "_name")`` included).
    """
    tree = ast.parse(source)
    imported: set[str] = set()
    foreign: set[str] = set()  # names imported from anything else: their private names are not pyiceberg's
    contacts: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pyiceberg":
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name) or any(_private(part) for part in node.module.split(".")):
                    contacts.add(f"imports {node.module}.{alias.name}")
        elif isinstance(node, ast.ImportFrom):
            foreign.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pyiceberg":
                    imported.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        contacts.add(f"imports {alias.name}")
                else:
                    foreign.add((alias.asname or alias.name).split(".")[0])
    if not imported:
        return contacts
    # Private names the module defines are its own, not pyiceberg's.
    own = {
        node.attr if isinstance(node, ast.Attribute) else node.name
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store))
        or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in imported:
                    contacts.add(f"subclasses {base.id}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if isinstance(node.ctx, ast.Store) and node.value.id in imported:
                contacts.add(f"patches {node.value.id}.{node.attr}")
            elif (
                _private(node.attr)
                and node.attr not in own
                and node.value.id not in {"self", "cls", *foreign}
            ):
                contacts.add(f"reads {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[0], ast.Name)
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            contacts.add(f"reads {node.args[0].id}.{node.args[1].value}")
    return contacts


def _modules() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for root in SOURCES
        for path in sorted(root.rglob("*.py"))
    }


def test_no_new_module_over_the_line_limit() -> None:
    long = {name for name, source in _modules().items() if len(source.splitlines()) > MAX_MODULE_LINES}
    new, gone = sorted(long - LONG_MODULES), sorted(LONG_MODULES - long)
    assert not new, f"modules over {MAX_MODULE_LINES} lines; split them: {new}"
    assert not gone, f"no longer over the limit; delete from LONG_MODULES: {gone}"


def test_no_new_class_over_the_line_limit() -> None:
    long = {f"{name}:{cls}" for name, source in _modules().items() for cls in long_classes(source)}
    new, gone = sorted(long - LONG_CLASSES), sorted(LONG_CLASSES - long)
    assert not new, f"classes over {MAX_CLASS_LINES} lines; split them: {new}"
    assert not gone, f"no longer over the limit; delete from LONG_CLASSES: {gone}"


def test_pyiceberg_private_api_only_where_allowed() -> None:
    found = {
        name: contacts
        for name, source in _modules().items()
        if name != PYICEBERG_COMPAT and (contacts := pyiceberg_contacts(source))
    }
    allowed = PYICEBERG_CONTACTS
    new = {
        name: sorted(c - allowed.get(name, frozenset()))
        for name, c in found.items()
        if c - allowed.get(name, frozenset())
    }
    gone = {
        name: sorted(c - found.get(name, set())) for name, c in allowed.items() if c - found.get(name, set())
    }
    assert not new, f"private pyiceberg API touched outside {PYICEBERG_COMPAT}; go through it: {new}"
    assert not gone, f"contacts gone; delete them from PYICEBERG_CONTACTS: {gone}"


def test_the_compat_module_holds_the_contacts() -> None:
    # Without this the exemption could hide a module that no longer is the compatibility layer.
    assert pyiceberg_contacts((ROOT / PYICEBERG_COMPAT).read_text(encoding="utf-8"))


def test_installed_pyiceberg_is_the_one_tested() -> None:
    installed = version("pyiceberg")
    assert installed == PYICEBERG_TESTED, (
        f"pyiceberg {installed} is installed, but floe was tested with {PYICEBERG_TESTED}: review "
        f"every private contact in {PYICEBERG_COMPAT}, then set PYICEBERG_TESTED there"
    )


def test_the_measures_find_synthetic_offenders() -> None:
    # Without this the guard could pass by measuring nothing.
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(f"class Big:\n{body}\n") == {"Big": MAX_CLASS_LINES + 1}
    assert long_classes(f"class Small:\n{body.split(chr(10), 1)[1]}\n") == {}
    source = (
        "from pyiceberg.io.pyarrow import _to_requested_schema, pyarrow_to_schema\n"
        "from pyiceberg.manifest import ManifestWriterV2\n"
        "from pyiceberg.table.metadata import TableMetadataV3\n"
        "class Writer(ManifestWriterV2):\n"
        "    def go(self) -> None:\n"
        "        self._meta = {}\n"
        "        self._own()\n"
        "    def _own(self) -> None:\n"
        "        other._own()\n"
        "def f(catalog, transform):\n"
        "    TableMetadataV3.model_dump_json = f\n"
        "    getattr(transform, '_transform', None)\n"
        "    return catalog._session, catalog.__class__\n"
    )
    assert pyiceberg_contacts(source) == {
        "imports pyiceberg.io.pyarrow._to_requested_schema",
        "subclasses ManifestWriterV2",
        "patches TableMetadataV3.model_dump_json",
        "reads transform._transform",
        "reads catalog._session",
    }
    assert pyiceberg_contacts("import pyiceberg._private\n") == {"imports pyiceberg._private"}
    # A module that does not import pyiceberg may use its own and other libraries' private names;
    # one that does may still use another library's.
    assert pyiceberg_contacts("def f(sc):\n    return sc._jsc\n") == set()
    spark = "import pyiceberg\nfrom pyspark import SparkContext\nSparkContext._active_spark_context\n"
    assert pyiceberg_contacts(spark) == set()


MAX_BENCH_SCRIPT_LINES = 300
MAX_README_LINES = 150


def test_benchmark_scripts_keep_only_what_they_measure() -> None:
    """Each `bench/<name>.py` and harness module within 300 lines: a script keeps what it measures."""
    scripts = [*(ROOT / "bench").glob("*.py"), *(ROOT / "bench" / "harness").glob("*.py")]
    assert len(scripts) > 10
    long = {
        str(path.relative_to(ROOT)): lines
        for path in scripts
        if (lines := len(path.read_text().splitlines())) > MAX_BENCH_SCRIPT_LINES
    }
    assert not long, f"over {MAX_BENCH_SCRIPT_LINES} lines: {long}"


def test_the_readme_fits_a_screen_or_two() -> None:
    """The README says what floe is and how to start; the docs site holds the rest."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md: {lines} lines, over {MAX_README_LINES}: move it to docs/"
