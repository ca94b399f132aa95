"""Layer 5, the runtime: run, serve, reprocess and reset a pipeline; the batch a `process` sees, its staging, its
quality gate and its exactly-once commit; progress and status; the SparkSession. Imports every layer below."""
