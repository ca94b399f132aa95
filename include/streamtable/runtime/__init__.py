"""Layer 5, the runtime, by what it does: `commands` (run, serve, reprocess, reset, validate), the generation's
streaming `query`, one `batch` (what `process` sees, its staging, gate and commit), the `inputs` a batch reads, and
`observe` (status, explain); beside them a generation's `context`, what it `committed`, and the SparkSession."""
