"""`streamtable explain TABLE KEY...`: where a row came from and whether it is current (no Spark: delta-rs only).

For the rows of KEY (leading key columns, as `query`), one JSON-ready dict per change of each row, newest first:
the output's Delta version and commit time, the change (insert, update, rewrite, delete) with the row before and
after, and the batch that made it: pipeline, generation, batch id, mode (run, serve, reprocess, or the `reset` that
emptied the table), the Airflow run that launched it, the SHA-256 of the pipeline's file as it ran, and the input
versions it consumed. The first dict (`current`: the change that made the row as it is now) also has each input's
lag behind the pipeline's live generation (`runtime.observe.status`) and `behind`, and `history_since_version` when a
VACUUM removed the changes before it.

Which batch made a version is in that version's log entry: the app transaction of its commit
(`streamtable.<pipeline>.g<generation>`, batch id) and its commit info (`runtime.batch.provenance`); the batch's
`stream_progress` row adds its mode and times. A reprocess's swap rewrites every row in one Spark commit: the row
is then attributed to the reprocess's generation and its batches (`batch_id` when there was one batch). Commits
of a release that recorded none of this, or of another writer, say so (`mode` null, `writer` its operation).

With `records`, the input records that fed the current row where the pipeline declares them (`Pipeline.records`:
a re-keyed sum's group is a function of the record and, for an as-of join, of the table versions the batch
consumed; a window's row, or one missing because all its records came late, lists those under `late`); elsewhere
`"records": "unknown"` and why.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import partial

import pyarrow as pa

from streamtable.core.errors import BadInputError
from streamtable.core.pipeline import Pipeline
from streamtable.core.records import Records
from streamtable.core.registry import current as registry, get_input
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import COMMIT_VERSION as VERSION, LINE, Table
from streamtable.core.timefmt import format_time
from streamtable.core.values import to_json
from streamtable.core.window_checks import definition_parts
from streamtable.quality import explain_rows
from streamtable.runtime.batch import provenance
from streamtable.runtime.committed import Consumed, committed_batches, recorded_windows
from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query import checkpoint
from streamtable.runtime.query.progress import history
from streamtable.storage import other_job_rows, row_history
from streamtable.storage.delta_rs import DeltaTable, delta_table, log_entry, open_table
from streamtable.storage.external import path_of
from streamtable.storage.lake import Lake, resolve_lake
from streamtable.storage.reader import _parse_key, table_spec

APP_ID = re.compile(r"streamtable\.(?P<pipeline>\w+)\.g(?P<generation>\d+)")
UNKNOWN = "unknown"


def explain(lake: str | Lake, table: str, *key: str, limit: int | None = 10, records: bool = False) -> list[dict]:
    """The changes of the rows of `key` in `table`, newest first per row (at most `limit` each), JSON-ready.

    explain("lake", "word_counts", "hello")  # [{"current": True, "row": {"word": "hello", "count": 2}, ...}]
    """
    lake = lake if isinstance(lake, Lake) else Lake(resolve_lake(str(lake)))
    spec = table_spec(table)
    keys = spec.sort_columns
    if not key:
        raise BadInputError(f"explain {table} needs a KEY: {table} is keyed by {', '.join(keys)}")
    if len(key) > len(keys):
        raise BadInputError(f"{table} is keyed by {', '.join(keys)}: got {len(key)} values")
    types = {c.name: c.type for c in spec.columns}
    wanted = {column: _parse_key(types[column], text) for column, text in zip(keys, key, strict=False)}
    schema = arrow_schema(spec.columns)
    path = path_of(lake, table)
    delta = open_table(path)
    now, changes = schema.empty_table(), pa.schema(list(schema) + row_history.CHANGE_COLUMNS).empty_table()
    since = 0  # where the history starts: a VACUUM may have removed the feed of older versions
    if delta is not None:  # (another job's table may have no feed since version 0: then no history)
        whole = row_history.whole_feed(delta, path)
        if whole or not spec.external:
            changes, since = row_history.readable_changes(delta, wanted, schema)
        now = _current(spec, delta, wanted, schema, changes if whole and since == 0 else None)
    owner = registry().writer(table)
    writers = Writers(lake, path, owner)
    lag = _lag(lake, owner) if owner else None
    explained: list[dict] = []
    for full_key in _row_keys(now, changes, keys):
        row = next((r for r in now.to_pylist() if _key_of(r, keys) == full_key), None)
        versions = row_history.by_version(changes, keys, full_key)
        if spec.external and row is not None and versions and versions[0][1]["after"] is None:
            versions[0] = _written_last_again(*versions[0], row)
        lines = [
            _line(table, keys, full_key, version, change, writers) for version, change in versions[: limit or None]
        ]
        if not lines or (row is not None and lines[0]["change"] not in ("insert", "update", "rewrite")):
            lines.insert(0, _line(table, keys, full_key, None, {"after": row, "before": None, "kind": None}, writers))
        lines[0]["current"] = True
        lines[0]["row"] = to_json(row)
        lines[0] |= {"history_since_version": since} if since else {}  # older changes: gone with their files
        if spec.external and row is None and versions and versions[0][1]["after"] is not None:
            lines[0]["skipped"] = other_job_rows.skipped(spec, versions[0][1]["after"])  # why no pipeline reads it
        if lag is not None:
            lines[0] |= lag
        if records:
            lines[0] |= input_records(lake, owner, table, row, lines[0])
        explained.extend(lines)
    if not explained:  # no row and no history: say so, with the inputs' lag (is it not there yet?)
        none = {"table": table, "key": to_json(wanted), "current": True, "row": None, "change": None, "version": None}
        full = wanted if len(wanted) == len(keys) else None  # a window's row may be missing for its late records
        explained.append(none | (lag or {}) | (input_records(lake, owner, table, None, none, full) if records else {}))
    return explained


def _current(spec: Table, delta: DeltaTable, key: dict, schema: pa.Schema, whole: pa.Table | None) -> pa.Table:
    """The rows of `key` now: of another job's table, as a pipeline reads them (a key's row written last); of an
    output, those its whole feed's changes (`whole`) leave, else its snapshot's."""
    if spec.external:
        return other_job_rows.current_rows(spec, partial(row_history.matching, key=key, schema=schema))
    if whole is not None:
        return row_history.rows_left(whole, spec.sort_columns, schema)
    return row_history.current_rows(delta, key, schema)


def _written_last_again(version: int, change: dict, row: dict) -> tuple[int, dict]:
    """A delete of another job's newest row of a key whose older row is left: that row is the key's again, an update
    from the deleted one, as a pipeline's table input reads it."""
    return version, change | {"kind": "update", "after": row}


