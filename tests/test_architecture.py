"""The package's folders are its layers: imports go down, never up, and no module imports itself in a circle.

Read from the source with `ast` (every import: at the top, inside functions, under TYPE_CHECKING), so a lazy or
type-only import counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "include" / "streamtable"

# Lowest first. A module may import modules of its own folder and of lower layers; folders of one rank are peers
# that never import each other. The facade (`streamtable`, `streamtable.expect`) is imported only by pipelines.
LAYERS = {
    "core": 1,
    "storage": 2,
    "quality": 3,
    "requests": 3,
    "operators": 4,
    "ingest": 5,
    "runtime": 5,
    "airflow": 6,
    "cli": 6,
    "deploy": 6,
    "testing": 6,
    "facade": 7,
    "pipelines": 8,
}
FACADE = {"streamtable", "streamtable.expect"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    if module in FACADE:
        return "facade"
    return module.split(".")[1]


def internal_imports(path: Path) -> set[str]:
    """The streamtable modules `path` imports (a `from X import name` counts as X.name when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the layers are checked on absolute names)"
            base = node.module or ""
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {
    name: {m for m in internal_imports(path) if m != name and not name.startswith(m + ".")}
    for name, path in MODULES.items()
}


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in MODULES} - {"streamtable"} <= set(LAYERS)


def test_imports_go_down_never_up_nor_sideways():
    wrong = []
    for source, targets in GRAPH.items():
        for target in targets:
            if target in FACADE and layer(source) != "pipelines":
                wrong.append(f"{source} -> {target}: only pipelines import the facade")
            elif layer(source) != layer(target) and LAYERS[layer(target)] >= LAYERS[layer(source)]:
                wrong.append(f"{source} ({layer(source)}) -> {target} ({layer(target)})")
    assert wrong == []


def test_no_import_cycles():
    """Tarjan's strongly connected components: every one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert cycles == []


def test_only_the_airflow_layer_imports_airflow():
    """Code that runs inside Spark jobs never imports Airflow."""
    importers = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n == "airflow" or n.startswith("airflow.") for n in names):
                importers.add(name)
    assert {layer(m) for m in importers} <= {"airflow"}


def test_public_api_is_the_facade_all():
    """`streamtable.__all__` lists each public name once, and each resolves."""
    import streamtable

    assert len(streamtable.__all__) == len(set(streamtable.__all__))
    for name in streamtable.__all__:
        assert getattr(streamtable, name) is not None


# Files outside storage/ that may open files or use the modules below, each for local files that are not the lake's.
LOCAL_FILES_ALLOWED = {
    "streamtable.ingest.files": "reads the user's FILE (a local input file), never a lake path",
    "streamtable.ingest.folders": "reads the files of the user's landing folder (local), never a lake path",
    "streamtable.runtime.spark_settings": "lists the jars folder of the installation",
    "streamtable.core.registry": "lists the pipeline folders users name (their code, not the lake)",
    "streamtable.cli.skeleton": "writes a new pipeline's files into the user's project folder",
    "streamtable.deploy.class_archive": "writes the JVM class archive beside the jars and reads the examples",
    "streamtable.cli.jars": "downloads jars into the installation's jars folder (local), never a lake path",
}
LAKE_UNSAFE_MODULES = {"fcntl", "shutil"}  # flock and rmtree/move: no such thing on object storage
LAKE_UNSAFE_CALLS = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("os", "makedirs"), ("os", "listdir")}


def lake_file_uses(path: Path) -> list[str]:
    """Where `path` uses a local-file operation: an import of fcntl or shutil, os.replace/rename/makedirs/listdir,
    `open(...)`, or a `.open(...)`/`.glob(...)`/`.rglob(...)`/`.iterdir()`/`.write_text(...)`/`.read_text()` call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in LAKE_UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LAKE_UNSAFE_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"open(...) at line {node.lineno}")
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                if (owner, func.attr) in LAKE_UNSAFE_CALLS:
                    found.append(f"{owner}.{func.attr}(...) at line {node.lineno}")
                elif func.attr in {"open", "glob", "rglob", "iterdir", "write_text", "read_text", "unlink", "mkdir"}:
                    found.append(f".{func.attr}(...) at line {node.lineno}")
    return found


def test_only_storage_touches_lake_files():
    """A lake may be on object storage: outside storage/ nothing flocks, renames, removes trees or opens files of it;
    everything goes through `streamtable.storage` (`Lake`, its `store`, leases, delta-rs with storage options)."""
    offenders = {
        name: uses
        for name, path in MODULES.items()
        if layer(name) != "storage" and name not in LOCAL_FILES_ALLOWED and (uses := lake_file_uses(path))
    }
    assert not offenders, f"local-file operations outside storage/ (use the lake's store): {offenders}"
    assert all(name in MODULES for name in LOCAL_FILES_ALLOWED), "an allowed module is gone: drop it from the list"


MAX_LINES = 400  # a module longer than this holds more than one job: split it by what each piece does


def test_no_module_is_over_400_lines():
    lines = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in lines.items() if n > MAX_LINES} == {}


# Names that two modules (or packages) still share, each with why it is kept: the list only shrinks.
SHARED_NAMES_ALLOWED = {
    "plugin": "airflow.plugin and testing.plugin are entry points named in pyproject.toml (Airflow's, pytest's): "
    "a rename needs every installed environment reinstalled",
    "batch": "core.batch (what `process` receives) beside the runtime's batch package: issue 37, runtime's rename",
    "compaction": "storage.compaction (the rewrite) and airflow.compaction (its DAG): issue 38's, to rename",
}


def test_no_two_modules_share_a_name():
    """`streamtable.x.batch` and `streamtable.y.batch` read alike in a traceback, an import and a review: one name,
    one meaning (packages count, by their folder's name)."""
    holders: dict[str, list[str]] = {}
    for name in MODULES:
        if name.count("."):
            holders.setdefault(name.rsplit(".", 1)[1], []).append(name)
    shared = {short: sorted(names) for short, names in holders.items() if len(names) > 1}
    assert {short: names for short, names in shared.items() if short not in SHARED_NAMES_ALLOWED} == {}
    assert set(SHARED_NAMES_ALLOWED) <= set(shared), "a name is unique now: drop it from SHARED_NAMES_ALLOWED"
