"""The commands on a pipeline: run, serve, reprocess, reset and validate, a run handed to a live serve, and a run
with nothing to read (answered without Spark)."""
