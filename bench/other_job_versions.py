"""A batch over another job's Delta table costs what its new versions hold, not the table's history: a run reads the
log entries committed since the last run, whatever the table's version count.

    .venv/bin/python bench/other_job_versions.py --versions 100 1000 5000 --rounds 4

One process, one warm SparkSession. For each of `--versions`, another job's `users` table (keyed by `user`, no Change
Data Feed: its rows are records, told apart by the versions that added their files, the case that needs the most of
its log) is written by delta-rs, one commit per version, then compacted by one OPTIMIZE (so that its live files, which
Spark reads whole, are few whatever its history). A table-driven pipeline (users per region, `aggregate_table` with
`RETRACT`) takes it whole in a first batch, not timed. Then `--rounds` rounds of two batches, each after one more
commit of 20 rows (10 new users, 10 moved to another region), each in a process that has read nothing of the log yet
(`other_job_log`'s in-process cache emptied: a new `streamtable run`):
- `summaries kept`: as a run goes now, from what the lake keeps of the older commits (`storage.other_job_summary`);
- `summaries removed`: the lake's `_other_jobs` folder removed first, so the batch reads the whole log again, as
  every run did before.
Each batch's time (`lifecycle.run`, in process) is recorded with its parts: `log work`, the time of streamtable's own
reads of the other job's log (`external`'s checks and file versions, `other_jobs.require_whole_log`), and `batch`,
`duration_ms` of its `stream_progress` row (the foreachBatch: read, compute, gate, commit), the rest being the query's
start and stop (Spark's planning of its Delta source included); and the log entries it read. After each batch the
output is checked equal to the aggregate of the table's snapshot. Medians, in `bench/results/other_job_versions.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from streamtable.core import registry
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.inputs import other_jobs
from streamtable.runtime.query.progress import history
from streamtable.runtime.spark import get_spark
from streamtable.storage import delta_rs, external, other_job_log
from streamtable.storage.lake import Lake
from streamtable.storage.other_job_summary import SUMMARIES
from streamtable.storage.reader import rows as table_rows

RESULTS = Path(__file__).resolve().parent / "results"
REGIONS = ("eu", "us", "apac")
SCHEMA = pa.schema([("user", pa.string()), ("region", pa.string()), ("event_time", pa.timestamp("us", "UTC"))])
MODES = ("summaries kept", "summaries removed")

PIPELINE = '''
"""Users per region of another job's users table of {versions} versions."""
from streamtable import Column, Pipeline, RETRACT, Type, aggregate_table, changed_groups, delta_table, table

S = Type.STRING
USERS = delta_table(
    "users_{versions}",
    path={path!r},
    columns=[Column("user", S), Column("region", S), Column("event_time", Type.TIMESTAMP)],
    keys=["user"],
)


def process(batch):
    users = batch.changes("users_{versions}")
    current = batch.current("users_per_region_{versions}", keys_of=changed_groups(users, ["region"]))
    batch.upsert("users_per_region_{versions}", aggregate_table(current, users, ["region"], "users"), delete=RETRACT)


