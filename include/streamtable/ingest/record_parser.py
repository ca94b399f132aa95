"""A record's JSON text read into a row of its input table, typed as the table declares, or the reason it cannot be.

The one place that knows how a JSON record becomes a row: every source (files, folders, Kafka) reads its records
through `parse_record`, and a source of single values (a CSV cell) through `typed_value`
(`streamtable.core.values`), so the same fields give the same rows whichever way they came.
"""

from __future__ import annotations

from streamtable.core.tables import Table
from streamtable.core.values import RecordError, parse_json, typed_fields, typed_value

__all__ = ["RecordError", "parse_json", "parse_record", "typed_value"]


def parse_record(table: Table, text: str) -> dict:
    """Parse one JSON line into a row of `table`, or raise RecordError saying what is wrong."""
    try:
        record = parse_json(text)
    except ValueError as e:
        raise RecordError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise RecordError("malformed JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, got {type(record).__name__}")
    row = typed_fields(record, table.columns, "")
    for rule in table.rules:
        reason = rule.error(row)
        if reason:
            raise RecordError(reason)
    if table.keep_raw:
        row["raw"] = text
    return row
