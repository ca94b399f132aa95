"""The local object store (`make -s object-store`, scripts/object-store.sh: versitygw) as a lake for delta-rs and Spark.

delta-rs commits on S3 with put-if-absent (`If-None-Match: *`), so concurrent writers need no lock service: two
processes appending at once must lose no commit. Spark reaches the same bucket through s3a (jars/s3a/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from helpers import ROOT
from servers import parse_exports

pytestmark = pytest.mark.slow

EXPORTED = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def prefix() -> str:
    return f"tests/{uuid.uuid4().hex[:12]}"


def s3_put(env: dict[str, str], key: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """PUT s3://streamtable/KEY with SigV4 (curl, as scripts/object-store.sh does): (HTTP status, the ETag)."""
    args = ["curl", "-s", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}", "-X", "PUT", "--max-time", "10"]
    args += ["--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3"]
    args += ["--user", f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}"]
    args += ["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--data-binary", "@-"]
    for name, value in (headers or {}).items():
        args += ["-H", f"{name}: {value}"]
    out = subprocess.run(
        [*args, f"{env['AWS_ENDPOINT_URL']}/streamtable/{key}"], input=body, capture_output=True, check=True
    ).stdout.decode()
    head, status = out.rsplit("\n", 1)
    etags = [line.split(":", 1)[1].strip() for line in head.splitlines() if line.lower().startswith("etag:")]
    return int(status), etags[0] if etags else ""


def test_make_object_store_prints_the_exports_alone(object_store_env):
    proc = subprocess.run(["make", "-s", "object-store"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(line.startswith("export ") for line in lines), proc.stdout
    env = parse_exports(proc.stdout)
    assert set(EXPORTED) <= set(env)
    assert env["AWS_REGION"] == "us-east-1"
    assert env == object_store_env  # the server the tests share


def test_conditional_writes(object_store_env):
    key = f"{prefix()}/lease"
    status, etag = s3_put(object_store_env, key, b"first", {"If-None-Match": "*"})
    assert status == 200 and etag
    assert s3_put(object_store_env, key, b"second", {"If-None-Match": "*"})[0] == 412  # put-if-absent
    # compare-and-swap on the ETag, as a lease object needs
    assert s3_put(object_store_env, key, b"stale", {"If-Match": '"0123456789abcdef0123456789abcdef"'})[0] == 412
    status, new_etag = s3_put(object_store_env, key, b"renewed", {"If-Match": etag})
    assert status == 200 and new_etag != etag
    assert s3_put(object_store_env, key, b"late", {"If-Match": etag})[0] == 412


def test_delta_rs_writes_appends_and_reads(object_store_env):
    uri = f"s3://streamtable/{prefix()}/t"
    write_deltalake(uri, pa.table({"id": [1, 2]}), storage_options=object_store_env)
    write_deltalake(uri, pa.table({"id": [3]}), mode="append", storage_options=object_store_env)
    write_deltalake(uri, pa.table({"id": [4, 5]}), mode="append", storage_options=object_store_env)
    table = DeltaTable(uri, storage_options=object_store_env)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3, 4, 5]


APPENDER = """
import sys
import pyarrow as pa
from deltalake import write_deltalake

uri, writer, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    write_deltalake(uri, pa.table({"writer": [writer], "i": [i]}), mode="append")
"""


def test_concurrent_writers_lose_no_commit(object_store_env):
    """Two processes append N times each to one table at once: every commit lands, versions 0..2N, no row lost.

    With a plain PUT the loser of a race would overwrite the winner's commit file; put-if-absent makes it retry.
    """
    n = 10
    uri = f"s3://streamtable/{prefix()}/concurrent"
    write_deltalake(uri, pa.table({"writer": [0], "i": [0]}), storage_options=object_store_env)
    env = {**os.environ, **object_store_env}
    writers = [
        subprocess.Popen([sys.executable, "-c", APPENDER, uri, str(w), str(n)], env=env, stderr=subprocess.PIPE)
        for w in (1, 2)
    ]
    for proc in writers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-3000:]
    table = DeltaTable(uri, storage_options=object_store_env)
    assert table.version() == 2 * n
    assert sorted(h["version"] for h in table.history()) == list(range(2 * n + 1))
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["i"]) for r in rows) == [(0, 0)] + [(w, i) for w in (1, 2) for i in range(n)]


