"""A prototype, for measurement only: a batch's commit that writes deletion vectors from the driver, finding each
replaced row by an index of key -> (file, row) instead of a scan (issue 38: what a commit paying for its batch costs).

    .venv/bin/python bench/dv_commit.py --keys 1000000 10000000 --events 1000 --batches 5

Not streamtable's commit path (`storage.merge_on_read` is): it shows what one would cost. For each of `--keys`, an
output of N keys (`store`, `item` -> `quantity`, as bench/merge_on_read.py) is written by delta-rs and given deletion
vectors (Spark's `ALTER TABLE`, once); the index of its keys' positions is built from one scan of the key columns
(timed); then each batch of `--events` upserts of uniformly random keys (a tenth deletes, a tenth new keys) is
committed by hand as Delta's protocol describes it: the new rows in one Parquet file, the changes' pre- and post-images
in a `_change_data` file, each touched file's deletion vector in one file (Roaring64, portable format: byte for byte
what Delta Spark writes for the same rows), a `remove` and an `add` for each touched file, the app transaction, all
in one put-if-absent log entry. After the batches the table is read by Delta Spark and by delta-rs's DataFusion reader
and checked against a NumPy model (Spark's read past 10M keys by its count, distinct keys and sums: it is not
collected into the driver), and its change feed's post-images counted. Beside it, in the same run, a copy of the
same table takes the same batches by today's commit (delta-rs's MERGE). Checkpoints are not written (a real writer
would, every 10 commits). Results go to `bench/results/dv_commit.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from merge_on_read import ABSENT, KEYS, SCHEMA, key_numbers, rows_of, stage  # bench/merge_on_read.py's key space

from streamtable.runtime.spark import get_spark
from streamtable.storage import delta_rs, merge_on_read, snapshot

RESULTS = Path(__file__).resolve().parent / "results"
DV_MAGIC = 1681511377
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def roaring32(values: np.ndarray) -> bytes:
    """Sorted distinct 32-bit values in Roaring's portable format (no run containers: cookie 12346)."""
    highs, starts = np.unique(values >> 16, return_index=True)
    containers = np.split((values & 0xFFFF).astype(np.uint16), starts[1:])
    bodies = []
    for low in containers:
        if len(low) <= 4096:  # an array container
            bodies.append(low.astype("<u2").tobytes())
        else:  # a bitmap container: 1024 little-endian 64-bit words
            bits = np.zeros(65536, dtype=bool)
            bits[low] = True
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    head = struct.pack("<II", 12346, len(highs))
    head += b"".join(struct.pack("<HH", int(k), len(c) - 1) for k, c in zip(highs, containers, strict=True))
    offset, offsets = len(head) + 4 * len(highs), []
    for body in bodies:
        offsets.append(offset)
        offset += len(body)
    return head + struct.pack(f"<{len(offsets)}I", *offsets) + b"".join(bodies)


def deletion_vector(rows: np.ndarray) -> bytes:
    """Delta's serialized deletion vector of the row indexes `rows`: the magic number, then a portable Roaring64."""
    rows = np.unique(rows.astype(np.uint64))
    buckets, starts = np.unique(rows >> np.uint64(32), return_index=True)
    parts = [struct.pack("<iQ", DV_MAGIC, len(buckets))]
    for key, low in zip(buckets, np.split(rows & np.uint64(0xFFFFFFFF), starts[1:]), strict=True):
        parts.append(struct.pack("<I", int(key)) + roaring32(low.astype(np.uint32)))
    return b"".join(parts)


