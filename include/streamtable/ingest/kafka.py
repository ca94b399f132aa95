"""`streamtable ingest TABLE --kafka TOPIC [--follow]`: copy a Kafka topic's records into an input changelog, each once.

Records. Each record's value is a JSON record, read by `record_parser.parse_record` exactly as a line of a file is; one
that breaks the table's rules (or is not UTF-8) goes to `quarantine` with `source` `kafka:TOPIC/PARTITION` and
`line` its offset. A record without the table's time column (`event_time`: `Table.time_column`) takes the Kafka
record's timestamp (Kafka Streams' default timestamp extractor); one that has it, even null, keeps its own.

Bounded, the copy stops at the end offsets (high watermarks) it found at start, committing every `ROUND_ROWS`
records (env `STREAMTABLE_KAFKA_COMMIT_ROWS`) or `ROUND_BYTES` of values; it prints one line at the end. With
`follow` it commits about every `FOLLOW_COMMIT_S` seconds while records arrive, printing a line after each commit,
until SIGTERM; a partition added to the topic meanwhile is found within `METADATA_REFRESH_S` (these figures:
`ingest.kafka_copier`).

How records become rows: `ingest.kafka_records`; how a copy commits them exactly once: `ingest.kafka_copier`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from streamtable.core.errors import BadInputError
from streamtable.core.registry import get_input
from streamtable.core.signals import until_sigterm
from streamtable.ingest.kafka_copier import Copier, KafkaResult
from streamtable.storage.lake import Lake


def broker_address(bootstrap_servers: str | None) -> str:
    """`--bootstrap-servers`, else $STREAMTABLE_KAFKA, else an error saying where to get one."""
    address = bootstrap_servers or os.environ.get("STREAMTABLE_KAFKA")
    if not address:
        raise BadInputError(
            "no Kafka broker: pass --bootstrap-servers HOST:PORT or set STREAMTABLE_KAFKA "
            '(`eval "$(make -s kafka)"` starts a local one)'
        )
    return address


def copy_topic(
    lake: Lake,
    table_name: str,
    topic: str,
    bootstrap_servers: str | None = None,
    follow: bool = False,
    on_commit: Callable[[KafkaResult], None] | None = None,
    stop: threading.Event | None = None,
) -> KafkaResult:
    """Copy `topic` into input `table_name` from where its last copy stopped, each record exactly once.

    Bounded: up to the end offsets found at start; returns the totals. `follow`: until `stop` is set (or SIGTERM,
    when called from the main thread), calling `on_commit` with each commit's figures; returns the totals.
    """
    table = get_input(table_name)
    copier = Copier(lake, table, topic, broker_address(bootstrap_servers), on_commit)
    try:
        with until_sigterm(stop, install=follow) as stopping:  # (`core.signals`: not an Event the handler sets)
            return copier.run(follow, stopping)
    finally:
        copier.close()
