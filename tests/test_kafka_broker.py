"""The local Kafka broker of `make -s kafka` (scripts/kafka.sh): a real Apache Kafka in KRaft mode on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from helpers import CLI, ROOT
from servers import free_port
from streamtable.ingest.kafka_copier import BROKER_TIMEOUT_S, METADATA_REFRESH_S
from streamtable.storage import reader
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake

pytestmark = pytest.mark.slow

KAFKA_SH = ["bash", str(ROOT / "scripts" / "kafka.sh")]


def produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, record in enumerate(records):
        producer.produce(
            topic, key=str(i), value=json.dumps(record), on_delivery=lambda err, _msg: err and errors.append(err)
        )
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert not errors


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 30) -> list[dict]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    records, deadline = [], time.monotonic() + timeout_s
    try:
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            records.append(json.loads(msg.value()))
    finally:
        consumer.close()
    return records


def clicks(first: int, end: int) -> list[dict]:
    return [{"user": f"u{i}", "clicks": i, "event_time": "2026-01-01T00:00:00Z"} for i in range(first, end)]


class Follow:
    """`streamtable ingest user_clicks --kafka TOPIC --follow` in a process of its own, on a lake of its own.

    Its output goes to files beside the lake, never to pipes nobody reads while it runs: a copier blocked on a full
    pipe (librdkafka logs every failed reconnect to stderr while the broker is down) would look like one that
    stopped copying.
    """

    def __init__(self, lake: Path, bootstrap: str, topic: str):
        self.lake = str(lake)
        self.stderr_path = lake.parent / f"{lake.name}-copier.stderr"
        with open(lake.parent / f"{lake.name}-copier.stdout", "w") as out, open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen(
                [CLI, "ingest", "user_clicks", "--kafka", topic, "--follow", "--bootstrap-servers", bootstrap]
                + ["--lake", self.lake, "--log-level", "info"],  # a failure shows what the stall watch did
                stdout=out,
                stderr=err,
                text=True,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text()[-3000:]

    def clicks(self) -> list[int]:
        """The `clicks` of every row that landed, as `streamtable show` prints them."""
        shown = subprocess.run([CLI, "show", "user_clicks", "--lake", self.lake], capture_output=True, text=True)
        return [json.loads(line)["clicks"] for line in shown.stdout.splitlines()]

    def landed(self) -> list[int]:
        """The same, read here: polled every half second, a `show` process each time cost more than the copier."""
        if open_table(Lake(self.lake).table_path("user_clicks")) is None:
            return []
        return [row["clicks"] for row in reader.rows(self.lake, "user_clicks")]

    def wait(self, rows: int, timeout_s: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while len(landed := self.landed()) < rows:
            assert self.process.poll() is None, self.stderr()
            assert time.monotonic() < deadline, f"{len(landed)} of {rows} rows after {timeout_s} s; {self.stderr()}"
            time.sleep(0.5)
        return landed

    def stop(self, when_rows: int) -> list[int]:
        """Wait for `when_rows` rows, SIGTERM the copier (it commits and exits 0), return the `clicks` that landed."""
        self.wait(when_rows)
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        assert self.process.returncode == 0, self.stderr()
        return self.clicks()


@contextmanager
def following(lake: Path, bootstrap: str, topic: str, records: int) -> Iterator[Follow]:
    """A copier that has copied `records` records of `clicks(0, records)`, produced here before it starts; killed
    on the way out if it still runs (a failed check must not leave it copying)."""
    produce(bootstrap, topic, clicks(0, records))
    copier = Follow(lake, bootstrap, topic)
    try:
        copier.wait(records)
        yield copier
    finally:
        if copier.process.poll() is None:
            copier.process.kill()
            copier.process.wait(timeout=60)


def new_topic() -> str:
    return f"streamtable-test-{uuid.uuid4().hex[:12]}"


def test_a_new_topic_is_created_with_3_partitions_on_first_use_and_its_records_come_back(kafka_bootstrap):
    topic = new_topic()
    sent = [{"event_id": i, "user": f"u{i % 3}", "value": i * 1.5} for i in range(10)]
    produce(kafka_bootstrap, topic, sent)

    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(topic, timeout=10)
    assert metadata.topics[topic].error is None
    assert len(metadata.topics[topic].partitions) == 3

    received = consume(kafka_bootstrap, topic, len(sent))
    assert sorted(received, key=lambda r: r["event_id"]) == sent


def test_a_second_start_reuses_the_running_broker_and_prints_only_the_same_export_line(kafka_bootstrap):
    expected = f"export STREAMTABLE_KAFKA={kafka_bootstrap}\n"
    again = subprocess.run([*KAFKA_SH, "start"], capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stdout) == (0, expected), again.stderr
    assert "already running" in again.stderr
    via_make = subprocess.run(["make", "-s", "kafka"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (via_make.returncode, via_make.stdout) == (0, expected), via_make.stderr


def test_a_broker_of_its_own_keeps_its_records_across_a_restart_and_a_taken_port_fails_clearly(
    tmp_path, kafka_bootstrap
):
    """...and a `--follow` copier running across the restart lands every record exactly once."""
    port = free_port()
    env = {**os.environ, "STREAMTABLE_KAFKA_DIR": str(tmp_path / "kafka"), "STREAMTABLE_KAFKA_PORT": str(port)}

    def kafka_sh(action: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*KAFKA_SH, action], env={**env, **extra}, capture_output=True, text=True, timeout=120)

    taken = kafka_sh("start", STREAMTABLE_KAFKA_PORT=kafka_bootstrap.rsplit(":", 1)[1])
    assert taken.returncode == 1 and taken.stdout == ""
    assert taken.stderr.count("\n") == 1 and "in use" in taken.stderr, taken.stderr

    topic = new_topic()
    try:
        started = kafka_sh("start")
        assert (started.returncode, started.stdout) == (0, f"export STREAMTABLE_KAFKA=127.0.0.1:{port}\n"), (
            started.stderr
        )
        bootstrap = f"127.0.0.1:{port}"
        produce(bootstrap, topic, [{"n": 1}, {"n": 2}])
        with following(tmp_path / "lake", bootstrap, topic, 200) as copier:
            assert kafka_sh("stop").returncode == 0  # mid-copy: the copier waits for the broker to come back
            assert kafka_sh("status").returncode == 3
            # down longer than a partition refresh plus its timeout: the follower gave up on the refresh's timeout
            # (exit 2, "cannot reach the Kafka broker") when a restart was that slow (CI, under load)
            time.sleep(METADATA_REFRESH_S + BROKER_TIMEOUT_S + 2)
            assert copier.process.poll() is None, copier.stderr()
            restarted = kafka_sh("start")
            assert (restarted.returncode, restarted.stdout) == (0, started.stdout), restarted.stderr
            # every record the broker had before its restart (three partitions: read them all, in no particular order)
            kept = consume(bootstrap, topic, 202)
            assert len(kept) == 202 and sorted(r["n"] for r in kept if "n" in r) == [1, 2]
            produce(bootstrap, topic, clicks(200, 400))
            landed = copier.stop(when_rows=400)
            assert sorted(landed) == list(range(400)), "every record of both sides of the restart, once"
            assert "rdkafka" not in copier.stderr_path.read_text(), "librdkafka's reconnect lines go to the debug log"
    finally:
        assert kafka_sh("stop").returncode == 0
    assert kafka_sh("status").returncode == 3
    assert kafka_sh("stop").returncode == 0  # stopping a stopped broker is fine
