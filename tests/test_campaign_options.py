"""Every option the API reference documents is one the campaign of generated pipelines draws (issue 36, item 4).

The documented options are the parameters of the public API's signatures (what docs/reference.md is generated from):
`from streamtable import ...`, `streamtable.expect`, and the `Batch` a pipeline's `process` gets, with the forms of the
options whose values choose a behaviour (`schedule`, `how`) and every column type. What the campaign draws is read
from the pipeline files it writes (300 seeds, Spark-free: drawing a case runs nothing): each call of a
public name, its arguments bound to the signature. An option left out is named in NOT_DRAWN with the reason.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from functools import cache

from campaign.cases import draw

import streamtable
from streamtable import expect
from streamtable.core.batch import Batch

SEEDS = range(1, 300)
# Names whose parameters are not options a pipeline file chooses: made by the package (Table, Rule, Expectation, Batch
# itself, JoinedWithin, SessionChanges), read back after a run (rows, query), or tooling (Records and its parts).
# Type's options are its forms (Type.STRING, Type.decimal(p, s), ...): the column types test checks those.
NOT_OPTIONS = {"Table", "Rule", "Expectation", "JoinedWithin", "SessionChanges", "Batch", "rows", "query", "Type"}
# (name, parameter) -> why the campaign does not draw it
NOT_DRAWN = {
    ("changelog", "kafka_topic"): "only gives Airflow an ingest_NAME DAG that copies a topic; the campaign runs no "
    "Airflow (tests/test_kafka_ingest.py, tests/test_dags.py)",
    ("changelog", "landing_folder"): "only gives Airflow an ingest_NAME DAG that follows a folder; the campaign "
    "ingests its landing folders itself (tests/test_folder_ingest.py, tests/test_dags.py)",
    ("Pipeline", "records"): "what `explain --records` lists; it changes no output (tests/test_explain.py)",
    ("Pipeline", "declared_at"): "set by the package (the declaration's file:line), never by a pipeline file",
    ("Records", "*"): "explain --records only (tests/test_explain.py)",
    ("AsOf", "*"): "explain --records only (tests/test_explain.py)",
    ("InWindows", "*"): "explain --records only (tests/test_explain.py)",
}


def public() -> dict[str, Callable]:
    names = {n: getattr(streamtable, n) for n in streamtable.__all__ if n not in NOT_OPTIONS}
    names |= {f"expect.{n}": getattr(expect, n) for n in expect.__all__ if n not in NOT_OPTIONS}
    names |= {
        f"batch.{n}": getattr(Batch, n) for n in dir(Batch) if not n.startswith("_") and callable(getattr(Batch, n))
    }
    return {n: f for n, f in names.items() if callable(f) and _parameters(f)}


def _parameters(f: Callable) -> list[str]:
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD,)]


def _callee(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


@cache
def drawn() -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """(name, parameter) pairs passed in the campaign's pipeline files, the schedules' forms and the attributes read
    (`Type.STRING`, ...)."""
    functions, used, forms, attributes = public(), set(), set(), set()
    for seed in SEEDS:
        tree = ast.parse(draw(seed).source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                attributes.add(f"{node.value.id}.{node.attr}")
            if not isinstance(node, ast.Call) or _callee(node.func) not in functions:
                continue
            name = _callee(node.func)
            params = _parameters(functions[name])
            variadic = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(functions[name]).parameters.values())
            positional = params[: len(node.args)] if not variadic else params[:1]
            used |= {(name, p) for p in positional} | {(name, k.arg) for k in node.keywords if k.arg}
            for k in node.keywords:
                if name == "Pipeline" and k.arg == "schedule" and isinstance(k.value, ast.Constant):
                    text = str(k.value.value)
                    forms.add("on_data" if text == "on_data" else "on_data or CRON" if " or " in text else "CRON")
                if k.arg == "how" and isinstance(k.value, ast.Constant):
                    forms.add(f"{name}(how={k.value.value!r})")
    return used, forms, attributes


def test_every_documented_parameter_is_drawn_by_the_campaign_or_named_with_why_not():
    used, _, _ = drawn()
    missing = sorted(
        (name, p)
        for name, f in public().items()
        for p in _parameters(f)
        if (name, p) not in used and (name, p) not in NOT_DRAWN and (name, "*") not in NOT_DRAWN
    )
    assert not missing, f"documented options no campaign family draws: {missing}"


def test_every_schedule_form_join_kind_and_column_type_is_drawn():
    _, forms, attributes = drawn()
    assert {"CRON", "on_data", "on_data or CRON"} <= forms
    assert {"join_within(how='inner')", "join_within(how='left')"} <= forms
    scalars = {f"Type.{n}" for n in ("STRING", "LONG", "INT", "DOUBLE", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE")}
    assert scalars | {"Type.BINARY", "Type.decimal", "Type.array", "Type.map", "Type.struct"} <= attributes


def test_the_exceptions_name_documented_options():
    documented = {(n, p) for n, f in public().items() for p in _parameters(f)} | {(n, "*") for n in public()}
    assert set(NOT_DRAWN) <= documented, set(NOT_DRAWN) - documented
