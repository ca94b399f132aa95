"""The copier's Kafka consumer: its settings, where librdkafka's own lines go, and the watch on a stalled fetch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streamtable.core.errors import BadInputError

T = TypeVar("T")

log = logging.getLogger("streamtable.ingest.kafka")


class BrokerUnreachable(BadInputError):
    """The broker did not answer in time: a copy's start fails in one line; a follower goes on."""


class _LibrdkafkaLog:
    """Where librdkafka's own lines go (confluent-kafka's `logger`): to streamtable's debug log, not stderr.

    By default librdkafka writes a line to stderr for every failed reconnect while a broker is down, about 20 a
    second: a long outage would flood an Airflow task's log, and block a copier whose stderr nobody reads. An
    outage is said once instead, at warning (`Copier._on_error`).
    """

    def log(self, level: int, fmt: str, *args: Any) -> None:
        log.debug(fmt, *args)


def new_admin(bootstrap: str, timeout_s: float) -> AdminClient:
    """A client for the questions only an admin client answers (a topic's id), its lines where the consumer's go."""
    config: dict[str, Any] = {  # (the stubs type a config's values as scalars; callbacks and a logger are taken)
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": int(timeout_s * 1000),
        "error_cb": lambda _error: None,  # its errors are the question's (KafkaException)
        "logger": _LibrdkafkaLog(),
    }
    return AdminClient(config)


def new_consumer(bootstrap: str, table: str, on_error: Callable[[KafkaError], None]) -> Consumer:
    """A consumer the copier `assign`s partitions to: it commits nothing itself and reads committed records only."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"streamtable-kafka-{table}",  # offsets are committed there only for monitoring
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "isolation.level": "read_committed",
            "error_cb": on_error,
            "logger": _LibrdkafkaLog(),
        }
    )


class Asker:
    """The copier's questions to the broker (its partitions, their offsets), on a client of their own.

    Not on the consumer that fetches: one whose fetch stalled after a broker restart (`FetchWatch`) may answer
    nothing on its connections either, and a watch that asked it would take the stall for a broker still away. A
    question left unanswered closes the client; the next question makes a new one.
    """

    def __init__(self, bootstrap: str, table: str) -> None:
        self.bootstrap, self.table = bootstrap, table
        self._client: Consumer | None = None

    def ask(self, question: Callable[[Consumer], T]) -> T:
        if self._client is None:  # its errors are the question's: the fetching consumer reports an outage
            self._client = new_consumer(self.bootstrap, self.table, on_error=lambda _error: None)
        try:
            return question(self._client)
        except KafkaException:
            self.close()
            raise

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class FetchWatch:
    """Finds a follower's fetch that stopped while records wait: a partition whose position did not move between
    two looks although the broker holds records past it.

    librdkafka's `assign`ed consumers can stop fetching after a broker restart and stay so until they are made anew
    (confluentinc/librdkafka#5153): a follower that copies for months would go silently stale. The copier looks
    every METADATA_REFRESH_S, asking the broker's end offsets through an `Asker`; the first stall of a run of them
    re-assigns the consumer, a stall that outlives that makes a new consumer (`stalls`). A look the broker did not
    answer tells nothing: the run of stalls goes on past it.
    """

    def __init__(self) -> None:
        self.looked: dict[int, int] = {}  # partition -> its position at the last look
        self.stalls = 0  # looks in a row that found a stall

    def stalled(self, positions: dict[int, int], end: Callable[[int], int | None]) -> list[int]:
        """The partitions stalled since the last look; `end(p)` is the broker's end offset of p (None: no answer,
        and the broker is not asked again in this look: each unanswered question waits for its timeout)."""
        unmoved = [p for p, at in positions.items() if self.looked.get(p) == at]
        self.looked = dict(positions)
        stalled = []
        for p in unmoved:
            end_offset = end(p)
            if end_offset is None:
                return []
            if end_offset > positions[p]:
                stalled.append(p)
        self.stalls = self.stalls + 1 if stalled else 0
        return stalled
