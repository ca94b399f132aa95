"""streamtable: Kafka Streams-style pipelines on Delta Lake and Spark Structured Streaming."""

__version__ = "0.1.0"