SPARK_JOB = """
import json, os, sys
from pyspark.sql import SparkSession
from streamtable.runtime import spark_settings as settings

spark_path, delta_rs_path = sys.argv[1], sys.argv[2]
s3a_jars = settings.s3a_jars()
# The s3a jars from the class path, not spark.jars: that would copy the 640 MB SDK bundle for every session. The
# driver's come after Spark's own jars (SPARK_DIST_CLASSPATH), so it keeps the class archive of `make setup`.
os.environ["SPARK_DIST_CLASSPATH"] = ":".join(s3a_jars)
conf = {
    "spark.jars": ",".join(settings.job_jars()),  # Delta's
    "spark.driver.extraJavaOptions": settings.driver_java_options("error"),
    "spark.executor.extraClassPath": ":".join(s3a_jars),
    **settings.session_conf(),
    "spark.hadoop.fs.s3a.endpoint": os.environ["AWS_ENDPOINT_URL"],
    "spark.hadoop.fs.s3a.endpoint.region": os.environ["AWS_REGION"],
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.access.key": os.environ["AWS_ACCESS_KEY_ID"],
    "spark.hadoop.fs.s3a.secret.key": os.environ["AWS_SECRET_ACCESS_KEY"],
}
builder = SparkSession.builder.master("local[2]").appName("object-store-test")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark.range(0, 100).write.format("delta").save(spark_path)
spark.range(100, 150).write.format("delta").mode("append").save(spark_path)
result = {
    "spark_reads_its_own": spark.read.format("delta").load(spark_path).count(),
    "spark_reads_delta_rs": sorted(r.id for r in spark.read.format("delta").load(delta_rs_path).collect()),
}
spark.stop()
print("RESULT " + json.dumps(result))
"""


# A second proof (make test-all): in make test, test_s3_pipelines' every-command test has streamtable's own Spark
# session on an s3 lake (s3a) read the tables delta-rs ingested and, in a reprocess's swap, overwrite an output with a
# Spark commit that delta-rs reads back, equal to a local lake's; test_two_hosts reads a cluster's results with
# delta-rs. This one builds such a session from the settings by hand (docs/operations.md).
@pytest.mark.extended
def test_spark_s3a_and_delta_rs_share_tables(object_store_env):
    """PySpark (Delta + hadoop-aws from jars/) writes a Delta table through s3a and reads delta-rs's; delta-rs reads
    Spark's. A process of its own: the s3a jars must be on the driver's class path when its JVM starts."""
    base = prefix()
    write_deltalake(
        f"s3://streamtable/{base}/from_delta_rs", pa.table({"id": [7, 8, 9]}), storage_options=object_store_env
    )
    proc = subprocess.run(
        [sys.executable, "-c", SPARK_JOB, f"s3a://streamtable/{base}/t2", f"s3a://streamtable/{base}/from_delta_rs"],
        env={**os.environ, **object_store_env, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result == {"spark_reads_its_own": 150, "spark_reads_delta_rs": [7, 8, 9]}
    table = DeltaTable(f"s3://streamtable/{base}/t2", storage_options=object_store_env)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(150))


def test_mirroring_a_folder_puts_only_what_is_new_changed_or_missing(object_store_env, tmp_path, monkeypatch):
    """How a lake on s3:// gets its Data Docs site after each run: the files of the run's pages, not the whole site."""
    from streamtable.storage.store import Store

    for key, value in object_store_env.items():
        monkeypatch.setenv(key, value)
    site = tmp_path / "site"
    (site / "pages").mkdir(parents=True)
    for name in ("index.html", "pages/a.html", "pages/b.html"):
        (site / name).write_text(name)
    target = f"s3://streamtable/{prefix()}/site"
    store = Store.for_lake(target)

    assert store.mirror_dir(str(site), target) == 3
    assert store.mirror_dir(str(site), target) == 0  # nothing changed
    (site / "pages" / "c.html").write_text("c")
    (site / "index.html").write_text("index, with c")
    (site / "pages" / "a.html").unlink()
    store.delete(f"{target}/pages/b.html")  # lost in the lake: put again
    assert store.mirror_dir(str(site), target) == 3
    assert store.objects(target) == [f"{target}/{name}" for name in ("index.html", "pages/b.html", "pages/c.html")]
    assert [store.read(f"{target}/{name}").data for name in ("index.html", "pages/c.html")] == [b"index, with c", b"c"]