def command(lake: str, table: str) -> str:
    """The explain command for rows of `table` (KEY...: the key values), as a task's log prints it after a run.

    command("/lake", "word_counts")  # "streamtable explain word_counts KEY... --records --lake /lake"
    """
    return explain_rows.command(lake, table)


def _key_of(row: dict, keys: tuple[str, ...]) -> tuple:
    return tuple(row[k] for k in keys)


def _row_keys(now: pa.Table, changes: pa.Table, keys: tuple[str, ...]) -> list[tuple]:
    """The full keys of the rows there are and of those there were (deleted), in key order (nulls first)."""
    found = {_key_of(r, keys) for r in now.select(list(keys)).to_pylist()}
    found |= {_key_of(r, keys) for r in changes.select(list(keys)).to_pylist()}
    return sorted(found, key=lambda k: tuple((v is not None, str(v)) for v in k))


def _line(table: str, keys: tuple[str, ...], full_key: tuple, version: int | None, change: dict, writers) -> dict:
    line = {
        "table": table,
        "key": to_json(dict(zip(keys, full_key, strict=True))),
        "current": False,
        "change": change["kind"],
        "row": to_json(change["after"]),
        "before": to_json(change["before"]),
        "version": version,
        "committed_at": to_json(change.get("at")),
    }
    return line | (writers.of(version) if version is not None else {})


class Writers:
    """Which batch (or swap) made each version of a table, read once per version."""

    def __init__(self, lake: Lake, path: str, owner: Pipeline | None):
        self.lake, self.path, self.owner = lake, path, owner
        self._seen: dict[int, dict] = {}
        self._progress: dict[str, dict[tuple[int, int], dict]] = {}

    def progress(self, pipeline: str) -> dict[tuple[int, int], dict]:
        """The pipeline's `stream_progress` rows, every generation, by (generation, batch id)."""
        if pipeline not in self._progress:
            rows = history(self.lake, pipeline)
            self._progress[pipeline] = {(r["generation"], r["batch_id"]): r for r in rows}
        return self._progress[pipeline]

    def of(self, version: int) -> dict:
        if version not in self._seen:
            self._seen[version] = self._writer(version)
        return dict(self._seen[version])

    def _writer(self, version: int) -> dict:
        entry = log_entry(self.path, version)  # None once the log is cleaned up: nothing is known of the commit
        info, txn = (entry.info, entry.txn) if entry else ({}, {})
        about = provenance.read(info) or {}
        found = {
            "operation": info.get("operation"),
            "pipeline": self.owner.name if self.owner else None,
            "generation": None,
            "batch_id": None,
            "mode": None,
            "airflow": about.get("airflow"),
            "pipeline_sha256": about.get("pipeline_sha256"),
            "input_versions": None,
        }
        batch = next(((m, v) for app, v in txn.items() if (m := APP_ID.fullmatch(app))), None)
        if batch is not None:
            match, batch_id = batch
            pipeline, generation = match["pipeline"], int(match["generation"])
            row = self.progress(pipeline).get((generation, batch_id))
            return found | {
                "pipeline": pipeline,
                "generation": generation,
                "batch_id": batch_id,
                "mode": row["mode"] if row else about.get("mode"),
                "input_versions": row["input_versions"] if row else about.get("input_versions"),
            }
        if about.get("swap"):
            pipeline, generation = about["pipeline"], about["generation"]
            found |= {"pipeline": pipeline, "generation": generation, "mode": about["swap"]}
            if about["swap"] == "reprocess":
                batches = sorted(
                    (
                        r
                        for (g, _), r in self.progress(pipeline).items()
                        if g == generation and r["mode"] == "reprocess"
                    ),
                    key=lambda r: r["batch_id"],
                )
                ids = [r["batch_id"] for r in batches]
                consumed = dict(Consumed.of(batches))
                found |= {"batch_id": ids[0] if len(ids) == 1 else None, "batch_ids": ids, "input_versions": consumed}
            return found
        return found | {"writer": info.get("operation") or UNKNOWN}


