"""Every setting of a Spark job, in one place: the jars, the class archive, the driver's memory and JVM options, and
the Spark conf (with s3a for a lake on object storage, from the standard AWS configuration: `storage.aws`). The
CLI's SparkSession (`runtime.spark`), Airflow's spark-submit tasks and the benchmarks all read them here. No pyspark:
Airflow's task factories import this module while a DAG file is parsed.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
from pathlib import Path

from streamtable.storage.aws import aws_settings, on_object_store

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the installed package (site-packages, or include/ in a checkout)
LOG4J_CONF = PACKAGE_DIR / "log4j2.properties"  # package data, inside the wheel
# The Spark application every spark-submit task runs (package data: spark-submit needs a file path). It runs a
# `streamtable` command on the driver; the Airflow layer only points at it, never imports it.
JOB_SCRIPT = PACKAGE_DIR / "cli" / "streamtable_job.py"
# 2g, not 4g: a 10M-click drain took 46.9 and 44.3 s with it against 49.7 and 48.2 s with 4g, its tree 2.45 / 2.58
# GiB against 2.80 / 2.65 (`bench/memory.py clicks_per_region 10000000 --driver-memory 2g`, 2026-11-27); with 4g the
# JVM grows into its heap and every 1M drain's tree was over 2.5 GiB; the 100M drain completes with 2g.
DRIVER_MEMORY = "2g"

# The jars of a job, as Maven artifacts (group, artifact, version): `streamtable jars fetch` downloads exactly these.
# Delta's Python package (delta-spark in pyproject.toml) and its jars are one version, built for Spark 4.1.
DELTA_VERSION = "4.4.0"
JARS: dict[str, list[tuple[str, str, str]]] = {
    # every job gets these (jar_dir()/*.jar)
    "delta": [
        ("io.delta", "delta-spark_4.1_2.13", DELTA_VERSION),
        ("io.delta", "delta-storage", DELTA_VERSION),
        ("io.delta", "delta-kernel-api", DELTA_VERSION),
        ("io.delta", "delta-kernel-defaults", DELTA_VERSION),
        ("io.delta", "delta-kernel-unitycatalog", DELTA_VERSION),
    ],
    # s3a:// lakes (jar_dir()/s3a/, added by the jobs that need them): Hadoop's S3 connector and the AWS SDK
    "s3a": [
        ("org.apache.hadoop", "hadoop-aws", "3.4.2"),
        ("software.amazon.awssdk", "bundle", "2.29.52"),
        ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.2.1"),
        ("org.wildfly.openssl", "wildfly-openssl", "2.1.4.Final"),
    ],
}


def jar_dir() -> Path:
    """The folder of the jars every job gets: `$STREAMTABLE_JARS`, else `share/streamtable/jars` of the Python
    environment streamtable is installed in (filled by `streamtable jars fetch`), so each environment (Airflow's, a
    Spark image's) carries its own; this repository's `make setup` links the checkout's jars/ there."""
    configured = os.environ.get("STREAMTABLE_JARS")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "streamtable" / "jars"


def job_jars() -> list[str]:
    """The jars every job gets (Delta's), as absolute paths; empty before set-up fetched them."""
    return sorted(glob.glob(str(jar_dir() / "*.jar")))


def has_delta(jars: list[str]) -> bool:
    return any("delta-spark" in os.path.basename(j) for j in jars)


def driver_memory() -> str:
    """The driver's heap (`$STREAMTABLE_DRIVER_MEMORY`, default 2g): one value for the CLI, Airflow and benchmarks."""
    return os.environ.get("STREAMTABLE_DRIVER_MEMORY") or DRIVER_MEMORY


def class_archive() -> Path | None:
    """Where the drivers' class archive is (`$STREAMTABLE_CLASS_ARCHIVE`, default jars/spark-classes.jsa); None when
    disabled (the variable set empty)."""
    configured = os.environ.get("STREAMTABLE_CLASS_ARCHIVE", str(jar_dir() / "spark-classes.jsa"))
    return Path(configured) if configured else None


def driver_java_options(log_level: str) -> str:
    """The driver's JVM options: UTC, streamtable's log4j settings, the class archive if there is one, and
    `$STREAMTABLE_JVM_OPTS`."""
    options = [
        "-Duser.timezone=UTC",
        f"-Dstreamtable.spark.log.level={log_level}",
        f"-Dlog4j2.configurationFile={LOG4J_CONF}",
    ]
    archive = class_archive()
    if archive is not None and archive.is_file():
        options += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return " ".join([*options, os.environ.get("STREAMTABLE_JVM_OPTS", "")]).strip()


def launch_conf(log_level: str) -> dict[str, str]:
    """Spark settings a driver must have when its JVM starts (spark-submit's `--conf`, or a session's builder)."""
    return {
        "spark.driver.extraJavaOptions": driver_java_options(log_level),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }


def session_conf() -> dict[str, str]:
    """Spark settings every streamtable job's session gets: Delta, UTC, no UI, tables addressed by path."""
    return {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": os.environ.get("STREAMTABLE_SHUFFLE_PARTITIONS", "4"),
        "spark.databricks.delta.snapshotPartitions": "2",
        # staged batches are read back by delta-rs (pyarrow), which reads INT96, Spark's default, as nanoseconds
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # tables are addressed by path, never through a catalog: Spark's default warehouse, ./spark-warehouse, would
        # only litter the user's working directory
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), f"streamtable-spark-warehouse-{os.getuid()}"),
    }