PIPELINE = Pipeline(
    name="regions_{versions}",
    doc=__doc__,
    tables=("users_{versions}",),
    streams=(),
    outputs=(table("users_per_region_{versions}", [Column("region", S), Column("users", Type.LONG)], keys=["region"]),),
    process=process,
)
'''


def users(first: int, count: int, region_of=lambda i: REGIONS[i % 3]) -> pa.Table:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    return pa.Table.from_pylist(
        [{"user": f"u{i}", "region": region_of(i), "event_time": at} for i in range(first, first + count)], SCHEMA
    )


class Table:
    """One users table of `versions` versions, its lake and its pipeline."""

    def __init__(self, root: Path, versions: int, folder: Path):
        self.versions, self.path = versions, str(root / f"users_{versions}")
        self.lake = Lake(root / f"lake_{versions}")
        self.pipeline = f"regions_{versions}"
        (folder / f"{self.pipeline}.py").write_text(PIPELINE.format(versions=versions, path=self.path))
        started = time.perf_counter()
        for version in range(versions - 1):  # one user a commit
            write_deltalake(self.path, users(version, 1), mode="append")
        DeltaTable(self.path).optimize.compact()  # the last version: every row in one file
        self.written_s = round(time.perf_counter() - started, 1)
        self.users = versions - 1
        self.moved = 0
        self.expected = {f"u{i}": REGIONS[i % 3] for i in range(self.users)}  # each user's latest region
        self.seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
        self.log_work: dict[str, list[float]] = {mode: [] for mode in MODES}
        self.batch_ms: dict[str, list[int]] = {mode: [] for mode in MODES}
        self.reads: dict[str, list[int]] = {mode: [] for mode in MODES}

    def commit(self) -> None:
        """One more version: 10 new users, and 10 of the older ones moved to the next region."""
        self.moved += 1
        moved = users(self.moved * 10, 10, lambda i: REGIONS[(i + self.moved) % 3])
        added = pa.concat_tables([users(self.users, 10), moved])
        write_deltalake(self.path, added, mode="append")
        self.expected |= {r["user"]: r["region"] for r in added.to_pylist()}
        self.users += 10

    def batch(self, mode: str, read: Counter, log_work: list[float]) -> None:
        if mode == "summaries removed":
            shutil.rmtree(Path(self.lake.root) / SUMMARIES, ignore_errors=True)
        other_job_log._COMMITS.clear()  # a new process: nothing of the log read yet
        read.clear()
        log_work.clear()
        started = time.perf_counter()
        report = run(self.lake, self.pipeline)
        self.seconds[mode].append(time.perf_counter() - started)
        self.log_work[mode].append(sum(log_work))
        self.batch_ms[mode].append(history(self.lake, self.pipeline)[-1]["duration_ms"])
        self.reads[mode].append(sum(read.values()))
        assert report.batches == 1, report

    def check(self) -> None:
        """The output equals the count of each user's latest region (a later version's row replaces an earlier)."""
        found = {r["region"]: r["users"] for r in table_rows(self.lake, f"users_per_region_{self.versions}")}
        assert found == dict(Counter(self.expected.values())), (self.versions, found)

    def summary(self) -> dict:
        def medians(found: dict[str, list]) -> dict[str, float]:
            return {mode: round(statistics.median(values), 3) for mode, values in found.items()}

        return {
            "versions": self.versions,
            "written_s": self.written_s,
            "median_seconds": medians(self.seconds),
            "median_log_work_seconds": medians(self.log_work),
            "median_batch_ms": medians(self.batch_ms),
            "seconds": {mode: [round(x, 3) for x in s] for mode, s in self.seconds.items()},
            "log_work_seconds": {mode: [round(x, 3) for x in s] for mode, s in self.log_work.items()},
            "log_entries_read": self.reads,
        }


def counting() -> Counter:
    """Count the log entries read from here on (as `other_job_log` reads them, one by one or several at once)."""
    read: Counter = Counter()
    entry, lock = delta_rs.log_entry, threading.Lock()

    def counted(path: str, version: int):
        with lock:
            read[version] += 1
        return entry(path, version)

    other_job_log.log_entry = counted  # type: ignore[assignment]
    delta_rs.log_entry = counted  # type: ignore[assignment]
    return read


def timing() -> list[float]:
    """Time streamtable's own reads of the other job's log from here on (each call's seconds)."""
    spent: list[float] = []

    def timed(function):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - started)

        return call

    for module, name in (
        (external, "check"),
        (external, "check_history"),
        (external, "check_rewrites"),
        (external, "file_versions"),
        (other_jobs, "require_whole_log"),
    ):
        setattr(module, name, timed(getattr(module, name)))
    return spent


def measure(sizes: list[int], rounds: int, root: Path) -> dict:
    folder = root / "pipelines"
    folder.mkdir(parents=True)
    os.environ[registry.ENV] = str(folder)
    get_spark("bench-other-job-versions")
    tables = [Table(root, versions, folder) for versions in sizes]
    registry.current.cache_clear()
    read, log_work = counting(), timing()
    for table in tables:  # the first batch: the whole table as inserts (and the JVM's warm-up)
        table.batch("summaries kept", read, log_work)
        table.check()
        for found in (table.seconds, table.log_work, table.batch_ms, table.reads):
            found["summaries kept"].clear()
    for _ in range(rounds):
        for table in tables:
            for mode in reversed(MODES):  # removed first: the kept batch then goes on from the summaries it made
                table.commit()
                table.batch(mode, read, log_work)
                table.check()
    return {"rounds": rounds, "tables": [t.summary() for t in tables]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, nargs="+", default=[100, 1000, 5000], help="versions of each table")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of two timed batches each")
    parser.add_argument("--out", default=str(RESULTS / "other_job_versions.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamtable-bench-versions-"))
    started = time.time()
    try:
        summary = measure(sorted(args.versions), args.rounds, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary |= {
        "command": "bench/other_job_versions.py " + " ".join(sys.argv[1:]),
        "seconds": round(time.time() - started),
    }
    summary["load_average_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, default=str))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
