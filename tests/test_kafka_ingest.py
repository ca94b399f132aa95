"""`streamtable ingest TABLE --kafka TOPIC [--follow]`: a topic's records copied into an input changelog exactly once.

Against the shared local broker (`kafka_bootstrap`); each test uses topics of its own. The records are the same
whichever way they came: a copy of a topic equals the same records ingested as a JSON-lines file.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from helpers import ROOT, run_main
from streamtable.core.registry import get_input
from streamtable.ingest import kafka_copier
from streamtable.ingest.files import ingest_file
from streamtable.storage.lake import Lake
from streamtable.storage.reader import json_lines, rows

STREAMTABLE = str(ROOT / ".venv" / "bin" / "streamtable")
T0 = 1767261600000  # 2026-01-01T10:00:00Z in epoch milliseconds


def new_topic() -> str:
    return f"streamtable-kafka-test-{uuid.uuid4().hex[:12]}"


def send(bootstrap: str, topic: str, messages: list[dict]) -> None:
    """Produce messages: each a dict of `value` (a dict as JSON, a str as is, None a tombstone), and optionally
    `key`, `partition` (default 0) and `timestamp` (epoch ms; default the producer's clock)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list = []
    for m in messages:
        value = m["value"]
        producer.produce(
            topic,
            value=json.dumps(value) if isinstance(value, dict) else value,
            key=m.get("key"),
            partition=m.get("partition", 0),
            timestamp=m.get("timestamp", 0),
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert not errors, errors


def ingest_kafka(lake: Lake, bootstrap: str | None, table: str, topic: str) -> tuple[int, list[dict], str]:
    """`streamtable ingest TABLE --kafka TOPIC` in this process: (exit code, JSON lines printed, stderr)."""
    argv = ["ingest", table, "--kafka", topic, "--lake", str(lake.root)]
    code, out, err = run_main(*argv, *(["--bootstrap-servers", bootstrap] if bootstrap else []))
    return code, [json.loads(line) for line in out.splitlines()], err


def show(lake: Lake, table: str) -> list[dict]:
    """What `streamtable show TABLE` prints."""
    return [json.loads(line) for line in json_lines(rows(lake, table))]


def clicks(i: int, **fields) -> dict:
    return {"user": f"u{i}", "clicks": i, "event_time": T0 + i * 1000} | fields


def test_a_bounded_copy_equals_the_same_records_ingested_from_a_file(kafka_bootstrap, lake, tmp_path):
    topic = new_topic()
    lines = (ROOT / "examples" / "clicks_per_region" / "user_clicks.jsonl").read_text().splitlines()
    lines += ['{"user": "zed", "clicks": -1, "event_time": "2026-01-01T10:05:00Z"}', "not json", '{"user": ""}']
    messages = [{"value": line, "partition": i % 3} for i, line in enumerate(lines)]
    messages.append({"value": None, "key": "zed", "partition": 1})  # a tombstone: user_clicks has no keys
    send(kafka_bootstrap, topic, messages)

    code, printed, err = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)
    per_partition = Counter(m["partition"] for m in messages)
    assert (code, err) == (0, "")
    assert printed == [
        {
            "table": "user_clicks",
            "appended": len(lines) - 3,
            "quarantined": 4,
            "version": 0,
            "offsets": {str(p): per_partition[p] for p in range(3)},
        }
    ]
    file = tmp_path / "clicks.jsonl"
    file.write_text("\n".join(lines) + "\n")
    from_file = Lake(tmp_path / "file-lake")
    ingest_file(from_file, "user_clicks", str(file))
    assert show(lake, "user_clicks") == show(from_file, "user_clicks")

    # quarantine: `source` kafka:TOPIC/PARTITION, `line` the offset; the same reasons as the file's lines
    bad = {(r["source"], r["line"]): r for r in rows(lake, "quarantine")}
    offsets = {
        i: (m["partition"], sum(1 for n in messages[:i] if n["partition"] == m["partition"]))
        for i, m in enumerate(messages)
    }
    expected = {(f"kafka:{topic}/{offsets[i][0]}", offsets[i][1]) for i in range(len(lines) - 3, len(messages))}
    assert set(bad) == expected
    file_reasons = sorted(r["reason"] for r in rows(from_file, "quarantine"))
    assert sorted(r["reason"] for r in bad.values() if r["raw"] != "null") == file_reasons
    tombstone = bad[(f"kafka:{topic}/1", offsets[len(messages) - 1][1])]
    assert "tombstone" in tombstone["reason"] and "no keys" in tombstone["reason"]

    # run again: nothing new; then two new records: one more commit
    assert ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[1][0] | {"offsets": None} == {
        "table": "user_clicks",
        "appended": 0,
        "quarantined": 0,
        "version": 0,
        "offsets": None,
    }
    send(kafka_bootstrap, topic, [{"value": clicks(100), "partition": 2}, {"value": clicks(101), "partition": 2}])
    again = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[1][0]
    assert (again["appended"], again["version"], again["offsets"]["2"]) == (2, 1, per_partition[2] + 2)
    assert len(rows(lake, "user_clicks")) == len(lines) - 3 + 2
    assert len(rows(lake, "quarantine")) == 4


def test_a_record_without_the_time_column_takes_the_kafka_timestamp(kafka_bootstrap, lake):
    topic = new_topic()
    send(
        kafka_bootstrap,
        topic,
        [
            {"value": {"user": "ann", "clicks": 1}, "timestamp": T0 + 5},
            {"value": {"user": "bob", "clicks": 2, "event_time": "2026-02-01T00:00:00Z"}, "timestamp": T0},
            {"value": {"user": "cid", "clicks": 3, "event_time": None}, "timestamp": T0},  # null: its own, refused
            # its own time in another case: refused as from a file (it took the record's timestamp, exit 0)
            {"value": {"user": "dee", "clicks": 4, "Event_Time": "2026-02-01T00:00:00Z"}, "timestamp": T0},
        ],
    )
    assert ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[0] == 0
    assert show(lake, "user_clicks") == [
        {"user": "ann", "clicks": 1, "event_time": "2026-01-01T10:00:00.005Z"},
        {"user": "bob", "clicks": 2, "event_time": "2026-02-01T00:00:00.000Z"},
    ]
    assert [r["reason"] for r in rows(lake, "quarantine")] == [
        "event_time is null",
        "event_time: the record names it 'Event_Time'; names match exactly, so rename the field",
    ]


def test_a_tombstone_deletes_its_key_on_a_keyed_input(kafka_bootstrap, lake, tmp_path):
    topic = new_topic()
    send(
        kafka_bootstrap,
        topic,
        [
            {"value": {"user": "ann", "region": "north", "event_time": T0}, "key": "ann"},
            {"value": None, "key": "ann", "timestamp": T0 + 60_000},  # deletes ann's region
            {"value": None, "timestamp": T0},  # no key: nothing to delete
        ],
    )
    code, printed, _ = ingest_kafka(lake, kafka_bootstrap, "user_regions", topic)
    assert code == 0 and (printed[0]["appended"], printed[0]["quarantined"]) == (2, 1)
    # as a file says it: a null region deletes the user's region
    file = tmp_path / "regions.jsonl"
    file.write_text(
        '{"user": "ann", "region": "north", "event_time": "2026-01-01T10:00:00Z"}\n'
        '{"user": "ann", "region": null, "event_time": "2026-01-01T10:01:00Z"}\n'
    )
    from_file = Lake(tmp_path / "file-lake")
    ingest_file(from_file, "user_regions", str(file))
    assert show(lake, "user_regions") == show(from_file, "user_regions")
    assert [(r["reason"], r["line"]) for r in rows(lake, "quarantine")] == [
        ("a tombstone (null value) without a key", 2)
    ]


def test_a_transactional_producers_topic_copies_its_committed_records_only(kafka_bootstrap, lake):
    """A topic written with exactly-once producers (Kafka Streams' `exactly_once_v2`): aborted records are never
    copied, transaction markers take offsets, and a bounded copy stops at an open transaction (the last stable
    offset) instead of waiting for it; the next copy takes the records once it commits."""
    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)

    def transaction(first: int, last: int, commit: bool = True) -> None:
        producer.begin_transaction()
        for i in range(first, last):
            producer.produce(topic, json.dumps(clicks(i)), partition=0)
        assert producer.flush(30) == 0  # in the log before the marker: an aborted record takes its offsets
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    transaction(0, 3)
    transaction(10, 12, commit=False)
    transaction(3, 5)
    producer.begin_transaction()  # left open while the copy runs
    for i in (20, 21):
        producer.produce(topic, json.dumps(clicks(i)), partition=0)
    assert producer.flush(30) == 0

    code, printed, _ = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)
    # offsets 0-2, marker 3, aborted 4-5, marker 6, 7-8, marker 9; the open transaction's records are 10 and 11
    assert (code, printed[0]["appended"], printed[0]["offsets"]["0"]) == (0, 5, 10)
    producer.commit_transaction(30)
    code, printed, _ = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)
    assert (code, printed[0]["appended"], printed[0]["offsets"]["0"]) == (0, 2, 13)
    assert sorted(r["clicks"] for r in rows(lake, "user_clicks")) == [0, 1, 2, 3, 4, 20, 21]
    assert rows(lake, "quarantine") == []


