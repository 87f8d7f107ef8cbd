"""Three real Kafka clients committing offsets with a group id while they assign their
partitions themselves (no group membership: Kafka's "simple" consumer groups), driven the
same way against any bootstrap address.

For each client (``CLIENTS``: kafka-python, confluent-kafka, aiokafka):

* ``commit_part(client, bootstrap, topic, group, partitions, count)``: a consumer with
  ``group`` as its group id assigns every partition of ``topic``, starts where the group's
  committed offsets say (from the beginning when there are none), reads exactly ``count``
  records, and commits what it consumed with the client's synchronous commit. Small fetches
  (``FETCH_BYTES``) interleave the partitions, so the offsets it commits fall in the middle
  of them.
* ``resume(client, bootstrap, topic, group, partitions, count)``: a new consumer with the
  same group id asks for the committed offsets (the client's ``committed()``), assigns
  every partition without seeking, and reads ``count`` records; then it polls once more to
  show nothing else comes.

Both return ``{"values": [bytes], "committed": {partition: offset or None}, "positions":
{partition: offset}}`` and never judge it. Every call is bounded by ``timeout_s`` and raises
``clients.PeerTimeout`` naming the client and the phase when it runs out. A client that is
not installed fails with ImportError.
"""

from __future__ import annotations

import asyncio
import time

from tests.peers.clients import PeerTimeout

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")
FETCH_BYTES = 512  # per partition and fetch: a few records of each partition at a time
EXTRA_POLL_S = 1.0  # how long `resume` waits for records beyond the expected ones


class _Deadline:
    def __init__(self, client, phase, timeout_s):
        self.client, self.phase, self.timeout_s = client, phase, timeout_s
        self.end = time.monotonic() + timeout_s

    def left(self, cap=None):
        left = self.end - time.monotonic()
        if left <= 0:
            raise PeerTimeout(f"{self.client}: {self.phase} did not finish within "
                              f"{self.timeout_s:.0f}s")
        return left if cap is None else min(left, cap)

    def left_ms(self, cap_s=None):
        return max(1, int(self.left(cap_s) * 1000))


def _result(values, committed, positions):
    return {"values": values, "committed": committed, "positions": positions}


# ----------------------------------------------------------------------------- kafka-python


def _kafka_python_consumer(bootstrap, group, deadline):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                         client_id="kraftcore-groups-kafka-python", enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100,
                         max_partition_fetch_bytes=FETCH_BYTES,
                         request_timeout_ms=deadline.left_ms(30))


def _kafka_python_read(consumer, tps, count, deadline):
    values = []
    while len(values) < count:
        deadline.left()
        batch = consumer.poll(timeout_ms=deadline.left_ms(0.5), max_records=count - len(values))
        for msgs in batch.values():
            values.extend(m.value for m in msgs)
    return values


def _kafka_python_tps(consumer, topic, partitions, deadline):
    from kafka import TopicPartition

    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts and len(parts) >= partitions:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        time.sleep(min(0.2, deadline.left()))


def _kafka_python_commit_part(bootstrap, topic, group, partitions, count, timeout_s):
    deadline = _Deadline("kafka-python", "commit_part", timeout_s)
    consumer = _kafka_python_consumer(bootstrap, group, deadline)
    try:
        tps = _kafka_python_tps(consumer, topic, partitions, deadline)
        consumer.assign(tps)
        values = _kafka_python_read(consumer, tps, count, deadline)
        positions = {tp.partition: consumer.position(tp, timeout_ms=deadline.left_ms(10))
                     for tp in tps}
        consumer.commit()  # synchronous: the consumed positions of every assigned partition
        committed = {tp.partition: consumer.committed(tp) for tp in tps}
        return _result(values, committed, positions)
    finally:
        consumer.close(autocommit=False)


def _kafka_python_resume(bootstrap, topic, group, partitions, count, timeout_s):
    deadline = _Deadline("kafka-python", "resume", timeout_s)
    consumer = _kafka_python_consumer(bootstrap, group, deadline)
    try:
        tps = _kafka_python_tps(consumer, topic, partitions, deadline)
        committed = {tp.partition: consumer.committed(tp) for tp in tps}
        consumer.assign(tps)
        values = _kafka_python_read(consumer, tps, count, deadline)
        extra = consumer.poll(timeout_ms=int(EXTRA_POLL_S * 1000))
        values.extend(m.value for msgs in extra.values() for m in msgs)
        positions = {tp.partition: consumer.position(tp, timeout_ms=deadline.left_ms(10))
                     for tp in tps}
        return _result(values, committed, positions)
    finally:
        consumer.close(autocommit=False)


# ----------------------------------------------------------------------------- confluent-kafka


def _confluent_consumer(bootstrap, group):
    import confluent_kafka as ck

    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                        "client.id": "kraftcore-groups-confluent", "enable.auto.commit": False,
                        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                        "max.partition.fetch.bytes": FETCH_BYTES,
                        "fetch.message.max.bytes": FETCH_BYTES})


def _confluent_read(consumer, count, deadline):
    values = []
    while len(values) < count:
        for m in consumer.consume(num_messages=count - len(values), timeout=deadline.left(0.5)):
            if m.error() is None:
                values.append(m.value())
    return values


