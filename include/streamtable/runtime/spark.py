"""The SparkSession every streamtable job uses: Delta's jars from the project, UI off, paths not a metastore."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
from types import ModuleType

from pyspark.sql import SparkSession

from streamtable.core import registry
from streamtable.core.errors import SetupError
from streamtable.runtime import spark_settings as settings


def delta_jars() -> list[str]:
    """The jars every job gets (`settings.job_jars`); SetupError when Delta's are missing."""
    jars = settings.job_jars()
    if not settings.has_delta(jars):
        raise SetupError(
            f"no Delta jars in {settings.jar_dir()}: run `streamtable jars fetch` (in this repository: `make setup`)"
        )
    return jars


def get_spark(
    app_name: str = "streamtable", lake: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """Return the process's SparkSession, creating it with Delta configured (and s3a, for a `lake` on S3 or an
    input table of another job there).

    The master comes from spark-submit when there is one, else from $STREAMTABLE_SPARK_MASTER
    (default `local[2]`). Tables are always addressed by path, so no Derby metastore is created.
    `conf` adds settings to a session made here (`spark.driver.extraJavaOptions` is added to streamtable's own);
    a session made before keeps its own.
    """
    lake_conf = settings.lake_conf(lake or "", *registry.external_paths())
    spark = SparkSession.getActiveSession()
    if spark is None:
        spark = _new_session(app_name, lake_conf, conf or {})
    else:  # a session made before (for another lake): its s3a settings (its class path is the JVM's already)
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in lake_conf.items():
            if key.startswith("spark.hadoop."):
                hadoop.set(key[len("spark.hadoop.") :], value)
    ship_user_code()
    return spark


def _new_session(app_name: str, lake_conf: dict[str, str], extra: dict[str, str] | None = None) -> SparkSession:
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
    for key, value in (extra or {}).items():
        java_options = key == "spark.driver.extraJavaOptions"
        conf[key] = f"{conf.get(key, '')} {value}".strip() if java_options else value
    if not launched_by_spark_submit:  # we choose the master
        conf["spark.master"] = os.environ.get("STREAMTABLE_SPARK_MASTER", "local[2]")
        conf["spark.driver.memory"] = settings.driver_memory()
        if log_level == "fatal":  # no logs asked for: none of the JVM's notices either
            _start_driver_without_notices({"spark.app.name": app_name, **conf})
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# What a driver's JVM prints on stderr whatever the log level, before any logging is configured: the JDK's notice of
# the incubator module that Spark's launcher always adds (`--add-modules=jdk.incubator.vector`), which no option of the
# JVM or of Spark turns off. (Spark's "Setting default log level" notice is turned off in log4j2.properties.)
JVM_NOTICES = (b"WARNING: Using incubator modules: ",)


def _start_driver_without_notices(conf: dict[str, str]) -> None:
    """Start the driver's JVM as PySpark would (`launch_gateway`, with the session's conf), its stderr read by a thread
    that passes every line on to ours but JVM_NOTICES; the session made next uses that JVM."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM started before (its session stopped): it is reused
        return
    read, write = os.pipe()  # read from before the JVM starts: a JVM that fails to start says why
    threading.Thread(target=_pass_on_stderr, args=(read,), name="driver-stderr", daemon=True).start()
    try:
        gateway = launch_gateway(
            SparkConf(loadDefaults=False).setAll(list(conf.items())), popen_kwargs={"stderr": write}
        )
    finally:
        os.close(write)  # the JVM holds its own copy: the thread ends when the JVM (and its children) have exited
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on_stderr(read: int) -> None:
    with os.fdopen(read, "rb") as driver:
        for line in driver:
            if line.startswith(JVM_NOTICES):
                continue
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(2, view) :]
            except OSError:  # our stderr is gone: keep reading, so the JVM never blocks on a full pipe
                pass


def ship_user_code() -> None:
    """Pickle the functions of the user's pipeline files and helper modules by value, so they travel with the job.

    Executors (a cluster's, or the local Python workers) cannot import those files by name: the user's
    folder is not on their machines, and each pipeline file is loaded under a name of its own. A helper module
    imported later (inside `process`) is shipped as it is imported.
    """
    from pyspark import cloudpickle

    loaded = registry.current()
    _SHIPPED_ON_IMPORT.folders = [str(f) for f in loaded.folders]
    if _SHIPPED_ON_IMPORT not in sys.meta_path:
        sys.meta_path.insert(0, _SHIPPED_ON_IMPORT)
    helpers = [m for m in list(sys.modules.values()) if _SHIPPED_ON_IMPORT.holds(module_file(m))]
    for module in (*loaded.user_modules, *helpers):
        cloudpickle.register_pickle_by_value(module)


def module_file(module: object) -> str | None:
    """A module's `__file__`, read from its namespace: asking a stand-in for a module GX imports on first use
    (quality/gx_import.py) would import that module (scipy.stats and altair: about 1.2 CPU-s of every driver)."""
    file = getattr(module, "__dict__", {}).get("__file__")
    return file if isinstance(file, str) else None


class _ShippedOnImport(importlib.abc.MetaPathFinder):
    """Finds a top-level module in the user's folders and has its functions pickled by value once it is imported."""

    def __init__(self) -> None:
        self.folders: list[str] = []

    def holds(self, file: str | None) -> bool:
        return file is not None and any(file.startswith(folder + os.sep) for folder in self.folders)

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        """The spec `import name` finds along sys.path, when it is in a user's folder (its submodules are shipped with
        it); else None, for the usual finders."""
        spec = importlib.machinery.PathFinder.find_spec(name) if path is None and self.folders else None
        if spec is None or spec.loader is None or not self.holds(spec.origin):
            return None
        spec.loader = _ShippingLoader(spec.loader)
        return spec


class _ShippingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # it is in sys.modules already, as registering asks
        self.loader.exec_module(module)


_SHIPPED_ON_IMPORT = _ShippedOnImport()