def _lag(lake: Lake, pipeline: Pipeline) -> dict:
    """Each input of the pipeline: the newest version its live generation consumed, the latest, and the versions and
    rows no batch consumed yet (`streamtable status`'s lag); `behind` when there are any."""
    status = pipeline_status(lake, pipeline.name)
    inputs = [{k: v for k, v in i.as_dict().items() if k != "oldest_unconsumed_at"} for i in status.inputs]
    return {"live_generation": status.generation, "inputs": inputs, "behind": status.behind}


# ------------------------------------------------------------------------------------------------- records


def input_records(
    lake: Lake, owner: Pipeline | None, table: str, row: dict | None, current: dict, key: dict | None = None
) -> dict:
    """`records`: the input records that fed the current row, each with the batch that consumed it, as the pipeline
    declares them (`Pipeline.records`); or "unknown" and `records_why`. A window's row that does not exist, asked by
    its whole `key`, lists under `late` the records that came after its window closed (why there is no row)."""
    declared = next((r for r in owner.records if r.output == table), None) if owner else None
    if owner is None or declared is None:
        return {
            "records": UNKNOWN,
            "records_why": f"the pipeline that writes {table} does not declare which records make a row "
            "(Pipeline(records=...) names them for an output whose rows are sums of a stream's records)",
        }
    absent = {"records": [], "records_why": "the row does not exist"}
    if row is None and not (declared.windows and key):
        return absent
    external = [t for t in (declared.stream, declared.asof and declared.asof.table) if t and _is_external(t)]
    if external:
        return {
            "records": UNKNOWN,
            "records_why": f"{external[0]} is a Delta table of another job, read in place: its records are not kept "
            "with their lines, nor always in a change feed explain could read",
        }
    generation = lake.generation(owner.name)
    if row is not None and current.get("generation") != generation:
        return {
            "records": UNKNOWN,
            "records_why": f"the row was written by generation {current.get('generation')}, "
            f"whose progress is gone (live: {generation})",
        }
    batches = sorted(history(lake, owner.name, generation), key=lambda r: r["batch_id"])
    epoch = checkpoint.recorded(lake, owner, generation)
    if epoch is None or (epoch.number and any(r["mode"] == "reprocess" for r in batches)):
        return {"records": UNKNOWN, "records_why": "where the generation started reading is no longer recorded"}
    if declared.windows and owner.wall_clock:
        return {"records": UNKNOWN, "records_why": f"{owner.name} also closes windows by wall clock, not recorded"}
    committed = committed_batches(lake, owner.name, generation, ["batch_id", "windows"])
    made = recorded_windows(committed).get(table)
    unlike = declared.windows.unlike(table, made) if declared.windows and made else None
    if unlike:
        return {"records": UNKNOWN, "records_why": unlike}
    starting = dict(epoch.starting) if epoch.number == 0 else {}
    found = _records_of(lake, declared, row or key or {}, batches, starting, _graces(committed, table))
    if row is None:  # every record of the window came late (or none came): no row, and why
        return absent | {"late": [to_json(r) for r in found if r.get("late")]}
    return {
        "records": [to_json(r) for r in found if not r.get("late")],
        **({"late": [to_json(r) for r in found if r.get("late")]} if declared.windows else {}),
    }


