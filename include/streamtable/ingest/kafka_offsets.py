"""Where a copy of a Kafka topic stands, in the Delta logs it commits to, and which topic those offsets are of.

A copy's offsets are Delta app transactions (`kafka_copier`'s docstring): in TABLE's log, one per partition whose
version is the next offset to copy; in quarantine's, one per partition below whose version the bad records are
quarantined. Offsets are only meaningful for the topic they were read from: a topic deleted and made anew (or one of
another cluster, under the same name) starts again at offset 0, so the offsets kept for the old one would skip its
records, without a word. Each log therefore also keeps the topic's id (Kafka's topic UUID, KIP-516) as the version of
one more app transaction; offsets kept for another id are those of another topic, and a copy starts the topic from
its first offset, as a Kafka consumer whose committed offsets went with the deleted topic does (the broker forgets
them then). Logs a release without ids wrote are read as of the topic there is.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable, Transaction

from streamtable.core.errors import BadInputError
from streamtable.core.tables import QUARANTINE
from streamtable.ingest.kafka_consumer import BrokerUnreachable
from streamtable.ingest.quarantine import QUARANTINE_SCHEMA, quarantine_locked, write_quarantine
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake

UNKNOWN_ID = 0  # Kafka's "no topic id" (a broker before 2.8): no identity to check


def records_app_id(topic: str, partition: int) -> str:
    """The app transaction, in TABLE's log, whose version is the next offset of `topic`'s `partition` to copy."""
    return f"streamtable-kafka-{topic}-{partition}"


def quarantine_app_id(table: str, topic: str, partition: int) -> str:
    """The app transaction, in quarantine's log, below whose version the partition's bad records are quarantined."""
    return f"streamtable-kafka-quarantine:{table}:{topic}-{partition}"  # Kafka topic names have no ':'


def records_topic_app_id(topic: str) -> str:
    """The app transaction, in TABLE's log, whose version is the id of the topic its offsets of `topic` are of."""
    return f"streamtable-kafka-topic:{topic}"


def quarantine_topic_app_id(table: str, topic: str) -> str:
    """The app transaction, in quarantine's log, whose version is the id of the topic its offsets of `topic` are of."""
    return f"streamtable-kafka-quarantine-topic:{table}:{topic}"


def topic_id(admin: AdminClient, topic: str, timeout_s: float) -> int:
    """`topic`'s id as a Delta app transaction's version (63 bits of its UUID), or UNKNOWN_ID when the broker has
    none. Raises KafkaException when the broker does not answer."""
    try:
        asked = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        found = asked.result(timeout=timeout_s)
    except KafkaException as e:
        if e.args[0].code() in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            return UNKNOWN_ID  # a broker before topic ids (Kafka 2.8): no identity to keep
        raise
    leading = found.topic_id.get_most_significant_bits() if found.topic_id is not None else 0
    return (leading & (1 << 64) - 1) >> 1  # the UUID's leading 63 bits (a version is a non-negative long); 0: none


class TopicIdentity:
    """The id of the topic a copy reads, as it was when the copy started (`id`), and whether it still is."""

    def __init__(self, admin: AdminClient, topic: str, bootstrap: str, timeout_s: float) -> None:
        self.admin, self.topic, self.bootstrap, self.timeout_s = admin, topic, bootstrap, timeout_s
        self.id = self._ask()

    def _ask(self) -> int:
        try:
            return topic_id(self.admin, self.topic, self.timeout_s)
        except (KafkaException, TimeoutError) as e:
            raise BrokerUnreachable(
                f"cannot read the id of Kafka topic {self.topic!r} on {self.bootstrap}: {e}"
            ) from None

    def unchanged(self) -> bool:
        """Whether the topic is still the one the copy started on; False when the broker did not answer. Asked before
        every commit: a topic made anew sends the consumer back to the new topic's first offsets, and its records past
        the ones copied would be committed as the old topic's, then copied again from the new one. Raises
        BadInputError (the copy stops) when it was made anew."""
        try:
            now = self._ask()
        except BrokerUnreachable:
            return False
        if now != self.id and UNKNOWN_ID not in (now, self.id):
            raise BadInputError(
                f"Kafka topic {self.topic!r} on {self.bootstrap} was deleted and made anew while this copy read it: "
                "stopped; the next copy takes the new topic from its first offsets"
            )
        return True


def of_another_topic(log: DeltaTable | None, app_id: str, topic_id: int) -> bool:
    """Whether the offsets `log` keeps are of a topic other than the one of `topic_id` (a topic made anew)."""
    recorded = None if log is None else log.transaction_version(app_id)
    return recorded is not None and topic_id != UNKNOWN_ID and recorded != topic_id


def topic_transaction(app_id: str, topic_id: int) -> list[Transaction]:
    """The app transaction that records `topic_id` beside the offsets (none for a topic without an id)."""
    return [] if topic_id == UNKNOWN_ID else [Transaction(app_id, topic_id)]


@dataclass(frozen=True)
class TopicSource:
    """A copy's records of `topic` into `table`, and the next offset it has read of each partition."""

    table: str
    topic: str
    topic_id: int
    next: dict[int, int]


def quarantine_unseen(lake: Lake, source: TopicSource, bad: dict[str, list], partitions: list[int]) -> None:
    """Commit the bad records (`bad`, each of the partition at its index in `partitions`) that quarantine's offsets of
    the topic do not cover, with those offsets moved to `source.next`; of another topic, quarantine covers none.
    Raises CommitFailedError when another copy committed since (under the quarantine's lock: none of this table's)."""
    with quarantine_locked(lake):
        path = lake.table_path(QUARANTINE.name)
        existing = open_table(path)
        topic_app = quarantine_topic_app_id(source.table, source.topic)
        renewed = of_another_topic(existing, topic_app, source.topic_id)  # its offsets are of the deleted topic
        kept = None if renewed else existing
        done = {
            p: None if kept is None else kept.transaction_version(quarantine_app_id(source.table, source.topic, p))
            for p in set(partitions)
        }
        keep = [
            i
            for i, (p, offset) in enumerate(zip(partitions, bad["line"], strict=True))
            if done[p] is None or offset >= done[p]
        ]
        if not keep:
            return
        rows = pa.Table.from_pydict(bad, schema=QUARANTINE_SCHEMA).take(keep)
        moved = sorted(source.next) if renewed else sorted({partitions[i] for i in keep})
        transactions = [Transaction(quarantine_app_id(source.table, source.topic, p), source.next[p]) for p in moved]
        transactions += topic_transaction(topic_app, source.topic_id)
        write_quarantine(path if existing is None else existing, rows, transactions)