def z85(data: bytes) -> str:
    padded = data + b"\0" * (-len(data) % 4)
    out = []
    for (word,) in struct.iter_unpack(">I", padded):
        chunk = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chunk.append(Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def stats(rows: pa.Table) -> str:
    """A data file's statistics as Delta's log holds them."""
    mins, maxs, nulls = {}, {}, {}
    for name in rows.column_names:
        column = rows[name]
        nulls[name] = column.null_count
        bounds = pc.min_max(column).as_py()
        if bounds["min"] is not None:
            mins[name], maxs[name] = bounds["min"], bounds["max"]
    figures = {"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return json.dumps(figures)


class Index:
    """Each key's current row: file number and row index (a NumPy array over the key space), and each file's
    deleted rows; what a writer would keep with the table and update each batch."""

    def __init__(self, path: str, capacity: int) -> None:
        self.path = path
        self.files: list[dict] = []  # each file's current add action
        self.deleted: list[set[int]] = []
        self.file_of = np.full(capacity, -1, dtype=np.int32)
        self.row_of = np.zeros(capacity, dtype=np.int64)

    def build(self) -> None:
        """From the table's add actions and one scan of each file's key columns."""
        table = delta_rs.delta_table(self.path)
        adds = {
            a["add"]["path"]: a["add"] for v in range(table.version() + 1) for a in _log(self.path, v) if "add" in a
        }
        for number, name in enumerate(sorted(adds)):
            keys = key_numbers(pq.read_table(Path(self.path) / name, columns=["store", "item"]))
            self.file_of[keys], self.row_of[keys] = number, np.arange(len(keys))
            self.files.append(adds[name])
            self.deleted.append(set())


def _log(path: str, version: int) -> list[dict]:
    entry = delta_rs.log_entry(path, version)
    return list(entry.actions) if entry else []


def commit(
    index: Index,
    keys: np.ndarray,
    quantity: np.ndarray,
    delete: np.ndarray,
    before: np.ndarray,
    app_id: str,
    version: int,
) -> None:
    """One batch's commit, by hand: new rows, change data, deletion vectors of the touched files, one log entry."""
    path = Path(index.path)
    table_version = delta_rs.delta_table(index.path).version()
    now = int(time.time() * 1000)
    existing = index.file_of[keys] >= 0
    touched_files = np.unique(index.file_of[keys[existing]])
    for number in touched_files:
        chosen = keys[existing][index.file_of[keys[existing]] == number]
        index.deleted[number].update(index.row_of[chosen].tolist())
    kept = ~delete
    new_rows = rows_of(keys[kept], quantity[kept])
    data_name = f"part-{uuid.uuid4()}.parquet"
    pq.write_table(new_rows, path / data_name)
    changes = [
        rows_of(keys[existing], before[keys[existing]]).append_column(
            "_change_type", pa.array(np.where(delete[existing], "delete", "update_preimage"))
        )
    ]
    changes.append(
        new_rows.append_column("_change_type", pa.array(np.where(existing[kept], "update_postimage", "insert")))
    )
    cdc_name = f"_change_data/cdc-{uuid.uuid4()}.parquet"
    (path / "_change_data").mkdir(exist_ok=True)
    pq.write_table(pa.concat_tables(changes), path / cdc_name)
    actions: list[dict] = [
        {"commitInfo": {"timestamp": now, "operation": "MERGE", "engineInfo": "bench/dv_commit"}},
        {"txn": {"appId": app_id, "version": version, "lastUpdated": now}},
    ]
    dv_id = uuid.uuid4()
    dv_file, descriptors = bytearray(b"\x01"), {}  # one file of every touched file's vector, as Spark writes them
    for number in touched_files:
        dv = deletion_vector(np.fromiter(index.deleted[number], dtype=np.int64))
        descriptors[number] = {
            "storageType": "u",
            "pathOrInlineDv": z85(dv_id.bytes),
            "offset": len(dv_file),
            "sizeInBytes": len(dv),
            "cardinality": len(index.deleted[number]),
        }
        dv_file += struct.pack(">I", len(dv)) + dv + struct.pack(">I", zlib.crc32(dv))
    (path / f"deletion_vector_{dv_id}.bin").write_bytes(bytes(dv_file))
    for number in touched_files:
        old = index.files[number]
        descriptor = descriptors[number]
        removed = {k: old[k] for k in ("path", "partitionValues", "size") if k in old}
        removed |= {"deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True}
        if "deletionVector" in old:
            removed["deletionVector"] = old["deletionVector"]
        figures = json.loads(old["stats"]) | {"tightBounds": False}
        added = old | {"dataChange": True, "deletionVector": descriptor, "stats": json.dumps(figures)}
        actions += [{"remove": removed}, {"add": added}]
        index.files[number] = added
    data_add = {
        "path": data_name,
        "partitionValues": {},
        "size": (path / data_name).stat().st_size,
        "modificationTime": now,
        "dataChange": True,
        "stats": stats(new_rows),
    }
    actions.append({"add": data_add})
    actions.append(
        {
            "cdc": {
                "path": cdc_name,
                "partitionValues": {},
                "size": (path / cdc_name).stat().st_size,
                "dataChange": False,
            }
        }
    )
    entry = path / "_delta_log" / f"{table_version + 1:020d}.json"
    with open(entry, "x") as log:  # put-if-absent: a commit that lost a race fails here
        log.write("\n".join(json.dumps(a) for a in actions) + "\n")
    index.files.append(data_add)
    index.deleted.append(set())
    index.file_of[keys[kept]] = len(index.files) - 1
    index.row_of[keys[kept]] = np.arange(kept.sum())
    index.file_of[keys[delete]] = -1


def one_size(root: Path, keys: int, events: int, batches: int) -> dict:
    spark = get_spark("bench-dv-commit")
    rng = np.random.default_rng(38)
    path, cow = str(root / "output"), str(root / "copy_on_write")
    delta_rs.ensure_table(path, SCHEMA)
    numbers = np.arange(keys)
    delta_rs.write(path, rows_of(numbers, numbers % 1000), mode="append")
    shutil.copytree(path, cow)  # the same table, committed to as today (delta-rs's MERGE), beside the prototype
    merge_on_read.enable(spark, path)
    model = np.concatenate([numbers % 1000, np.full(events * batches, ABSENT)])
    index = Index(path, len(model))
    build_ms, _ = timed(index.build)
    times: dict[str, list[float]] = {"prototype": [], "copy_on_write": []}
    for batch in range(1, batches + 1):
        touched = rng.choice(keys, events - events // 10, replace=False)
        changed = np.concatenate([touched, keys + (batch - 1) * events + np.arange(events // 10)])
        quantity = rng.integers(-20, 50, len(changed))
        delete = np.zeros(len(changed), dtype=bool)
        delete[: events // 10] = True
        staged = stage(root / "staged" / str(batch), changed, quantity, delete)
        before = model.copy()
        times["prototype"].append(timed(commit, index, changed, quantity, delete, before, "bench", batch)[0])
        times["copy_on_write"].append(timed(delta_rs.merge_staged, cow, staged, KEYS, "bench", batch)[0])
        model[changed] = np.where(delete, ABSENT, quantity)
    result: dict = {"keys": keys, "events": events, "batches": batches, "index_build_ms": round(build_ms)}
    for name, measured in times.items():
        result[f"{name}_commit_ms"] = round(statistics.median(measured[1:]))
        result[f"{name}_all_ms"] = [round(t) for t in measured]
    result["equal"] = {
        "datafusion": rows_equal(snapshot.current_rows(delta_rs.delta_table(path)), model),
        "spark": spark_equal(spark, path, model, exact=keys <= 10_000_000),
        "change_feed_rows": feed_posts(path) == (events - events // 10) * batches,
    }
    return result


def timed(action, *args) -> tuple[float, object]:
    """`action(*args)`'s milliseconds and result."""
    start = time.perf_counter()
    result = action(*args)
    return (time.perf_counter() - start) * 1000, result


def rows_equal(rows: pa.Table, model: np.ndarray) -> bool:
    """Whether `rows` hold each key the model holds once, with its quantity, and no other."""
    got, expected = key_numbers(rows), np.flatnonzero(model != ABSENT)
    return bool(
        len(got) == len(expected)
        and np.array_equal(np.sort(got), expected)
        and np.array_equal(model[got], rows["quantity"].to_numpy())
    )


def spark_equal(spark, path: str, model: np.ndarray, exact: bool) -> bool:
    """Delta Spark's read against the model: row by row (`exact`), else its count, distinct keys and sums (a
    table of 50M rows is not collected into the driver)."""
    frame = spark.read.format("delta").load(path)
    if exact:
        return rows_equal(pa.Table.from_pandas(frame.toPandas(), preserve_index=False), model)
    key = "item * 100 + CAST(substring(store, 2) AS BIGINT)"
    got = frame.selectExpr("count(*)", f"count(DISTINCT {key})", "sum(quantity)", f"sum({key})").first()
    held = np.flatnonzero(model != ABSENT)
    return tuple(got) == (len(held), len(held), int(model[held].sum()), int(held.sum()))


def feed_posts(path: str) -> int:
    """How many post-images and inserts the table's change feed has since the prototype's first commit."""
    feed = pa.table(delta_rs.delta_table(path).load_cdf(2)).select(["_change_type"])
    kinds = feed["_change_type"].cast(pa.string())
    return int(pc.sum(pc.is_in(kinds, pa.array(["update_postimage", "insert"]))).as_py() or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "dv_commit.json"))
    args = parser.parse_args()
    runs = []
    for keys in args.keys:
        with tempfile.TemporaryDirectory(prefix="bench-dv-") as root:
            runs.append(one_size(Path(root), keys, args.events, args.batches))
            print(json.dumps(runs[-1]), file=sys.stderr)
    summary = {"runs": runs, "load": open("/proc/loadavg").read().split()[:3]}
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
