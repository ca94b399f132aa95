"""The pipelines and input tables a command knows: the built-in ones and those in the user's folders.

Every `*.py` file of a folder named by `--pipelines DIR` or `STREAMTABLE_PIPELINES` (folders separated
by `:`) is imported, in name order, and its module-level `Pipeline`s and input tables (`changelog(...)`)
are registered beside the built-in ones (the modules of `streamtable.pipelines`). Loading runs no Spark.
Files starting with `_` are not loaded but importable by the others (`from _helpers import band`: the folder is on
`sys.path`, as Airflow's DAG folder is), and travel with the Spark job as the pipeline files do.
A file that cannot be imported, or that declares something inconsistent, is *broken*: it is reported in one
line naming the file and, where Python knows it, the line, and none of its declarations is registered; the
other files' declarations are (a pipeline that reads an input of a broken file is then broken too). Files load
in a fixed order (built-ins, then each folder's files by name), so when two files declare one name the later
one is the broken one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from streamtable.core.errors import StreamtableError, UnknownPipelineError, UnknownTableError
from streamtable.core.pipeline import Pipeline
from streamtable.core.source_check import undeclared_names
from streamtable.core.tables import SYSTEM, Table

ENV = "STREAMTABLE_PIPELINES"
BUILT_IN = "streamtable.pipelines"
USER_MODULE_PREFIX = "streamtable_user_"
NO_SPARK = ("SparkContext", "SparkSession", "SESSION_OR_CONTEXT")  # what PySpark's errors say when no Spark runs
T = TypeVar("T")


@dataclass
class Registry:
    """What the loaded files declare, where each name was declared, and the files that could not be used."""

    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    inputs: dict[str, Table] = field(default_factory=dict)
    origins: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, name) -> "file:line"
    files: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, name) -> the file declaring it
    errors: list[str] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)  # the files (paths) that are broken
    user_modules: list[ModuleType] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)  # the user's folders, importable (their `_` helper modules)
    order: list[str] = field(default_factory=list)  # the files declared from, in the order they were loaded

    def pipeline(self, name: str) -> Pipeline:
        """The pipeline called `name`, or UnknownPipelineError listing the pipelines."""
        return _named(self.pipelines, name, "pipeline", "pipelines", UnknownPipelineError)

    def input(self, name: str) -> Table:
        """The input table called `name`, or UnknownTableError listing the inputs."""
        return _named(self.inputs, name, "input table", "inputs", UnknownTableError)

    def writer(self, table: str) -> Pipeline | None:
        """The pipeline that writes `table` (None for an input or a system table)."""
        return next((p for p in self.pipelines.values() if table in {t.name for t in p.outputs}), None)

    def is_example(self, kind: str, name: str) -> bool:
        """Whether the pipeline or input table (`kind`: "pipeline", "input table") is a built-in one: an example, whose
        Airflow DAGs are made only where asked (`streamtable.airflow.catalog.examples_wanted`)."""
        file = self.files.get((kind, name))
        return file is not None and Path(file).parent == Path(importlib.import_module(BUILT_IN).__path__[0])

    def tables(self) -> dict[str, Table]:
        """Every table a user can name: inputs, outputs of pipelines, and the system tables."""
        outputs = {t.name: t for p in self.pipelines.values() for t in p.outputs}
        return {**self.inputs, **outputs, **SYSTEM}


def _named(values: dict[str, T], name: str, kind: str, plural: str, error: type[Exception]) -> T:
    """`values[name]`, or `error` naming what is unknown and listing what there is."""
    try:
        return values[name]
    except KeyError:
        raise error(f"unknown {kind} {name!r}; {plural} are: {', '.join(sorted(values))}{folders_hint()}") from None


def folders_hint() -> str:
    """What an unknown name's error adds when no folder of the user's pipelines is named: where they load from."""
    return "" if folders() else f"; pipelines of your own load from --pipelines DIR or {ENV}, and none is named"


def folders(extra: Iterable[str] = ()) -> list[Path]:
    """The user's pipeline folders: `STREAMTABLE_PIPELINES` (split on `:`), then `extra`, each once."""
    named = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p] + list(extra)
    return list(dict.fromkeys(Path(p).expanduser().resolve() for p in named))


def use_folders(extra: Sequence[str]) -> None:
    """Add folders to `STREAMTABLE_PIPELINES` (so Spark jobs and child processes see them too)."""
    if extra:
        os.environ[ENV] = os.pathsep.join(str(p) for p in folders(extra))
        current.cache_clear()


@cache
def current() -> Registry:
    """The registry of this process (built-ins and the env's folders), loaded once; broken files are left out
    (its `errors` say why: the CLI prints each once)."""
    return load(folders())


def pipelines() -> dict[str, Pipeline]:
    return current().pipelines


def get_pipeline(name: str) -> Pipeline:
    return current().pipeline(name)


