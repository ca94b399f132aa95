"""Layer 2, storage: the lake's layout, Delta tables read and committed (delta-rs, and Spark where a job must),
offsets, and Spark-free reads (`show`, `query`). Imports only `core`."""
