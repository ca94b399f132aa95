"""A generation's Structured Streaming query: its inputs as sources, its epochs and checkpoint, drained or served."""
