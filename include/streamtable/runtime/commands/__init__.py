"""The commands on a pipeline: run, serve, reprocess, reset and validate, and a run handed to a live serve."""
