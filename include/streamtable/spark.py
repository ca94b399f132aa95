"""The SparkSession every streamtable job uses: Delta's jars from the project, UI off, paths not a metastore."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from .errors import SetupError
from .jvm import driver_java_options

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def delta_jars() -> list[str]:
    """The Delta jars fetched by `make setup` (or $STREAMTABLE_JARS), as absolute paths."""
    jar_dir = os.environ.get("STREAMTABLE_JARS", str(PROJECT_ROOT / "jars"))
    jars = sorted(glob.glob(os.path.join(jar_dir, "*.jar")))
    if not any("delta-spark" in os.path.basename(j) for j in jars):
        raise SetupError(f"no Delta jars in {jar_dir}: run `make setup` first")
    return jars


def get_spark(app_name: str = "streamtable") -> SparkSession:
    """Return the process's SparkSession, creating it with Delta configured.

    The master comes from spark-submit when there is one, else from $STREAMTABLE_SPARK_MASTER
    (default `local[2]`). Tables are always addressed by path, so no Derby metastore is created.
    """
    spark = SparkSession.getActiveSession() or _new_session(app_name)
    ship_user_code()
    return spark


def _new_session(app_name: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local jobs never listen beyond loopback
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.jars", ",".join(delta_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("STREAMTABLE_SHUFFLE_PARTITIONS", "4"))
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # staged batches are read back by delta-rs (pyarrow), which reads INT96, Spark's default, as nanoseconds
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config(
            "spark.driver.extraJavaOptions", driver_java_options(os.environ.get("STREAMTABLE_SPARK_LOG_LEVEL", "fatal"))
        )
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit: we choose the master
        builder = builder.master(os.environ.get("STREAMTABLE_SPARK_MASTER", "local[2]")).config(
            "spark.driver.memory", os.environ.get("STREAMTABLE_DRIVER_MEMORY", "4g")
        )
    return builder.getOrCreate()


def ship_user_code() -> None:
    """Pickle the functions of the user's pipeline files by value, so they travel with the Spark job.

    Executors (a cluster's, or the local Python workers) cannot import those files by name: the user's
    folder is not on their machines, and each file is loaded under a name of its own.
    """
    from pyspark import cloudpickle

    from .registry import current

    for module in current().user_modules:
        cloudpickle.register_pickle_by_value(module)
