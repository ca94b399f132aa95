"""A Kafka topic copied into an input changelog, each record once (`ingest.kafka`'s copier).

Exactly once. The consumed offsets ride in the same Delta commit as the records: one Delta app transaction per
partition, `streamtable-kafka-<topic>-<partition>`, whose version is the next offset to copy from it. A copy reads
them from a snapshot of the table, `assign`s its consumer to them (no consumer group, no rebalancing: the group
`streamtable-kafka-<table>` is only told the offsets afterwards, for monitoring), consumes, and commits on that
same snapshot. A second copier that committed since the snapshot wrote the same transactions, so delta-rs's
conflict check fails this commit (CommitFailedError): the copier re-reads the offsets and goes on from there. The
offsets are of the topic whose id rides beside them (`kafka_offsets`), asked again before each commit: a topic made
anew is copied from its start. A table that does not exist yet is created by the first commit under the table's
ingest lock (two creations could not conflict). Every commit carries the transactions of every partition, so any
two copiers conflict.

Quarantine. Bad records are committed first, to `quarantine`, under its lock, on a snapshot read under that lock,
with transactions `streamtable-kafka-quarantine:<table>:<topic>-<partition>` (version: the next offset the copy
covered); a record whose offset is below its partition's version there was quarantined before and is not again.
So a copy killed between the two commits quarantines nothing twice when it is run again.

Crash points (`core.faults`): `kafka:consumed` (records read, nothing committed), `kafka:quarantined` (the
quarantine committed, the records not), `kafka:committed` (both committed, nothing printed).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from streamtable.core.errors import BadInputError
from streamtable.core.faults import crash_point
from streamtable.core.schema import arrow_schema
from streamtable.core.signals import SignalStop
from streamtable.core.tables import LINE, Table
from streamtable.ingest.changelog import TARGET_FILE_SIZE, WRITER_PROPERTIES, check_schema
from streamtable.ingest.kafka_consumer import Asker, BrokerUnreachable, FetchWatch, new_admin, new_consumer
from streamtable.ingest.kafka_offsets import (
    TopicIdentity,
    TopicSource,
    of_another_topic,
    quarantine_unseen,
    records_app_id,
    records_topic_app_id,
    topic_transaction,
)
from streamtable.ingest.kafka_records import record_row
from streamtable.ingest.quarantine import add_quarantined, quarantine_columns
from streamtable.ingest.record_parser import RecordError
from streamtable.storage.delta_rs import INPUT_TABLE_PROPERTIES, delta_table, open_table, write
from streamtable.storage.lake import Lake

ROUND_ROWS = 50_000  # records per commit, at most (env STREAMTABLE_KAFKA_COMMIT_ROWS)
ROUND_BYTES = 32 << 20  # bytes of values per commit, at most
FOLLOW_COMMIT_S = 1.0  # --follow: how long a commit gathers records
METADATA_REFRESH_S = 10.0  # --follow: how often it looks for partitions added to the topic
STALL_S = 60.0  # a bounded copy that gets nothing from the broker for this long fails
LOST_RACES = 100  # commits lost to other copiers in a row before giving up
BROKER_TIMEOUT_S = 15.0

log = logging.getLogger("streamtable.ingest.kafka")


@dataclass
class KafkaResult:
    table: str
    appended: int = 0
    quarantined: int = 0
    version: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to copy

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "appended": self.appended,
            "quarantined": self.quarantined,
            "version": self.version,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
        }


class _LostRace(Exception):
    """Another copier committed these partitions since our snapshot: re-read the offsets and go on from there."""


@dataclass
class _Round:
    """What a copy gathered since its last commit."""

    good: dict[str, list]
    bad: dict[str, list]
    bad_partitions: list[int] = field(default_factory=list)  # partition of each bad row
    size: int = 0
    consumed: int = 0

    @property
    def rows(self) -> int:
        return len(self.good[LINE]) + len(self.bad["raw"])


class Copier:
    def __init__(
        self, lake: Lake, table: Table, topic: str, bootstrap: str, on_commit: Callable[[KafkaResult], None] | None
    ) -> None:
        self.lake, self.table, self.topic, self.bootstrap, self.on_commit = lake, table, topic, bootstrap, on_commit
        self.path = lake.table_path(table.name)
        self.schema = arrow_schema(table.stored_columns)
        self.errors: list[str] = []
        self.round_rows = max(1, int(os.environ.get("STREAMTABLE_KAFKA_COMMIT_ROWS") or ROUND_ROWS))
        self.consumer = new_consumer(bootstrap, table.name, self._on_error)
        self.asker, self.watch = Asker(bootstrap, table.name), FetchWatch()
        self.admin = new_admin(bootstrap, BROKER_TIMEOUT_S)  # one for the copy: a follower asks every refresh
        self.partitions = self._partitions()
        self.identity = TopicIdentity(self.admin, topic, bootstrap, BROKER_TIMEOUT_S)
        self.next: dict[int, int] = {}  # partition -> next offset to copy (as committed, then as consumed)
        self.snapshot: DeltaTable | None = None
        self.totals = KafkaResult(table.name)

    def close(self) -> None:
        self.consumer.close()
        self.asker.close()

    def _on_error(self, error: KafkaError) -> None:
        """Keep the broker's errors (a stalled copy names the last), and say once that every broker is down."""
        if error.code() == KafkaError._ALL_BROKERS_DOWN and self.errors[-1:] != [str(error)]:
            log.warning("%s: every Kafka broker of %s is down; retrying until it is back", self.topic, self.bootstrap)
        self.errors = [*self.errors[-99:], str(error)]  # a copier may follow for months

    def _partitions(self) -> list[int]:
        try:
            metadata = self.asker.ask(lambda c: c.list_topics(timeout=BROKER_TIMEOUT_S))  # all: none by name
        except KafkaException as e:
            raise BrokerUnreachable(f"cannot reach the Kafka broker at {self.bootstrap}: {e.args[0]}") from None
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise BadInputError(f"Kafka topic {self.topic!r} does not exist on {self.bootstrap}")
        return sorted(found.partitions)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        try:
            wanted = TopicPartition(self.topic, partition)
            low, high = self.asker.ask(lambda c: c.get_watermark_offsets(wanted, timeout=BROKER_TIMEOUT_S))
        except KafkaException as e:
            raise BadInputError(f"cannot read the offsets of {self.topic}/{partition}: {e.args[0]}") from None
        return low, high

    def run(self, follow: bool, stop: threading.Event | SignalStop) -> KafkaResult:
        existing = open_table(self.path)
        check_schema(existing, self.table)
        marks = {p: self._watermarks(p) for p in self.partitions}
        self.low, self.high = {p: m[0] for p, m in marks.items()}, {p: m[1] for p, m in marks.items()}
        self.end = {} if follow else dict(self.high)
        self._resume()
        refreshed, lost = time.monotonic(), 0
        while True:
            if follow and time.monotonic() - refreshed > METADATA_REFRESH_S:
                if self._add_new_partitions():  # the broker answered: its end offsets can be asked for
                    self._restart_stalled_fetch()
                refreshed = time.monotonic()
            if not follow and self._all_done():
                break
            gathered = self._gather(follow, stop)
            moved = any(self.next[p] != self.committed[p] for p in self.partitions)
            if gathered.rows or moved:
                crash_point("kafka:consumed")
                if not self.identity.unchanged():  # the broker did not answer: consume the round again
                    self._resume()
                    continue
                try:
                    self._commit(gathered)
                except _LostRace:
                    lost += 1
                    if lost > LOST_RACES:
                        raise RuntimeError(
                            f"{self.table.name}: lost {lost} commits in a row to other copiers"
                        ) from None
                    self._resume()
                    continue
                lost = 0
                crash_point("kafka:committed")
                if follow and self.on_commit is not None:
                    self.on_commit(self._figures(gathered))
            if follow and stop.is_set():
                break
        self.totals.offsets = dict(self.next)
        return self.totals

    def _figures(self, gathered: _Round) -> KafkaResult:
        return KafkaResult(
            self.table.name, len(gathered.good[LINE]), len(gathered.bad["raw"]), self.totals.version, dict(self.next)
        )

    def _resume(self) -> None:
        """Read the committed offsets from a fresh snapshot of the table and assign the consumer to them."""
        self.snapshot = open_table(self.path)
        self.renewed = of_another_topic(self.snapshot, records_topic_app_id(self.topic), self.identity.id)
        if self.renewed:
            print(
                f"streamtable: {self.topic} on {self.bootstrap} is not the topic {self.table.name} copied so far (it "
                "was deleted and made anew, or is another cluster's): copying it from its first offsets",
                file=sys.stderr,
            )
        self.committed = {p: self._committed(p) for p in self.partitions}
        self.next = dict(self.committed)
        self.totals.version = None if self.snapshot is None else self.snapshot.version()
        # always a new assignment: the consumer may be past these offsets (what a lost round consumed)
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in self.next.items()])

    def _committed(self, partition: int) -> int:
        kept = None if self.snapshot is None or self.renewed else self.snapshot
        recorded = None if kept is None else kept.transaction_version(records_app_id(self.topic, partition))
        low, high = self.low[partition], self.high[partition]
        if recorded is None:
            return low
        if recorded > high:
            print(
                f"streamtable: {self.topic}/{partition}: offsets {high} to {recorded - 1} were copied, and the "
                f"partition now ends at {high} (the broker lost them); copying from {high}",
                file=sys.stderr,
            )
            return high
        if recorded < low:
            print(
                f"streamtable: {self.topic}/{partition}: offsets {recorded} to {low - 1} were deleted from the topic "
                f"before they were copied; copying from {low}",
                file=sys.stderr,
            )
            return low
        return recorded

    def _add_new_partitions(self) -> bool:
        """Take the partitions added to the topic since (--follow); False when the broker did not answer. A broker
        away (a restart, an outage longer than BROKER_TIMEOUT_S) is no failure here: the consumer reconnects by
        itself, and the next refresh looks again."""
        try:
            found = self._partitions()
        except BrokerUnreachable as e:
            log.debug("partition refresh skipped: %s", e)
            return False
        if not self.identity.unchanged():
            return False
        new = [p for p in found if p not in self.next]
        for p in new:
            self.low[p], self.high[p] = self._watermarks(p)
            self.partitions.append(p)
            self.next[p] = self.committed[p] = self._committed(p)
        if new:
            self.consumer.incremental_assign([TopicPartition(self.topic, p, self.next[p]) for p in new])
        return True

    def _restart_stalled_fetch(self) -> None:
        """Assign the consumer again at the positions when its fetch stalled (`FetchWatch`); make it anew when that
        did not help. Records fetched twice are dropped by `_take`, as after any seek."""
        stalled = self.watch.stalled(self.next, self._end_offset)
        if not stalled:
            return
        renewed = self.watch.stalls > 1
        again = "making a new consumer" if renewed else "assigning them again"
        log.warning("%s: partitions %s fetched nothing while records wait; %s", self.topic, stalled, again)
        if renewed:
            self.consumer.close()
            self.consumer = new_consumer(self.bootstrap, self.table.name, self._on_error)
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in self.next.items()])

    def _end_offset(self, partition: int) -> int | None:
        try:
            return self._watermarks(partition)[1]
        except BadInputError:  # the broker is away: no stall can be told, the next look tries again
            return None

    def _all_done(self) -> bool:
        return all(self.next[p] >= self.end[p] for p in self.partitions)

    def _gather(self, follow: bool, stop: threading.Event | SignalStop) -> _Round:
        """Consume records until the round is full, the end offsets are reached (bounded), or its time is up
        (follow)."""
        gathered = _Round(self.schema_columns(), quarantine_columns())
        now = datetime.now(UTC)
        started = last_news = time.monotonic()
        while gathered.rows < self.round_rows and gathered.size < ROUND_BYTES:
            if follow and (stop.is_set() or time.monotonic() - started >= FOLLOW_COMMIT_S):
                break
            if not follow and self._all_done():
                break
            messages = self.consumer.consume(num_messages=min(1000, self.round_rows - gathered.rows), timeout=0.2)
            if messages:
                last_news = time.monotonic()
            elif not follow and time.monotonic() - last_news > STALL_S:
                detail = f": {self.errors[-1]}" if self.errors else ""
                raise RuntimeError(f"nothing from the Kafka broker at {self.bootstrap} for {STALL_S:.0f} s{detail}")
            for message in messages:
                self._take(message, gathered, now, follow)
        return gathered

    def schema_columns(self) -> dict[str, list]:
        return {column.name: [] for column in self.table.stored_columns}

    def _take(self, message: Any, gathered: _Round, now: datetime, follow: bool) -> None:
        partition, offset = message.partition(), message.offset()
        if partition not in self.next:
            return
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                # everything below the end was read (offsets of transaction markers or compacted records included)
                limit = offset if follow else min(offset, self.end[partition])
                self.next[partition] = max(self.next[partition], limit)
                return
            if error.fatal():
                raise RuntimeError(f"Kafka: {error.str()}")
            return  # transient: librdkafka retries
        if offset < self.next[partition] or (not follow and offset >= self.end[partition]):
            return  # before the position (fetched before a seek), or past the end offsets of a bounded copy
        self.next[partition] = offset + 1
        value = message.value()
        gathered.size += len(value or b"") + len(message.key() or b"")
        time_type, timestamp = message.timestamp()
        millis = None if time_type == TIMESTAMP_NOT_AVAILABLE else timestamp
        try:
            row = record_row(self.table, value, message.key(), millis)
        except RecordError as e:
            raw = "null" if value is None else value.decode(errors="replace")
            add_quarantined(gathered.bad, self.table.name, raw, str(e), now, f"kafka:{self.topic}/{partition}", offset)
            gathered.bad_partitions.append(partition)
            return
        row[LINE] = len(gathered.good[LINE])
        for name, column in gathered.good.items():
            column.append(row[name])

    def _commit(self, gathered: _Round) -> None:
        """Commit the round: its bad records to quarantine (those not quarantined before), then its good ones with
        the offsets. Raises _LostRace when another copier committed these partitions since the snapshot."""
        source = TopicSource(self.table.name, self.topic, self.identity.id, self.next)
        transactions = [Transaction(records_app_id(self.topic, p), self.next[p]) for p in self.partitions]
        transactions += topic_transaction(records_topic_app_id(self.topic), self.identity.id)
        rows = pa.Table.from_pydict(gathered.good, schema=self.schema)
        try:
            if gathered.bad_partitions:
                quarantine_unseen(self.lake, source, gathered.bad, gathered.bad_partitions)
            crash_point("kafka:quarantined")
            if self.snapshot is None:
                with self.lake.ingest_lock(self.table.name):  # creations cannot conflict
                    if open_table(self.path) is not None:
                        raise _LostRace
                    self._write(self.path, rows, transactions)
                self.snapshot = delta_table(self.path, version=0)  # ours: others may have committed since
            else:
                self._write(self.snapshot, rows, transactions)
        except CommitFailedError:
            raise _LostRace from None
        assert self.snapshot is not None
        self.committed = dict(self.next)
        self.totals.version = self.snapshot.version()
        self.totals.appended += len(gathered.good[LINE])
        self.totals.quarantined += len(gathered.bad["raw"])
        self._tell_group()

    def _write(self, target: str | DeltaTable, rows: pa.Table, transactions: list[Transaction]) -> None:
        write(
            target,
            rows,
            mode="append",
            configuration=INPUT_TABLE_PROPERTIES,
            schema_mode="merge",  # columns declared since the table was made (check_schema allowed them)
            target_file_size=TARGET_FILE_SIZE,
            writer_properties=WRITER_PROPERTIES,
            commit_properties=CommitProperties(app_transactions=transactions),
        )

    def _tell_group(self) -> None:
        """Tell the consumer group the committed offsets, for monitoring (`kafka-consumer-groups --describe`)."""
        try:
            self.consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in self.next.items()], asynchronous=True
            )
        except KafkaException:
            pass
