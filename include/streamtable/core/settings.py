"""The package's version, in this one place (pyproject.toml reads it). The settings of a Spark job (jars, JVM, Spark
conf) are `runtime.spark_settings`'; the cloud's (the standard AWS configuration) are `storage.aws`'.
"""

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it)