def _graces(committed: list[dict], table: str) -> dict[int, timedelta | None]:
    """Per committed batch, the grace `table`'s windows closed with: the one it recorded, else the last one recorded
    before it (None: none recorded; a grace made shorter is applied, so batches differ)."""
    graces: dict[int, timedelta | None] = {}
    grace = None
    for batch in sorted(committed, key=lambda b: b["batch_id"]):
        recorded = dict(batch.get("windows") or ()).get(table)
        grace = definition_parts(recorded).grace if recorded else grace
        graces[batch["batch_id"]] = grace
    return graces


def _records_of(
    lake: Lake,
    declared: Records,
    row: dict,
    batches: list[dict],
    starting: dict[str, int],
    graces: dict[int, timedelta | None],
) -> list[dict]:
    """The records of `declared.stream` the generation's batches consumed that add to `row`, each with its batch,
    what it adds, for an as-of join the table record (version, line) it matched, for a window whether it came late
    (its window closed before its batch, by the grace the batch ran with: `late`, counted in none)."""
    asof, windows = declared.asof, declared.windows
    key = tuple(row[k] for k in _group_columns(declared))
    start = _utc(row[windows.start]) if windows else None
    bounds = _table_bounds(batches, asof.table if asof else "")
    table_rows = _changelog(lake, asof.table, 0, max(bounds.values(), default=-1)) if asof else []
    before = [None] + [_utc(b["watermark"]) for b in batches]  # stream time as each batch began: the previous's
    stream_times = {b["batch_id"]: t for b, t in zip(batches, before, strict=False)}
    required = get_input(declared.stream).required
    found = []
    for batch, first, last in _consumed_by(batches, declared.stream, starting):
        visible = [g for g in table_rows if g[VERSION] <= bounds[batch["batch_id"]]]
        for r in _changelog(lake, declared.stream, first, last):
            if any(r.get(c) is None for c in required):  # taken without a column now required: quarantined at read
                continue
            if windows and start and not windows.contains(start, r[windows.time]):
                continue
            match = asof.match(r, visible) if asof else None
            adds = declared.adds(r, key, match)
            if adds is None:
                continue
            extra: dict = {"adds": adds}
            if asof:
                extra["matched"] = match and {"table": asof.table, "version": match[VERSION], "line": match[LINE]}
            stream_time = stream_times[batch["batch_id"]]
            if windows and start and stream_time and windows.closed(start, stream_time, graces.get(batch["batch_id"])):
                extra = {"adds": 0, "late": f"the window was closed at stream time {format_time(stream_time)}"}
            found.append(_record(declared.stream, batch, r, **extra))
    return found


def _is_external(table: str) -> bool:
    """Whether an input is a Delta table of another job (`delta_table`), not a changelog of the lake."""
    found = registry().inputs.get(table)
    return found is not None and found.external


def _utc(t: datetime | None) -> datetime | None:
    """A time delta-rs read without its zone (Delta keeps UTC), with it."""
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t


def _group_columns(declared: Records) -> list[str]:
    """The row's columns that are its group's key (`Records.groups`): its key columns but a window's start."""
    keys = table_spec(declared.output).keys
    return [k for k in keys if not (declared.windows and k == declared.windows.start)]


def _table_bounds(batches: list[dict], table: str) -> dict[int, int]:
    """Each batch's newest version of a table input: the newest it or an earlier batch consumed
    (`StagedBatch._bound`), -1 before any."""
    bounds, bound = {}, -1
    for b in batches:
        bound = max(bound, b["input_versions"].get(table, -1))
        bounds[b["batch_id"]] = bound
    return bounds


def _changelog(lake: Lake, table: str, first: int, last: int) -> list[dict]:
    """The records of an input's versions `first`..`last`, with `_commit_version` and `_line`, in ingest order."""
    if last < first:
        return []
    data = pa.table(delta_table(path_of(lake, table)).load_cdf(first, last))
    rows = [r for r in data.to_pylist() if r["_change_type"] == "insert"]
    for r in rows:
        r.pop("_change_type"), r.pop("_commit_timestamp", None)
        if "event_time" in r:
            r["event_time"] = _utc(r["event_time"])
    return sorted(rows, key=lambda r: (r[VERSION], r[LINE]))


def _consumed_by(batches: list[dict], table: str, starting: dict[str, int]) -> list[tuple[dict, int, int]]:
    """Each batch with the versions of a stream input it consumed (first, last): after the previous batch's."""
    spans, before = [], starting.get(table, 0) - 1
    for b in batches:
        last = b["input_versions"].get(table)
        if last is not None and last > before:
            spans.append((b, before + 1, last))
            before = last
    return spans


def _record(table: str, batch: dict, r: dict, **extra: object) -> dict:
    fields = {k: v for k, v in r.items() if k not in (VERSION, LINE)}
    return {
        "table": table,
        "version": r[VERSION],
        "line": r[LINE],
        "batch_id": batch["batch_id"],
        "mode": batch["mode"],
        "record": fields,
    } | extra
