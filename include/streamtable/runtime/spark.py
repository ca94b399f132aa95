"""The SparkSession every streamtable job uses: Delta's jars from the project, UI off, paths not a metastore."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from streamtable.core import registry, settings
from streamtable.core.errors import SetupError


def delta_jars() -> list[str]:
    """The jars every job gets (`settings.job_jars`); SetupError when Delta's are missing."""
    jars = settings.job_jars()
    if not settings.has_delta(jars):
        raise SetupError(
            f"no Delta jars in {settings.jar_dir()}: run `streamtable jars fetch` (in this repository: `make setup`)"
        )
    return jars


def get_spark(app_name: str = "streamtable", lake: str | None = None) -> SparkSession:
    """Return the process's SparkSession, creating it with Delta configured (and s3a, for a `lake` on S3 or an
    input table of another job there).

    The master comes from spark-submit when there is one, else from $STREAMTABLE_SPARK_MASTER
    (default `local[2]`). Tables are always addressed by path, so no Derby metastore is created.
    """
    lake_conf = settings.lake_conf(lake or "", *registry.external_paths())
    spark = SparkSession.getActiveSession()
    if spark is None:
        spark = _new_session(app_name, lake_conf)
    else:  # a session made before (for another lake): its s3a settings (its class path is the JVM's already)
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in lake_conf.items():
            if key.startswith("spark.hadoop."):
                hadoop.set(key[len("spark.hadoop.") :], value)
    ship_user_code()
    return spark


def _new_session(app_name: str, lake_conf: dict[str, str]) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    launched_by_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # else PySpark starts the driver's JVM now
    s3a_class_path = lake_conf.get("spark.executor.extraClassPath", "")  # the driver needs the executors' s3a jars
    if s3a_class_path and not launched_by_spark_submit:
        os.environ["SPARK_DIST_CLASSPATH"] = settings.driver_class_path(s3a_class_path)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local jobs never listen beyond loopback
    log_level = os.environ.get("STREAMTABLE_SPARK_LOG_LEVEL", "fatal")
    conf = {
        "spark.jars": ",".join(delta_jars()),
        **settings.session_conf(),
        **settings.launch_conf(log_level),
        **lake_conf,
    }
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if not launched_by_spark_submit:  # we choose the master
        builder = builder.master(os.environ.get("STREAMTABLE_SPARK_MASTER", "local[2]")).config(
            "spark.driver.memory", settings.driver_memory()
        )
    return builder.getOrCreate()


def ship_user_code() -> None:
    """Pickle the functions of the user's pipeline files by value, so they travel with the Spark job.

    Executors (a cluster's, or the local Python workers) cannot import those files by name: the user's
    folder is not on their machines, and each file is loaded under a name of its own.
    """
    from pyspark import cloudpickle

    from streamtable.core.registry import current

    for module in current().user_modules:
        cloudpickle.register_pickle_by_value(module)