def test_a_topic_that_does_not_exist_is_one_line_and_is_not_created(kafka_bootstrap, lake, monkeypatch):
    topic = new_topic()
    code, printed, err = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)
    assert (code, printed) == (2, [])  # bad input
    assert err.count("\n") == 1 and topic in err and "does not exist" in err
    assert topic not in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not os.path.exists(lake.table_path("user_clicks"))

    monkeypatch.delenv("STREAMTABLE_KAFKA", raising=False)  # no broker named anywhere
    code, _, err = ingest_kafka(lake, None, "user_clicks", topic)
    assert code == 2 and err.count("\n") == 1 and "--bootstrap-servers" in err and "STREAMTABLE_KAFKA" in err


def made_anew(bootstrap: str, topic: str) -> None:
    """Delete `topic` and make it anew (3 partitions), as an operator does to empty it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:  # the broker may still be deleting it
        try:
            admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
            return
        except KafkaException:
            assert time.monotonic() < deadline, f"{topic} could not be made anew"
            time.sleep(0.5)


def test_a_topic_deleted_and_made_anew_is_copied_from_its_first_offset(kafka_bootstrap, lake):
    """The copy kept offset 5 of partition 0 (and quarantine's 5); the topic deleted and made anew starts again at 0,
    so its first 5 records were skipped without a word, a bad one too, exit 0. The offsets keep the topic's id: the
    new topic is copied from its first offsets, each record once, with one line saying why."""
    topic = new_topic()
    first = [{"value": clicks(i, clicks=-1 if i == 4 else i)} for i in range(5)]
    send(kafka_bootstrap, topic, first)
    assert ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[1][0]["offsets"]["0"] == 5

    made_anew(kafka_bootstrap, topic)
    send(kafka_bootstrap, topic, [{"value": clicks(i, clicks=-1 if i == 11 else i)} for i in range(10, 13)])

    code, printed, err = ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)
    assert (code, printed[0]["appended"], printed[0]["quarantined"], printed[0]["offsets"]["0"]) == (0, 2, 1, 3)
    assert "is not the topic user_clicks copied so far (it was deleted and made anew" in err
    assert ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[1][0]["appended"] == 0
    assert sorted(r["user"] for r in rows(lake, "user_clicks")) == ["u0", "u1", "u10", "u12", "u2", "u3"]
    assert sorted((r["raw"], r["line"]) for r in rows(lake, "quarantine")) == sorted(
        (json.dumps(clicks(i, clicks=-1)), offset) for i, offset in ((4, 4), (11, 1))
    )


# Processes: crashes, copiers at once, --follow.


def numbered(count: int, bad_every: int = 10) -> list[dict]:
    """`count` records over 3 partitions, user u<i>; every `bad_every`-th (from the first) has negative clicks."""
    return [{"value": clicks(i, clicks=-1 if i % bad_every == 0 else i), "partition": i % 3} for i in range(count)]


def cli_process(lake: Lake, topic: str, bootstrap: str, *extra: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [STREAMTABLE, "ingest", "user_clicks", "--kafka", topic, "--bootstrap-servers", bootstrap, *extra],
        env=os.environ | {"STREAMTABLE_LAKE": str(lake.root)} | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def assert_each_once(lake: Lake, topic: str, count: int, bad_every: int = 10) -> None:
    users = Counter(r["user"] for r in rows(lake, "user_clicks"))
    assert users == Counter(f"u{i}" for i in range(count) if i % bad_every), "every good record exactly once"
    bad = Counter((r["source"], r["line"]) for r in rows(lake, "quarantine"))
    assert bad == Counter((f"kafka:{topic}/{i % 3}", i // 3) for i in range(0, count, bad_every)), (
        "every bad record quarantined exactly once"
    )


@pytest.mark.slow
@pytest.mark.parametrize("point", ["kafka:consumed", "kafka:quarantined", "kafka:committed"])
def test_a_copy_killed_at_a_crash_point_then_run_again_loses_and_doubles_nothing(kafka_bootstrap, lake, point):
    topic, count = new_topic(), 90
    send(kafka_bootstrap, topic, numbered(count))
    # 20 records a commit: the first commit (bad records among them) is the one killed
    killed = cli_process(lake, topic, kafka_bootstrap, STREAMTABLE_KILL_AT=point, STREAMTABLE_KAFKA_COMMIT_ROWS="20")
    assert killed.wait(60) == -signal.SIGKILL, killed.communicate()
    rerun = cli_process(lake, topic, kafka_bootstrap, STREAMTABLE_KAFKA_COMMIT_ROWS="20")
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    assert json.loads(out)["offsets"] == {"0": 30, "1": 30, "2": 30}
    assert_each_once(lake, topic, count)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_copiers_started_at_once_copy_each_offset_exactly_once(kafka_bootstrap, lake, where, request, monkeypatch):
    """Two copies race for each commit (Delta's put-if-absent: on S3 a conditional write); each offset lands once."""
    if where == "s3":
        for key, value in request.getfixturevalue("object_store_env").items():
            monkeypatch.setenv(key, value)  # the copiers (this env) and this process's reads reach the store
        lake = Lake(f"s3://streamtable/tests/kafka-{uuid.uuid4().hex[:12]}")
    topic, count = new_topic(), 600
    send(kafka_bootstrap, topic, numbered(count))
    copiers = [cli_process(lake, topic, kafka_bootstrap, STREAMTABLE_KAFKA_COMMIT_ROWS="25") for _ in range(2)]
    results = [c.communicate(timeout=80) for c in copiers]
    assert [c.returncode for c in copiers] == [0, 0], [err for _, err in results]
    printed = [json.loads(out) for out, _ in results]
    assert sum(p["appended"] for p in printed) == count - count // 10  # each record counted by the copier that won it
    assert_each_once(lake, topic, count)


@pytest.mark.slow
def test_follow_copies_what_arrives_until_sigterm(kafka_bootstrap, lake):
    topic = new_topic()
    send(kafka_bootstrap, topic, numbered(12))  # creates the topic
    follower = cli_process(lake, topic, kafka_bootstrap, "--follow")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout], daemon=True).start()

    def copied(appended: int) -> int:
        deadline = time.monotonic() + 30
        while appended and time.monotonic() < deadline:
            try:
                appended -= json.loads(lines.get(timeout=1))["appended"]
            except queue.Empty:
                continue
        return appended

    try:
        assert copied(12 - 2) == 0
        send(kafka_bootstrap, topic, [{"value": clicks(i), "partition": i % 3} for i in range(12, 20)])
        assert copied(8) == 0, "records produced while it follows are copied"
    finally:
        follower.send_signal(signal.SIGTERM)
    assert follower.wait(30) == 0, follower.stderr.read()
    assert len(rows(lake, "user_clicks")) == 18 and len(rows(lake, "quarantine")) == 2


