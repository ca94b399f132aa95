"""Seed 000's naive design: enrich each click with a query to an external database, one point query per click.

    .venv/bin/python bench/naive.py --clicks 100000

The seed's "first attempt", before Kafka Streams: a map() over the click stream that asks a database for
the user's region, click by click, and sums the clicks per region. The database is a PostgreSQL server of
the benchmark's own on this machine (`initdb` in a temporary directory, as the `postgres` user when run as
root), reached over loopback TCP: the cheapest round trip a network has, so the figure is the naive
design's best case. It holds the `user_regions` records, indexed by (user, event_time); each click asks
(a prepared statement) for its user's latest region at or before the click's time, the region that was
current when the click happened, so the answer is the pipeline's, and is checked against DuckDB's. Only
the clicks' loop is timed, not loading the database.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb_jobs
import pyarrow as pa
import pyarrow.csv as pacsv
import workloads
from deltalake import DeltaTable

from streamtable.storage.lake import Lake

LOOKUP = """PREPARE region_at(text, bigint) AS
    SELECT region FROM user_regions WHERE "user" = $1 AND event_time <= $2
    ORDER BY event_time DESC, version DESC, line DESC LIMIT 1"""


def postgres_bin() -> Path | None:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl), or None when it is not installed."""
    found = shutil.which("initdb") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None)
    return Path(found).resolve().parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """A throw-away PostgreSQL server on 127.0.0.1 (data in a temporary directory); yields its connection string."""
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = Path(tempfile.mkdtemp(prefix="streamtable-naive-pg-"))
    if as_owner:
        shutil.chown(data, "postgres")
    port = free_port()
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    pg_ctl = [*as_owner, str(bin_dir / "pg_ctl"), "-D", str(data / "db")]
    subprocess.run(
        [*as_owner, str(bin_dir / "initdb"), "-D", str(data / "db"), "-U", "bench", "-A", "trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    subprocess.run([*pg_ctl, "-o", options, "-l", str(data / "log"), "-w", "start"], check=True, capture_output=True)
    try:
        yield f"host=127.0.0.1 port={port} user=bench dbname=postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def load_regions(connection, lake: Lake) -> None:
    """The lake's user_regions records, with their commit and line, into an indexed table."""
    changes = pa.table(DeltaTable(lake.table_path("user_regions")).load_cdf())
    rows = pa.table(
        {
            "user": changes["user"].cast(pa.string()),
            "event_time": changes["event_time"].cast(pa.int64()),
            "version": changes["_commit_version"],
            "line": changes["_line"],
            "region": changes["region"].cast(pa.string()),
        }
    )
    text = io.BytesIO()
    pacsv.write_csv(rows, text, pacsv.WriteOptions(include_header=False))
    with connection.cursor() as cur:
        cur.execute(
            'CREATE UNLOGGED TABLE user_regions ("user" text, event_time bigint, version bigint, line bigint,'
            " region text)"
        )
        cur.copy_expert("COPY user_regions FROM STDIN WITH (FORMAT csv)", io.StringIO(text.getvalue().decode()))
        cur.execute('CREATE INDEX ON user_regions ("user", event_time DESC, version DESC, line DESC)')
        cur.execute("ANALYZE user_regions")
        cur.execute(LOOKUP)
    connection.commit()


def clicks_per_region(connection, lake: Lake) -> tuple[float, dict[str, int]]:
    """Sum the lake's clicks per region, one query for each click's region; the seconds taken and the answer."""
    clicks = DeltaTable(lake.table_path("user_clicks")).to_pyarrow_dataset().to_table()
    users, counts = clicks["user"].to_pylist(), clicks["clicks"].to_pylist()
    times = clicks["event_time"].cast(pa.int64()).to_pylist()
    totals: dict[str, int] = defaultdict(int)
    start = time.perf_counter()
    with connection.cursor() as cur:
        for user, count, at in zip(users, counts, times, strict=True):
            cur.execute("EXECUTE region_at(%s, %s)", (user, at))
            found = cur.fetchone()
            totals[(found[0] if found else None) or "UNKNOWN"] += count
    return time.perf_counter() - start, dict(totals)


def measure(clicks: int, work: Path) -> dict:
    """The naive design on `clicks` generated clicks (and their users' regions), its answer checked against DuckDB's."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        return {"clicks": clicks, "skipped": "PostgreSQL's server programs (initdb, pg_ctl) are not installed"}
    import psycopg2

    lake = Lake(work / "naive-lake")
    workloads.generate(lake, "clicks_per_region", clicks)
    with postgres_server(bin_dir) as dsn:
        connection = psycopg2.connect(dsn)
        try:
            load_regions(connection, lake)
            seconds, answer = clicks_per_region(connection, lake)
        finally:
            connection.close()
    expected = duckdb_jobs.clicks_per_region(lake)["clicks_per_region"].to_pylist()
    shutil.rmtree(lake.root, ignore_errors=True)
    return {
        "clicks": clicks,
        "database": "PostgreSQL over loopback TCP, one prepared point query per click",
        "seconds": round(seconds, 2),
        "records_per_s": round(clicks / seconds),
        "us_per_lookup": round(seconds / clicks * 1e6, 1),
        "answers_equal": answer == {r["region"]: r["clicks"] for r in expected},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=100_000)
    work = Path(tempfile.mkdtemp(prefix="streamtable-bench-"))
    try:
        print(json.dumps(measure(parser.parse_args().clicks, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