def _confluent_committed(consumer, topic, partitions, deadline):
    import confluent_kafka as ck

    tps = [ck.TopicPartition(topic, p) for p in range(partitions)]
    return {tp.partition: tp.offset if tp.offset >= 0 else None
            for tp in consumer.committed(tps, timeout=deadline.left(30))}


def _confluent_commit_part(bootstrap, topic, group, partitions, count, timeout_s):
    import confluent_kafka as ck

    deadline = _Deadline("confluent-kafka", "commit_part", timeout_s)
    consumer = _confluent_consumer(bootstrap, group)
    try:
        consumer.assign([ck.TopicPartition(topic, p) for p in range(partitions)])
        values = _confluent_read(consumer, count, deadline)
        consumer.commit(asynchronous=False)  # the offsets of the records consumed
        positions = {p: tp.offset for p, tp in enumerate(consumer.position(
            [ck.TopicPartition(topic, p) for p in range(partitions)]))}
        return _result(values, _confluent_committed(consumer, topic, partitions, deadline),
                       positions)
    finally:
        consumer.close()


def _confluent_resume(bootstrap, topic, group, partitions, count, timeout_s):
    import confluent_kafka as ck

    deadline = _Deadline("confluent-kafka", "resume", timeout_s)
    consumer = _confluent_consumer(bootstrap, group)
    try:
        committed = _confluent_committed(consumer, topic, partitions, deadline)
        consumer.assign([ck.TopicPartition(topic, p) for p in range(partitions)])
        values = _confluent_read(consumer, count, deadline)
        for m in consumer.consume(num_messages=1000, timeout=EXTRA_POLL_S):
            if m.error() is None:
                values.append(m.value())
        positions = {p: tp.offset for p, tp in enumerate(consumer.position(
            [ck.TopicPartition(topic, p) for p in range(partitions)]))}
        return _result(values, committed, positions)
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- aiokafka


async def _aiokafka_consumer(bootstrap, group, deadline):
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                client_id="kraftcore-groups-aiokafka", enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                max_partition_fetch_bytes=FETCH_BYTES,
                                request_timeout_ms=deadline.left_ms(30))
    await consumer.start()
    return consumer


async def _aiokafka_tps(consumer, topic, partitions):
    from aiokafka import TopicPartition

    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts and len(parts) >= partitions:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.2)


async def _aiokafka_read(consumer, tps, count, deadline):
    values = []
    while len(values) < count:
        batch = await consumer.getmany(*tps, timeout_ms=deadline.left_ms(0.5),
                                       max_records=count - len(values))
        for msgs in batch.values():
            values.extend(m.value for m in msgs)
    return values


async def _aiokafka_commit_part(bootstrap, topic, group, partitions, count, deadline):
    consumer = await _aiokafka_consumer(bootstrap, group, deadline)
    try:
        tps = await _aiokafka_tps(consumer, topic, partitions)
        consumer.assign(tps)
        values = await _aiokafka_read(consumer, tps, count, deadline)
        positions = {tp.partition: await consumer.position(tp) for tp in tps}
        await consumer.commit()  # the consumed positions of every assigned partition
        committed = {tp.partition: await consumer.committed(tp) for tp in tps}
        return _result(values, committed, positions)
    finally:
        await consumer.stop()


async def _aiokafka_resume(bootstrap, topic, group, partitions, count, deadline):
    consumer = await _aiokafka_consumer(bootstrap, group, deadline)
    try:
        tps = await _aiokafka_tps(consumer, topic, partitions)
        committed = {tp.partition: await consumer.committed(tp) for tp in tps}
        consumer.assign(tps)
        values = await _aiokafka_read(consumer, tps, count, deadline)
        extra = await consumer.getmany(*tps, timeout_ms=int(EXTRA_POLL_S * 1000))
        values.extend(m.value for msgs in extra.values() for m in msgs)
        positions = {tp.partition: await consumer.position(tp) for tp in tps}
        return _result(values, committed, positions)
    finally:
        await consumer.stop()


def _aiokafka(phase, main):
    def run(bootstrap, topic, group, partitions, count, timeout_s):
        deadline = _Deadline("aiokafka", phase, timeout_s)

        async def bounded():
            return await asyncio.wait_for(
                main(bootstrap, topic, group, partitions, count, deadline), timeout_s)

        try:
            return asyncio.run(bounded())
        except asyncio.TimeoutError:
            raise PeerTimeout(f"aiokafka: {phase} did not finish within {timeout_s:.0f}s") \
                from None
    return run


# ----------------------------------------------------------------------------- entry points

_COMMIT_PART = {"kafka-python": _kafka_python_commit_part,
                "confluent-kafka": _confluent_commit_part,
                "aiokafka": _aiokafka("commit_part", _aiokafka_commit_part)}
_RESUME = {"kafka-python": _kafka_python_resume, "confluent-kafka": _confluent_resume,
           "aiokafka": _aiokafka("resume", _aiokafka_resume)}


def commit_part(client, bootstrap, topic, group, partitions, count, timeout_s=60):
    return _COMMIT_PART[client](bootstrap, topic, group, partitions, count, timeout_s)


def resume(client, bootstrap, topic, group, partitions, count, timeout_s=60):
    return _RESUME[client](bootstrap, topic, group, partitions, count, timeout_s)