def test_a_follower_whose_topic_is_made_anew_stops_and_the_next_copy_takes_the_new_topic_whole(kafka_bootstrap, lake):
    """A follower assigned at offset 4 of a topic made anew: its consumer went back to the new topic's offset 0, and
    the copy dropped offsets 0 to 3 as records it had, exit 0 at SIGTERM; offsets 4 and 5, committed as the old
    topic's before the follower's next look at the topic (every 10 s), were copied again by the next copy. The id
    asked before each commit stops it (exit 2, one line); the next copy takes the new topic's records, each once."""
    topic = new_topic()
    send(kafka_bootstrap, topic, [{"value": clicks(i), "partition": 0} for i in range(4)])
    follower = cli_process(lake, topic, kafka_bootstrap, "--follow")
    try:
        deadline = time.monotonic() + 30
        while len(rows(lake, "user_clicks")) < 4:
            assert time.monotonic() < deadline and follower.poll() is None, "the follower copies the first records"
            time.sleep(0.5)
        made_anew(kafka_bootstrap, topic)
        send(kafka_bootstrap, topic, [{"value": clicks(i), "partition": 0} for i in range(10, 16)])
        code = follower.wait(60)
    finally:
        follower.kill()
    err = follower.stderr.read()
    assert code == 2 and "was deleted and made anew while this copy read it: stopped" in err, err
    assert ingest_kafka(lake, kafka_bootstrap, "user_clicks", topic)[1][0]["appended"] == 6
    assert sorted(r["clicks"] for r in rows(lake, "user_clicks")) == [0, 1, 2, 3, 10, 11, 12, 13, 14, 15]


