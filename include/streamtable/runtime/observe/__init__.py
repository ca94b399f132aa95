"""What a pipeline did, read without Spark: its status (how far behind its inputs it is) and where a row came from."""
