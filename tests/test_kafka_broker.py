"""The local Kafka broker of `make -s kafka` (scripts/kafka.sh): a real Apache Kafka in KRaft mode on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from helpers import ROOT
from servers import free_port

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
        produce(f"127.0.0.1:{port}", topic, [{"n": 1}, {"n": 2}])
        assert kafka_sh("stop").returncode == 0
        assert kafka_sh("status").returncode == 3
        restarted = kafka_sh("start")
        assert (restarted.returncode, restarted.stdout) == (0, started.stdout), restarted.stderr
        assert sorted(r["n"] for r in consume(f"127.0.0.1:{port}", topic, 2)) == [1, 2]
    finally:
        assert kafka_sh("stop").returncode == 0
    assert kafka_sh("status").returncode == 3
    assert kafka_sh("stop").returncode == 0  # stopping a stopped broker is fine