class Wedged:
    """A consumer whose connections answer nothing (`Asker`'s reason): every question to the broker times out."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


@pytest.mark.slow
@pytest.mark.parametrize("answers", [True, False], ids=["answering", "wedged"])
def test_a_follower_whose_fetch_stalls_starts_it_again_and_copies_each_record_once(
    kafka_bootstrap, lake, monkeypatch, caplog, answers
):
    """A fetch that stops while records wait (librdkafka#5153, after a broker restart) is made here by pausing the
    consumer's partitions after the first commit: the follower's watch finds it and copies what waits; also when the
    stalled consumer answers no question to the broker either (CI once saw a follower copy nothing for 120 s after a
    restart: its watch had asked that consumer for the end offsets, and took its silence for a broker away)."""
    monkeypatch.setattr(kafka_copier, "METADATA_REFRESH_S", 0.5)  # looks every half second, not every 10
    topic = new_topic()
    send(kafka_bootstrap, topic, numbered(24)[:12])
    commits: list[kafka_copier.KafkaResult] = []

    def on_commit(result: kafka_copier.KafkaResult) -> None:
        if not commits:
            copier.consumer.pause(copier.consumer.assignment())
            if not answers:
                copier.consumer = Wedged(copier.consumer)
        commits.append(result)

    copier = kafka_copier.Copier(lake, get_input("user_clicks"), topic, kafka_bootstrap, on_commit)
    stop = threading.Event()
    follower = threading.Thread(target=copier.run, args=(True, stop))
    with caplog.at_level(logging.WARNING, logger="streamtable.ingest.kafka"):
        follower.start()
        try:
            deadline = time.monotonic() + 60
            while not commits and follower.is_alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            send(kafka_bootstrap, topic, numbered(24)[12:])  # to a paused consumer
            while sum(c.appended for c in commits) < 21 and follower.is_alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop.set()
            follower.join(60)
            copier.close()
    assert_each_once(lake, topic, 24)
    assert "fetched nothing while records wait" in caplog.text