def s3a_jars() -> list[str]:
    """Spark's s3a connector (hadoop-aws, the AWS SDK bundle, ...) in `<jars>/s3a/`, filled by set-up or
    `streamtable jars fetch --with s3a`; only jobs on an s3:// lake get them."""
    return sorted(glob.glob(str(jar_dir() / "s3a" / "*.jar")))


def s3a_class_path(lake: str, *inputs: str) -> str:
    """The s3a jars as a class path when `lake` or any of `inputs` (tables of other jobs) is on S3; "" when all
    are local. The jars must be at the same path on every host of a cluster; SetupError when they are missing."""
    remote = on_object_store(lake, *inputs)
    if remote is None:
        return ""
    jars = s3a_jars()
    if not any("hadoop-aws" in os.path.basename(j) for j in jars):
        from streamtable.core.errors import SetupError

        raise SetupError(f"{remote} is on S3: Spark needs the s3a jars in {jar_dir() / 's3a'}: run `make setup`")
    return ":".join(jars)


def driver_class_path(class_path: str) -> str:
    """`$SPARK_DIST_CLASSPATH` with `class_path` appended: spark-submit puts it after Spark's own jars, so a driver
    reading S3 keeps its class archive (the JVM maps one only when the class path it was recorded with begins the
    driver's, and `spark.driver.extraClassPath` would come first)."""
    return ":".join(p for p in (os.environ.get("SPARK_DIST_CLASSPATH", ""), class_path) if p)


def lake_launch_conf(lake: str, *inputs: str) -> dict[str, str]:
    """What the executors of a job on `lake`, reading the tables of other jobs at `inputs`, need when their JVMs
    start: the s3a jars on their class path when any is on S3 (not `spark.jars`, which would copy the 640 MB SDK
    bundle into every session; the driver gets them through `driver_class_path`). Nothing when all are local; no
    secrets (spark-submit's command line shows them)."""
    class_path = s3a_class_path(lake, *inputs)
    return {"spark.executor.extraClassPath": class_path} if class_path else {}


def lake_conf(lake: str, *inputs: str) -> dict[str, str]:
    """The Spark conf of a job on `lake` reading the tables of other jobs at `inputs`: when any is on S3, s3a
    reaching the same endpoint with the same credentials as delta-rs and the store (`aws_settings`), plus
    `lake_launch_conf`; {} when all are local.

    Keys are set only when configured: without them s3a uses AWS's defaults (its credentials chain, the
    region's endpoint). A custom endpoint (a local or S3-compatible server) gets path-style requests.
    """
    if on_object_store(lake, *inputs) is None:
        return {}
    aws = aws_settings()
    hadoop = "spark.hadoop.fs.s3a."
    conf = lake_launch_conf(lake, *inputs)
    conf[hadoop + "impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3a, for the tables' own paths
    conf["spark.hadoop.fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"  # an s3:// path that reaches Spark
    endpoint = aws.get("aws_endpoint_url")
    if endpoint:
        conf[hadoop + "endpoint"] = endpoint
        conf[hadoop + "path.style.access"] = "true"
        conf[hadoop + "connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    if aws.get("aws_region"):
        conf[hadoop + "endpoint.region"] = aws["aws_region"]
    if aws.get("aws_access_key_id") and aws.get("aws_secret_access_key"):
        conf[hadoop + "access.key"] = aws["aws_access_key_id"]
        conf[hadoop + "secret.key"] = aws["aws_secret_access_key"]
        if aws.get("aws_session_token"):
            conf[hadoop + "session.token"] = aws["aws_session_token"]
            conf[hadoop + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return conf
