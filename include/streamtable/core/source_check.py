"""Names a pipeline's `process` passes to its batch that the pipeline does not declare, found in its source.

`batch.new("page_veiws")` would fail only once Spark runs the batch; read from the function's source (`ast`), it
is reported when the file loads, with its file and line. Only literal names in calls on `process`'s own batch
parameter are checked (a name computed at run time is checked when the batch runs).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

from streamtable.core.pipeline import Pipeline


def _allowed(pipeline: Pipeline) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Per batch method: what its first argument must be, and the declared names of that kind."""
    tables = tuple(t.name for t in pipeline.outputs + pipeline.state if t.kind == "table")
    streams_out = tuple(t.name for t in pipeline.outputs if t.kind == "stream")
    return {
        "new": ("a stream input (streams=)", pipeline.streams),
        "consumed": ("an input (streams= or tables=)", pipeline.inputs),
        "table": ("an input (streams= or tables=)", pipeline.inputs),
        "changes": ("a table input (tables=)", pipeline.tables),
        "rows": ("a table input (tables=)", pipeline.tables),
        "current": ("an output table or state store", tables),
        "upsert": ("an output table or state store", tables),
        "append": ("a stream output", streams_out),
        "metric": ("a declared metric (metrics=)", pipeline.metrics),
    }


def undeclared_names(pipeline: Pipeline) -> list[str]:
    """One line per call of `process`'s batch with a literal name the pipeline does not declare: `file:line: ...`."""
    function = pipeline.process
    source = _source(function)
    if source is None:
        return []
    tree, file, first_line = source
    params = [a.arg for a in tree.args.posonlyargs + tree.args.args]
    if not params:
        return []
    batch, allowed = params[0], _allowed(pipeline)
    found = []
    for node in ast.walk(tree):
        call = _batch_call(node, batch)
        if call is None or call[0] not in allowed or not isinstance(node, ast.Call):
            continue
        method, name = call
        what, declared = allowed[method]
        if name not in declared:
            known = ", ".join(declared) or "none"
            found.append(
                f"{file}:{first_line + node.lineno - 1}: pipeline {pipeline.name!r}: {batch}.{method}({name!r}): "
                f"{name!r} is not {what} of the pipeline (declared: {known})"
            )
    return found


def _source(function: Callable) -> tuple[ast.FunctionDef, str, int] | None:
    """The function's parsed definition, its file and its first line; None when its source cannot be read."""
    try:
        lines, first_line = inspect.getsourcelines(function)
        file = inspect.getsourcefile(function)
    except (OSError, TypeError):
        return None
    try:
        module = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:  # a lambda's line cut out of a bigger expression
        return None
    definition = module.body[0] if module.body else None
    if not isinstance(definition, ast.FunctionDef) or file is None:
        return None
    return definition, file, first_line


def _batch_call(node: ast.AST, batch: str) -> tuple[str, str] | None:
    """(method, name) for `batch.method("name", ...)`, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
        return None
    receiver, first = node.func.value, node.args[0]
    if not (isinstance(receiver, ast.Name) and receiver.id == batch):
        return None
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    return node.func.attr, first.value
