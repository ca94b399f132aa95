"""One micro-batch: the pipeline's view of it, its staging, its quality gate, what it records, and its commit."""
