"""Every setting of a Spark job, in one place: the jars, the class archive, the driver's memory and JVM options, and
the Spark conf. The CLI's SparkSession (`runtime.spark`), Airflow's spark-submit tasks and the benchmarks all read
them here. No pyspark: Airflow's task factories import this module while a DAG file is parsed.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

__version__ = "0.1.0"  # the package's version, in this one place (pyproject.toml reads it)
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the installed package (site-packages, or include/ in a checkout)
LOG4J_CONF = PACKAGE_DIR / "log4j2.properties"  # package data, inside the wheel
# The Spark application every spark-submit task runs (package data: spark-submit needs a file path). It runs a
# `streamtable` command on the driver; the Airflow layer only points at it, never imports it.
JOB_SCRIPT = PACKAGE_DIR / "cli" / "streamtable_job.py"
DRIVER_MEMORY = "4g"

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
    """The driver's heap (`$STREAMTABLE_DRIVER_MEMORY`, default 4g): one value for the CLI, Airflow and benchmarks."""
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
    }
