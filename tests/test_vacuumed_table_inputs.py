"""A keyed table input read through its Change Data Feed whose other job compacted (OPTIMIZE) and vacuumed the files of
versions the pipeline already consumed: the next run reads on (an OPTIMIZE changes no row), and where a batch needs rows
no file holds any more it is refused in one line (exit 2), never failed as the pipeline code's fault."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from test_table_inputs import orders, outputs, pipelines, write_pipeline

from streamtable.core.errors import BadInputError
from streamtable.core.exits import exit_code
from streamtable.runtime.commands.lifecycle import run
from streamtable.storage import consumed_files
from streamtable.storage.external import CHANGE_FEED
from streamtable.storage.lake import Lake

__all__ = ["pipelines"]  # (the fixture, used by name)


def consumed_in_two_files(path: str, lake: Lake, pipelines: Path) -> list[str]:
    """The other job's table (its feed on) of two versions, one file each, consumed by a run; its files' paths."""
    write_deltalake(path, orders(("o1", "ann", "new", "1")), configuration={CHANGE_FEED: "true"})
    write_deltalake(path, orders(("o2", "bob", "new", "2")), mode="append")
    write_pipeline(pipelines, path)
    run(lake, "order_totals")
    return sorted(f.removeprefix(path + "/") for f in DeltaTable(path).file_uris())


def compact_and_vacuum(path: str) -> None:
    table = DeltaTable(path)
    table.optimize.compact()
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


def test_a_key_appended_again_after_the_consumed_versions_files_were_vacuumed_is_read_on(spark, pipelines, tmp_path):
    """A row appended with a key the table held is its update: the batch looks the key's row up as of the version
    the runs before consumed, whose files OPTIMIZE compacted and VACUUM removed (the run failed in process with a
    FileNotFoundException, exit 5 naming the pipeline's file): the same rows are read where they are now."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    consumed_in_two_files(path, lake, pipelines)
    write_deltalake(path, orders(("o3", "cy", "paid", "3")), mode="append")
    run(lake, "order_totals")
    compact_and_vacuum(path)
    write_deltalake(path, orders(("o1", "bob", "paid", "10")), mode="append")  # o1 again: its update
    run(lake, "order_totals")
    revenue, statuses = outputs(lake)
    assert revenue == [
        {"customer": "bob", "orders": 2, "revenue": Decimal("12.00")},
        {"customer": "cy", "orders": 1, "revenue": Decimal("3.00")},
    ]
    assert statuses == [{"status": "new", "orders": 1}, {"status": "paid", "orders": 2}]


def test_a_key_appended_again_after_the_consumed_versions_rows_were_replaced_and_vacuumed_is_refused(
    spark, pipelines, tmp_path
):
    """An UPDATE replaced a file holding rows of the version the runs before consumed, and VACUUM removed it: no
    version holds those rows any more, and the batch that needs them is refused in one line naming the input, the
    version, the file and the reprocess that reads the table anew."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    gone = consumed_in_two_files(path, lake, pipelines)
    DeltaTable(path).update(predicate="order_id = 'o2'", updates={"amount": "5"})  # (not read yet: its file is there)
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    write_deltalake(path, orders(("o1", "bob", "paid", "10")), mode="append")
    with pytest.raises(BadInputError) as refused:
        run(lake, "order_totals")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"input orders ({path}): data file ")
    assert any(
        f"data file {file} of version 1, the version this pipeline consumed last, is gone" in line for file in gone
    )
    assert f"`streamtable reprocess order_totals --input orders --from-version {DeltaTable(path).version()}`" in line


def test_a_file_gone_under_a_read_of_process_is_the_inputs_not_the_pipeline_codes(
    spark, pipelines, tmp_path, monkeypatch
):
    """Spark's FileNotFoundException raised while process runs (the lookup as of the version consumed, read there as
    before): refused in one line naming the input and the file (exit 2), not the pipeline's file (exit 5)."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    gone = consumed_in_two_files(path, lake, pipelines)
    compact_and_vacuum(path)
    write_deltalake(path, orders(("o1", "bob", "paid", "10")), mode="append")
    monkeypatch.setattr(consumed_files, "rows_version", lambda table, pipeline, version, bound: version)
    with pytest.raises(BadInputError) as refused:
        run(lake, "order_totals")
    line = str(refused.value)
    assert "\n" not in line and exit_code(refused.value) == 2
    assert any(
        line.startswith(f"input orders ({path}): file {file} is gone (the table's VACUUM removed it)") for file in gone
    )
