"""A generation's Structured Streaming query: its inputs as sources, its `foreachBatch` handler, its epochs and
checkpoint, each batch's `stream_progress`; drained (run, reprocess) or served."""