def get_input(name: str) -> Table:
    return current().input(name)


def external_paths(registry: Registry | None = None) -> list[str]:
    """Where the declared Delta tables of other jobs are (a job reading one on S3 needs s3a, whatever its lake)."""
    inputs = (registry or current()).inputs.values()
    return sorted({t.path for t in inputs if t.external and t.path})


def load(user_folders: Sequence[Path]) -> Registry:
    """The built-in declarations, then each folder's files in name order; errors are collected, not raised."""
    registry = Registry()
    package = importlib.import_module(BUILT_IN)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{BUILT_IN}.{info.name}")
        _declare(registry, module, module.__file__ or info.name)
    for folder in user_folders:
        if not folder.is_dir():
            registry.errors.append(f"{folder}: not a folder of pipeline files ({ENV} or --pipelines)")
            continue
        registry.folders.append(folder.resolve())
        if str(folder.resolve()) not in sys.path:  # `import _helpers` in a pipeline file, as Airflow's DAG folder
            sys.path.append(str(folder.resolve()))
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith(("_", "test_")):
                continue
            loaded = _import_file(registry, path)
            if loaded is not None:
                registry.user_modules.append(loaded)
                _declare(registry, loaded, str(path))
    _check(registry)
    while _drop_broken(registry):  # what read a dropped input is broken in turn
        _check(registry)
    return registry


def _drop_broken(registry: Registry) -> bool:
    """Unregister every declaration of a broken file; True when something was dropped."""
    dropped = [(kind, name) for (kind, name), file in registry.files.items() if file in registry.broken]
    for kind, name in dropped:
        (registry.pipelines if kind == "pipeline" else registry.inputs).pop(name, None)
        del registry.files[(kind, name)], registry.origins[(kind, name)]
    registry.user_modules = [m for m in registry.user_modules if m.__file__ not in registry.broken]
    return bool(dropped)


def _import_file(registry: Registry, path: Path) -> ModuleType | None:
    """Import one user file under a name of its own; a failure becomes one error line naming file and line."""
    digest = hashlib.sha256(str(path.parent).encode()).hexdigest()[:8]
    name = f"{USER_MODULE_PREFIX}{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[name]
        registry.broken.add(str(path))
        registry.errors.append(f"{path}:{e.lineno}: SyntaxError: {e.msg}")
        return None
    except Exception as e:  # the user's code: any error is reported, not raised
        del sys.modules[name]
        frames = traceback.extract_tb(e.__traceback__)
        own = next((f for f in reversed(frames) if f.filename == str(path)), None)
        where = f"{path}:{own.lineno}" if own else str(path)
        registry.broken.add(str(path))
        registry.errors.append(f"{where}: {_spark_at_import(e, frames, own) or _reason(e)}")
        return None
    return module


def _reason(e: Exception) -> str:
    """The error's first line; a Python error's with its type (`NameError: ...`), streamtable's own without (a
    declaration refused while the file ran reads as one refused when it is checked)."""
    return _first_line(e) if isinstance(e, StreamtableError) else f"{type(e).__name__}: {_first_line(e)}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _spark_at_import(e: Exception, frames: traceback.StackSummary, own: traceback.FrameSummary | None) -> str | None:
    """What to do when the file's import failed inside PySpark for want of a running Spark (a Column, UDF or Window
    made at import, before any command starts Spark: PySpark asserts a SparkContext); None for any other error."""
    in_pyspark = bool(frames) and "pyspark" in Path(frames[-1].filename).parts
    if not in_pyspark or not (isinstance(e, AssertionError) or any(w in str(e) for w in NO_SPARK)):
        return None
    made = f" ({own.line})" if own is not None and own.line else ""
    return (
        f"PySpark used at import{made}, before Spark starts (a command loads the file first): make columns, "
        "UDFs and windows inside process or a function it calls"
    )


def _declare(registry: Registry, module: ModuleType, file: str) -> None:
    """Register a module's own pipelines and input tables (not those it imported from another file)."""
    registry.order.append(file)
    for value in list(vars(module).values()):
        if isinstance(value, Pipeline):
            _add(registry, "pipeline", value.name, value, file)
        elif isinstance(value, Table) and value.kind == "input":
            if registry.inputs.get(value.name) is value:
                continue
            _add(registry, "input table", value.name, value, file)


def _where(value: Pipeline | Table, file: str) -> str:
    return value.declared_at or file


def _add(registry: Registry, kind: str, name: str, value: Pipeline | Table, file: str) -> None:
    """Register `value` declared in `file`; a name declared before (by an earlier file) makes `file` broken."""
    into: dict = registry.pipelines if kind == "pipeline" else registry.inputs
    where = _where(value, file)
    if name in into:
        if into[name] is not value:
            registry.broken.add(file)
            registry.errors.append(f"{where}: {kind} {name!r} is already declared in {registry.origins[(kind, name)]}")
        return
    into[name] = value
    registry.origins[(kind, name)] = where
    registry.files[(kind, name)] = file


