"""The `streamtable explain` commands of the rows a failed rule names, for its failure line and its Data Docs page.

A failed row rule's rows are those GX reports unexpected, named by the table's key columns (GX returns them when
the result format asks for `unexpected_index_column_names`: `result_format`, asked for the failed rules only); a
sum that does not reconcile names the rows it was checked on (a batch's rows, `runtime.batch.gate`), a whole
table's sum none. Each command names a row by its leading key columns up to the first null one (explain cannot
name a null key value).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamtable.core.errors import UnknownTableError
from streamtable.core.registry import current
from streamtable.core.values import to_json
from streamtable.quality.messages import plain_value
from streamtable.storage.reader import table_spec

SHOWN = 20  # rows named per failed rule: GX's partial_unexpected_count, the rows it reports
ATTRIBUTE = "explain"  # where a failed rule's commands go in its expectation's meta (`meta["attributes"]`)
COLUMN = "Explain the rows"  # the Data Docs column that shows them (GX renders meta this way, not notes)
QUALITY_DIR = "/_quality"  # a lake's quality_dir is `<lake>/_quality` (`storage.lake.Lake.quality_dir`)


def key_columns(table: str) -> tuple[str, ...]:
    """The columns explain's KEY... names for a row of `table` (a table's keys, a stream's sort columns), up to the
    first nested one (no command-line value names an array, map or struct); none for a table no pipeline declares."""
    try:
        spec = table_spec(table)
    except UnknownTableError:
        return ()
    kinds = {c.name: c.type.kind for c in spec.columns}
    nested = [i for i, c in enumerate(spec.sort_columns) if kinds.get(c) in ("array", "map", "struct")]
    return spec.sort_columns[: nested[0] if nested else None]


def result_format(keys: Sequence[str]) -> dict[str, Any]:
    """GX's SUMMARY result format (counts and a few example values; BOOLEAN_ONLY would drop the counts), naming each
    unexpected row by `keys` if any (`partial_unexpected_index_list`: on Spark one more job per row rule)."""
    named = {"unexpected_index_column_names": list(keys)} if keys else {}
    return {"result_format": "SUMMARY", "partial_unexpected_count": SHOWN} | named


def command(lake: str, table: str, key: Sequence[str] | None = None) -> str:
    """The explain command of the rows of `key` (text values of the leading key columns; None: `KEY...`), with the
    `--pipelines DIR` that declares `table` when a user's folder does (without it, explain would not know the table)."""
    keys = ["KEY..."] if key is None else list(key)
    words = ["streamtable", "explain", table, *keys, "--records", *pipelines_option(table), "--lake", lake]
    return " ".join(w if w == "KEY..." else shlex.quote(w) for w in words)


def pipelines_option(table: str) -> list[str]:
    """`--pipelines DIR` of the folder whose file declares `table` (its writer's file for an output), as an absolute
    path; nothing for a built-in pipeline's or input's table, nor a system table."""
    declared = current()
    writer = declared.writer(table)
    kind, name = ("pipeline", writer.name) if writer else ("input table", table)
    file = declared.files.get((kind, name))
    if file is None or declared.is_example(kind, name):
        return []
    return ["--pipelines", str(Path(file).resolve().parent)]


def lake_of(quality_dir: str) -> str | None:
    """The lake whose quality_dir this is, or None for a quality_dir of no lake."""
    root = quality_dir.rstrip("/")
    return root.removesuffix(QUALITY_DIR) if root.endswith(QUALITY_DIR) else None


def commands(
    quality_dir: str, table: str, result: Mapping[str, Any], checked: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    """The explain commands of the rows a failed rule's `result` names (else of the `checked` rows), each once."""
    lake, keys = lake_of(quality_dir), key_columns(table)
    if lake is None or not keys:
        return []
    rows = result.get("partial_unexpected_index_list") or []
    if not rows or not isinstance(rows[0], Mapping):  # a sum's result names no rows; pandas without keys, indexes
        rows = [] if "partial_unexpected_list" in result else list(checked)
    found = []
    for row in rows[:SHOWN]:
        texts = _key_texts([row.get(k) for k in keys])
        if texts:
            found.append(command(lake, table, texts))
    return list(dict.fromkeys(found))


def _key_texts(values: Sequence[Any]) -> list[str]:
    """The leading values as explain reads them on its command line, up to the first null."""
    texts = []
    for value in map(_plain, values):
        if value is None:
            break
        texts.append(key_text(value))
    return texts


def key_text(value: Any) -> str:
    """A key value as `streamtable explain` reads it back (`storage.reader`'s key parsing): text as it is, a time in
    ISO-8601 to the microsecond, anything else as its JSON."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    shown = to_json(value)
    return shown if isinstance(shown, str) else json.dumps(shown)


def _plain(value: Any) -> Any:
    """A value as GX reports it, as Python's; a NaN (pandas' null number) as None."""
    value = plain_value(value)
    return None if isinstance(value, float) and math.isnan(value) else value
