"""One consumer-group member of a real Kafka client, as a process of its own:
``python -m tests.peers.group_member '<json>'`` (run from the repository root), for
kafka-python, confluent-kafka and aiokafka. KafkaJS's member is ``kafkajs/group.js``, which
speaks the same lines. ``tests.peers.group_members`` starts and reads them.

The member subscribes to ``topic`` with ``group`` as its group id (the client's own group
membership: JoinGroup, SyncGroup, Heartbeat, its default assignors), reads with small
fetches, "processes" each record (``process_ms`` of sleep each), and after every processed
batch commits synchronously what it consumed (at-least-once). It prints one JSON object per
line on stdout, flushed at once, so that a parent that SIGKILLs it knows what it had
finished:

* ``{"e": "started", "pid": n}`` once the consumer exists and subscribed;
* ``{"e": "assigned", "partitions": [p, ...]}`` at every assignment the client reports
  (eager protocols: the whole assignment each time; ``[]`` when it has none);
* ``{"e": "processed", "records": [[p, offset], ...]}`` after a batch was processed and
  before it is committed;
* ``{"e": "committed", "offsets": {p: next offset}}`` once a commit succeeded, and
  ``{"e": "commit_failed", "error": text}`` when the client refused or failed it (during a
  rebalance: the records are processed again by whoever gets the partition);
* ``{"e": "closed"}`` after a clean close (LeaveGroup), when stdin says ``stop`` or ends.

Arguments (JSON): client, bootstrap, topic, group, and optionally session_ms (6000),
heartbeat_ms (500), rebalance_ms (20000: the clients' max.poll.interval.ms, which their
JoinGroup sends as the rebalance timeout), process_ms (0), max_records (20),
fetch_bytes (512), timeout_s (120: the process ends by itself after it, closing the
consumer).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

_OUT_LOCK = threading.Lock()


def say(event, **fields):
    with _OUT_LOCK:
        sys.stdout.write(json.dumps({"e": event, **fields}) + "\n")
        sys.stdout.flush()


def _watch_stdin(stop):
    """Set `stop` when stdin says "stop" or ends (the parent closed it or died)."""
    def run():
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()
    threading.Thread(target=run, daemon=True, name="stdin").start()


def _process(records, process_ms):
    if process_ms:
        time.sleep(process_ms * len(records) / 1000)
    say("processed", records=records)


# ----------------------------------------------------------------------------- kafka-python


def run_kafka_python(a, stop, deadline):
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            say("assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=a["bootstrap"], group_id=a["group"],
        client_id="kraftcore-member-kafka-python", enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=a["session_ms"],
        heartbeat_interval_ms=a["heartbeat_ms"], max_poll_interval_ms=a["rebalance_ms"],
        fetch_max_wait_ms=100, max_partition_fetch_bytes=a["fetch_bytes"],
        request_timeout_ms=max(a["rebalance_ms"] + 5000, 30000))
    consumer.subscribe([a["topic"]], listener=Listener())
    say("started", pid=os.getpid())
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=100, max_records=a["max_records"])
            records = [[m.partition, m.offset] for msgs in batch.values() for m in msgs]
            if not records:
                continue
            _process(records, a["process_ms"])
            offsets = {}
            for tp, msgs in batch.items():
                offsets[tp.partition] = msgs[-1].offset + 1
            try:
                consumer.commit()  # the consumed positions: what was just processed
            except Exception as exc:  # noqa: BLE001 - reported; a rebalance is expected
                say("commit_failed", error=f"{type(exc).__name__}: {exc}")
            else:
                say("committed", offsets=offsets)
    finally:
        consumer.close(autocommit=False)
    say("closed")


# ----------------------------------------------------------------------------- confluent-kafka


def run_confluent(a, stop, deadline):
    import confluent_kafka as ck

    consumer = ck.Consumer({
        "bootstrap.servers": a["bootstrap"], "group.id": a["group"],
        "client.id": "kraftcore-member-confluent", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": a["session_ms"],
        "heartbeat.interval.ms": a["heartbeat_ms"],
        "max.poll.interval.ms": a["rebalance_ms"], "fetch.wait.max.ms": 100,
        "max.partition.fetch.bytes": a["fetch_bytes"],
        "fetch.message.max.bytes": a["fetch_bytes"]})

    def on_assign(c, partitions):
        say("assigned", partitions=sorted(tp.partition for tp in partitions))

    def on_revoke(c, partitions):
        pass

    consumer.subscribe([a["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    say("started", pid=os.getpid())
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(num_messages=a["max_records"], timeout=0.1)
                    if m.error() is None]
            if not msgs:
                continue
            records = [[m.partition(), m.offset()] for m in msgs]
            _process(records, a["process_ms"])
            offsets = {}
            for m in msgs:
                offsets[m.partition()] = max(offsets.get(m.partition(), 0), m.offset() + 1)
            try:
                consumer.commit(offsets=[ck.TopicPartition(a["topic"], p, o)
                                         for p, o in sorted(offsets.items())],
                                asynchronous=False)
            except ck.KafkaException as exc:
                say("commit_failed", error=str(exc))
            else:
                say("committed", offsets=offsets)
    finally:
        consumer.close()
    say("closed")


# ----------------------------------------------------------------------------- aiokafka


async def _aiokafka_main(a, stop, deadline):
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.structs import OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            pass

        async def on_partitions_assigned(self, assigned):
            say("assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = AIOKafkaConsumer(
        bootstrap_servers=a["bootstrap"], group_id=a["group"],
        client_id="kraftcore-member-aiokafka", enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=a["session_ms"],
        heartbeat_interval_ms=a["heartbeat_ms"], max_poll_interval_ms=a["rebalance_ms"],
        rebalance_timeout_ms=a["rebalance_ms"], fetch_max_wait_ms=100,
        max_partition_fetch_bytes=a["fetch_bytes"])
    await consumer.start()
    try:
        consumer.subscribe([a["topic"]], listener=Listener())
        say("started", pid=os.getpid())
        while not stop.is_set() and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100, max_records=a["max_records"])
            records = [[m.partition, m.offset] for msgs in batch.values() for m in msgs]
            if not records:
                continue
            await asyncio.to_thread(_process, records, a["process_ms"])
            offsets = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "")
                       for tp, msgs in batch.items()}
            try:
                await consumer.commit(offsets)
            except Exception as exc:  # noqa: BLE001 - reported; a rebalance is expected
                say("commit_failed", error=f"{type(exc).__name__}: {exc}")
            else:
                say("committed", offsets={tp.partition: o.offset for tp, o in offsets.items()})
    finally:
        await consumer.stop()
    say("closed")


def run_aiokafka(a, stop, deadline):
    asyncio.run(_aiokafka_main(a, stop, deadline))


RUNNERS = {"kafka-python": run_kafka_python, "confluent-kafka": run_confluent,
           "aiokafka": run_aiokafka}
DEFAULTS = {"session_ms": 6000, "heartbeat_ms": 500, "rebalance_ms": 20000,
            "process_ms": 0, "max_records": 20, "fetch_bytes": 512, "timeout_s": 120}


def main(argv):
    a = {**DEFAULTS, **json.loads(argv[1])}
    stop = threading.Event()
    _watch_stdin(stop)
    RUNNERS[a["client"]](a, stop, time.monotonic() + a["timeout_s"])


if __name__ == "__main__":
    main(sys.argv)
