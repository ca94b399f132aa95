"""The rows of Delta tables of other jobs that break their inputs' declarations, recorded in the lake's `quarantine`
once per version of each table, with the batch that read them (`record_quarantined`). delta-rs, no Spark.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, Transaction

from streamtable.core.schema import arrow_schema
from streamtable.core.tables import QUARANTINE
from streamtable.storage.delta_rs import open_table, retrying, write
from streamtable.storage.lake import Lake
from streamtable.storage.staged_rows import staged_rows


def quarantine_app_id(input_name: str) -> str:
    """The app transaction of `quarantine` whose version is the newest version of the input recorded there."""
    return f"streamtable.quarantine.{input_name}"


def record_quarantined(lake: Lake, staged: str, offsets: dict[str, int]) -> int:
    """Append the staged quarantine rows of Delta tables of other jobs to the lake's `quarantine`, each input's
    once per version; return how many rows were written.

    `offsets` is, per input, the newest version the batch read. One commit carries an app transaction per input
    (`quarantine_app_id`, that version): rows of versions an earlier commit recorded are left out, so a batch
    committed again, a reprocess, or another pipeline reading the same input records nothing twice. A commit
    that races one with the same transaction fails and is tried again from the new snapshot (`retrying`).
    """
    path = lake.table_path(QUARANTINE.name)
    schema = arrow_schema(QUARANTINE.columns)
    rows = pa.Table.from_batches(list(staged_rows(staged, schema)), schema=schema)
    return retrying(lambda: _record_new(path, rows, offsets), path)


def _record_new(path: str, rows: pa.Table, offsets: dict[str, int]) -> int:
    """Append the rows of versions `quarantine` (at `path`) has not recorded yet in one commit; how many."""
    delta = open_table(path)
    recorded = {
        name: _recorded(delta.transaction_version(quarantine_app_id(name)) if delta else None) for name in offsets
    }
    newer = {name: v for name, v in offsets.items() if v > recorded[name]}
    if not newer:
        return 0
    keep = pa.array([False] * rows.num_rows)
    for name in newer:
        keep = pc.or_(keep, pc.and_(pc.equal(rows["table"], name), pc.greater(rows["line"], recorded[name])))
    selected = rows.filter(keep)
    if selected.num_rows == 0:
        return 0
    write(
        delta if delta is not None else path,
        selected,
        mode="append",
        schema_mode="merge",  # a quarantine table made before `source` and `line` gains them
        commit_properties=CommitProperties(
            app_transactions=[Transaction(quarantine_app_id(n), v) for n, v in sorted(newer.items())],
            max_commit_retries=0,  # see `delta_rs.retrying`: another commit won the race, see what it recorded
        ),
    )
    return selected.num_rows


def _recorded(version: int | None) -> int:
    return -1 if version is None else version
