"""README.md's code stays true: its "Interactive queries" Python snippet runs against a lake built here."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from streamtable.lake import Lake
from streamtable.pipelines import get_pipeline
from streamtable.schema import arrow_schema

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet(heading: str) -> str:
    """The first ```python block of the README section called `heading`."""
    text = README.read_text(encoding="utf-8")
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"README.md has no '## {heading}' section"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, f"README.md's '{heading}' section has no python block"
    return block.group(1)


def test_interactive_query_snippet_runs_and_prints_the_store(tmp_path, monkeypatch, capsys):
    # The lake the snippet names ("lake", relative to where it runs) holds an `inventory` table as
    # `streamtable run inventory` publishes it: a Delta table of the pipeline's output schema.
    lake = Lake(tmp_path / "lake")
    spec = get_pipeline("inventory").output("inventory")
    rows = [
        {"store": "berlin", "item": "apples", "quantity": -1},
        {"store": "berlin", "item": "pears", "quantity": 3},
        {"store": "paris", "item": "apples", "quantity": 5},
    ]
    write_deltalake(lake.table_path("inventory"), pa.Table.from_pylist(rows, schema=arrow_schema(spec.columns)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STREAMTABLE_LAKE", raising=False)

    code = snippet("Interactive queries")
    assert "from streamtable.reader import query" in code and len(code.strip().splitlines()) <= 3
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == ["apples -1", "pears 3"]
