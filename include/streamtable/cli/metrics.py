"""`serve --metrics-port PORT`: each committed batch as Prometheus metrics, served at http://HOST:PORT/metrics.

prometheus_client (the Prometheus project's own client) keeps the metrics and serves them from a thread of the
driver; Prometheus, or an OpenTelemetry collector's Prometheus receiver, scrapes them. Per pipeline: batches,
input records and output rows (counters), each batch's duration (a histogram), and of the last batch its lag
(from the ingest commit of its oldest record to its commit), its stages' times, its watermark and when it ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from streamtable.runtime.query.progress import BatchProgress

DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300)


class ServeMetrics:
    """The metrics of one `serve` process, exported on `host:port` from the moment it is made."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.registry = registry = CollectorRegistry()
        pipeline = ["pipeline"]
        self.batches = Counter("streamtable_batches", "Batches committed", pipeline, registry=registry)
        self.records = Counter("streamtable_input_records", "Input records consumed", pipeline, registry=registry)
        self.output_rows = Counter(
            "streamtable_output_rows", "Rows the committed batches wrote", [*pipeline, "table"], registry=registry
        )
        self.duration = Histogram(
            "streamtable_batch_duration_seconds",
            "A batch, from start to commit",
            pipeline,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self.lag = Gauge(
            "streamtable_batch_lag_seconds",
            "The last batch's oldest ingest commit to its commit",
            pipeline,
            registry=registry,
        )
        self.stage = Gauge(
            "streamtable_batch_stage_seconds",
            "The last batch's time per stage",
            [*pipeline, "stage"],
            registry=registry,
        )
        self.watermark = Gauge(
            "streamtable_watermark_timestamp_seconds",
            "The stream time (largest event time)",
            pipeline,
            registry=registry,
        )
        self.finished = Gauge(
            "streamtable_last_batch_timestamp_seconds", "When the last batch committed", pipeline, registry=registry
        )
        start_http_server(port, addr=host, registry=registry)

    def observe(self, progress: BatchProgress) -> None:
        """Count one committed batch."""
        pipeline = progress.pipeline
        self.batches.labels(pipeline).inc()
        self.records.labels(pipeline).inc(progress.input_rows)
        for table, rows in progress.output_rows.items():
            self.output_rows.labels(pipeline, table).inc(rows)
        self.duration.labels(pipeline).observe(progress.duration_ms / 1000)
        if progress.lag_ms is not None:
            self.lag.labels(pipeline).set(progress.lag_ms / 1000)
        for stage, ms in progress.stage_ms.items():
            self.stage.labels(pipeline, stage).set(ms / 1000)
        if progress.watermark is not None:
            self.watermark.labels(pipeline).set(progress.watermark.timestamp())
        self.finished.labels(pipeline).set(progress.finished_at.timestamp())