def _check(registry: Registry) -> None:
    """The declarations fit together: known inputs, keyed tables, one writer per table, and the names `process`
    passes to its batch are declared ones (`source_check`)."""
    writers: dict[str, str] = {}
    reserved = set(SYSTEM) | set(registry.inputs)
    for pipeline in list(registry.pipelines.values()):
        where = registry.origins[("pipeline", pipeline.name)]
        problems = [
            f"reads the unknown input {n!r} (an input is found as a variable of a pipeline file: assign its "
            f"declaration, `{n.upper()} = changelog({n!r}, ...)`)"
            for n in pipeline.inputs
            if n not in registry.inputs
        ]
        problems += [
            f"reads {n!r} as a stream, which declares no time column (time_column=None): a stream's records need "
            "their event time; read it in tables= or declare its time column"
            for n in pipeline.streams
            if n in registry.inputs and registry.inputs[n].time_column is None
        ]
        columns = {n: [c.name for c in t.columns] for n, t in registry.inputs.items() if n in pipeline.inputs}
        problems += [p for records in pipeline.records for p in records.unknown_columns(columns)]
        ticks = registry.inputs.get(pipeline.ticks.into) if pipeline.ticks else None
        if ticks is not None and ticks.external:
            problems.append(f"appends ticks to {ticks.name!r}, a Delta table of another job (never written)")
        for table in pipeline.outputs + pipeline.state:
            if table.kind == "table" and not table.keys:
                problems.append(f"declares the table {table.name!r} without keys")
            if table.name in reserved and _declared_later(registry, table.name, pipeline):
                continue  # the input's file is the broken one: `_declared_later` said so
            if table.name in reserved:
                problems.append(f"writes {table.name!r}, which is an input or a system table")
            elif table.name in writers:
                problems.append(f"writes {table.name!r}, which pipeline {writers[table.name]} writes too")
            else:
                writers[table.name] = pipeline.name
        if problems:
            registry.errors.append(f"{where}: pipeline {pipeline.name!r} " + "; ".join(problems))
            registry.broken.add(registry.files[("pipeline", pipeline.name)])
        misnamed = [] if problems else undeclared_names(pipeline)  # one line for a file: its declarations' first
        if misnamed:
            registry.errors.extend(misnamed)
            registry.broken.add(registry.files[("pipeline", pipeline.name)])


def _declared_later(registry: Registry, name: str, pipeline: Pipeline) -> bool:
    """Whether input `name`, which `pipeline` writes too, was declared by a file loaded after the pipeline's; if so
    that file is the broken one, as when two files declare one name (`_add`)."""
    declared = registry.files.get(("input table", name))
    writer = registry.files[("pipeline", pipeline.name)]
    if declared is None or registry.order.index(declared) <= registry.order.index(writer):
        return False
    registry.broken.add(declared)
    registry.errors.append(
        f"{registry.origins[('input table', name)]}: input table {name!r} is already declared as an output of "
        f"pipeline {pipeline.name!r} in {registry.origins[('pipeline', pipeline.name)]}"
    )
    return True


def summary(registry: Registry) -> dict:
    """What Airflow needs of the registry (`python -m streamtable.core.registry`): DAG files read it without pyspark."""
    return {
        "pipelines": [
            {
                "name": p.name,
                "doc": p.doc,
                "primary": p.primary,
                "inputs": list(p.inputs),
                "outputs": [{"name": t.name, "keys": list(t.keys)} for t in p.outputs],
                "schedule": p.schedule,
                "ticks": p.ticks is not None,
                "ticks_into": p.ticks.into if p.ticks else None,  # an input its DAG writes: not a sign of data
                "file": p.declared_at,
                "example": registry.is_example("pipeline", p.name),
            }
            for p in sorted(registry.pipelines.values(), key=lambda p: p.name)
        ],
        "sources": [  # the inputs whose records come from a declared Kafka topic or landing folder
            {
                "table": t.name,
                "kafka_topic": t.kafka_topic,
                "landing_folder": t.landing_folder,
                "example": registry.is_example("input table", t.name),
            }
            for t in sorted(registry.inputs.values(), key=lambda t: t.name)
            if t.kafka_topic or t.landing_folder
        ],
        "external_paths": external_paths(registry),
        # where each input that is another job's Delta table is (a pipeline `on_data` watches its version)
        "input_paths": {t.name: t.path for t in registry.inputs.values() if t.external and t.path},
        "errors": registry.errors,
    }


if __name__ == "__main__":  # the registry as JSON, for DAG files (a broken user file is an entry of `errors`)
    import json

    print(json.dumps(summary(load(folders()))))
