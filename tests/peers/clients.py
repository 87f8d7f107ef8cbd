"""Four real Kafka clients, driven the same way against any bootstrap address.

Each ``run_<client>(bootstrap, topic, ...)``:

1. creates ``topic`` with that client's own admin API (TOPIC_ALREADY_EXISTS is fine);
2. produces ``records`` records, key ``key-{i}``, value ``value_of(i)`` (``value-{i:08d}``
   padded with ``.`` to ``VALUE_BYTES``), with the given acks, not idempotent (the
   clients' idempotent defaults need InitProducerId; ``kafka_python_idempotent`` covers
   that), then flushes;
3. lists the earliest and latest offset of every partition with the client's API
   (ListOffsets);
4. reads every record back with ``assign()`` of all partitions from the beginning, no
   consumer group, until each partition's position reaches its latest offset (or, when
   ListOffsets failed, until as many records as were produced have arrived).

It returns a dict and never judges it (``problems()`` is a ready-made judge for tests):

    {"client": str, "client_version": str, "produced": int (acknowledged, or sent if acks=0),
     "consumed": int, "checksum": str, "expected_checksum": str,
     "missing": int, "duplicates": int, "foreign": int, "per_partition": {p: n},
     "earliest": {p: o}, "latest": {p: o}, "errors": [str], "timings_s": {phase: s}}

``checksum`` is sha256 over the sorted consumed values joined by ``\\n``; it equals
``expected_checksum`` (``expected_checksum(records)``) iff exactly the produced values came
back, each once. Every run is bounded by ``timeout_s`` and raises ``PeerTimeout`` (naming
the client, the phase and the address) when it runs out; failures to connect at all raise
``PeerError``. kafka-python and confluent-kafka run in this process, aiokafka through
``asyncio.run``, KafkaJS in a ``node`` subprocess (``kafkajs/run.js``) that prints one JSON
line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

VALUE_BYTES = 64
KAFKAJS_VERSION = "2.2.4"
KAFKAJS_DIR = Path(__file__).resolve().parent / "kafkajs"
NPM_CI_TIMEOUT_S = 300.0
MAX_ERRORS = 20  # errors kept verbatim; the rest are counted


class PeerError(RuntimeError):
    """A peer client could not run at all (no connection, missing tool, bad output)."""


class PeerTimeout(PeerError, TimeoutError):
    """A peer client did not finish a phase within its time budget."""


# ----------------------------------------------------------------------------- data


def key_of(i: int) -> bytes:
    return f"key-{i}".encode()


def value_of(i: int) -> bytes:
    return f"value-{i:08d}".ljust(VALUE_BYTES, ".").encode()


def _checksum(values: Iterable[bytes]) -> str:
    return hashlib.sha256(b"\n".join(sorted(values))).hexdigest()


def expected_checksum(records: int) -> str:
    return _checksum(value_of(i) for i in range(records))


def _summarize(values: list[bytes], records: int) -> dict:
    seen = bytearray(records)
    duplicates = foreign = 0
    for v in values:
        try:
            i = int(v[6:14]) if v.startswith(b"value-") else -1
        except ValueError:
            i = -1
        if not 0 <= i < records or v != value_of(i):
            foreign += 1
        elif seen[i]:
            duplicates += 1
        else:
            seen[i] = 1
    return {
        "consumed": len(values),
        "checksum": _checksum(values),
        "expected_checksum": expected_checksum(records),
        "missing": records - sum(seen),
        "duplicates": duplicates,
        "foreign": foreign,
    }


def problems(result: dict, records: int, partitions: int, *, check_offsets: bool = True) -> list[str]:
    """Everything wrong with a run's result for a fresh topic; [] when it is perfect."""
    out = [f"error: {e}" for e in result.get("errors", [])]
    if result.get("produced") != records:
        out.append(f"produced {result.get('produced')} of {records}")
    for field in ("missing", "duplicates", "foreign"):
        if result.get(field):
            out.append(f"{field}: {result[field]}")
    if result.get("consumed") != records:
        out.append(f"consumed {result.get('consumed')} records, expected {records}")
    if result.get("checksum") != result.get("expected_checksum"):
        out.append("checksum differs")
    if check_offsets:
        want = set(range(partitions))
        earliest, latest = result.get("earliest", {}), result.get("latest", {})
        if set(earliest) != want or set(latest) != want:
            out.append(f"offsets listed for partitions {sorted(earliest)} / {sorted(latest)}, want {sorted(want)}")
        elif any(earliest[p] != 0 for p in want):
            out.append(f"earliest offsets {earliest}, want all 0")
        elif sum(latest.values()) != records:
            out.append(f"latest offsets {latest} sum to {sum(latest.values())}, want {records}")
        per = result.get("per_partition", {})
        if not out and {p: per.get(p, 0) for p in want} != latest:
            out.append(f"per-partition counts {per} differ from latest offsets {latest}")
    return out


# ----------------------------------------------------------------------------- plumbing


class _Run:
    """A run's deadline, timings and error list."""

    def __init__(self, client: str, version: str, bootstrap: str, topic: str, timeout_s: float):
        self.client, self.bootstrap, self.timeout_s = client, bootstrap, timeout_s
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.phase = "start"
        self.phase_start = self.start
        self.errors: list[str] = []
        self.dropped = 0
        self.result: dict = {
            "client": client, "client_version": version, "bootstrap": bootstrap, "topic": topic,
            "produced": 0, "consumed": 0, "earliest": {}, "latest": {}, "per_partition": {},
            "errors": self.errors, "timings_s": {},
        }

    def remaining(self, cap: float | None = None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.timeout()
        return left if cap is None else min(left, cap)

    def remaining_ms(self, cap_s: float | None = None) -> int:
        return max(1, int(self.remaining(cap_s) * 1000))

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        if self.phase != "start":
            self.result["timings_s"][self.phase] = round(now - self.phase_start, 3)
        self.phase, self.phase_start = phase, now
        self.remaining()

    def timeout(self, detail: str = ""):
        r = self.result
        raise PeerTimeout(
            f"{self.client}: phase {self.phase!r} did not finish within the {self.timeout_s:.0f}s "
            f"budget against {self.bootstrap} (produced={r['produced']}, consumed={r['consumed']}"
            f"{', ' + detail if detail else ''}; errors so far: {self.errors[:3]})")

    def error(self, msg: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{self.phase}: {msg}")
        else:
            self.dropped += 1

    def finish(self, values: list[bytes], records: int) -> dict:
        self.enter("done")
        self.result.update(_summarize(values, records))
        self.result["timings_s"]["total"] = round(time.monotonic() - self.start, 3)
        if self.dropped:
            self.errors.append(f"... and {self.dropped} more errors")
        return self.result


def _acks(acks) -> str:
    a = str(acks).strip().lower()
    if a in ("all", "-1"):
        return "all"
    if a in ("0", "1"):
        return a
    raise ValueError(f"acks must be 'all', -1, 0 or 1, not {acks!r}")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- kafka-python


def _kafka_python_no_brokers() -> tuple[type[BaseException], ...]:
    """kafka-python 2.x raises NoBrokersAvailable; 3.x dropped it for KafkaConnectionError."""
    from kafka import errors

    names = ("NoBrokersAvailable", "KafkaConnectionError")
    return tuple(c for c in (getattr(errors, n, None) for n in names) if c is not None)


def _kp(cls, run: _Run, **configs):
    """Build a kafka-python client; bound its bootstrap by the run's budget where the
    installed version has that knob (3.x ``bootstrap_timeout_ms``; 2.x rejects unknown keys)."""
    if "bootstrap_timeout_ms" in getattr(cls, "DEFAULT_CONFIG", {}):
        configs.setdefault("bootstrap_timeout_ms", run.remaining_ms(30))
    return cls(**configs)


def _kafka_python_create(run: _Run, bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    admin = _kp(KafkaAdminClient, run, bootstrap_servers=bootstrap, client_id="kraftcore-peer-kafka-python",
                request_timeout_ms=run.remaining_ms(30))
    if _version("kafka-python").split(".")[0] >= "3":  # 3.x takes a dict, 2.x NewTopic objects
        new_topics = {topic: {"num_partitions": partitions, "replication_factor": rf}}
    else:
        from kafka.admin import NewTopic

        new_topics = [NewTopic(topic, partitions, rf)]
    try:
        admin.create_topics(new_topics, timeout_ms=run.remaining_ms(30))
    except TopicAlreadyExistsError:
        pass
    except KafkaError as e:
        run.error(f"create_topics: {e!r}")
    finally:
        admin.close()


def _kafka_python_read(run: _Run, consumer, topic: str, partitions: int, records: int,
                       produced: int) -> list[bytes]:
    """assign() every partition, list offsets, read from the beginning to the end."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    run.enter("metadata")
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts and len(parts) >= partitions:
            break
        if time.monotonic() + 0.2 > run.deadline:
            run.timeout(f"metadata shows partitions {parts}")
        time.sleep(0.2)
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)

    run.enter("list_offsets")
    try:
        earliest = consumer.beginning_offsets(tps, timeout_ms=run.remaining_ms(30))
        latest = consumer.end_offsets(tps, timeout_ms=run.remaining_ms(30))
        run.result["earliest"] = {tp.partition: o for tp, o in earliest.items()}
        run.result["latest"] = {tp.partition: o for tp, o in latest.items()}
    except KafkaError as e:
        run.error(f"list offsets: {e!r}")
        latest = None

    run.enter("consume")
    consumer.seek_to_beginning(*tps)
    values: list[bytes] = []
    per = {tp.partition: 0 for tp in tps}
    while True:
        if latest is not None:
            if all(consumer.position(tp, timeout_ms=run.remaining_ms(10)) >= latest[tp] for tp in tps):
                break
        elif len(values) >= produced:
            break
        if time.monotonic() > run.deadline:
            run.timeout(f"positions below latest offsets {run.result['latest']}")
        batch = consumer.poll(timeout_ms=run.remaining_ms(0.5), max_records=records or 500)
        for tp, msgs in batch.items():
            per[tp.partition] += len(msgs)
            values.extend(m.value for m in msgs)
    run.result["per_partition"] = per
    return values


def _kafka_python_send_all(run: _Run, producer, topic: str, records: int, phase: str) -> None:
    """Send `records` records with a kafka-python producer, flush within the run's time
    (a timeout names `phase`), and count the acknowledged ones in `run.result["produced"]`."""
    from kafka.errors import KafkaTimeoutError

    futures = [producer.send(topic, key=key_of(i), value=value_of(i)) for i in range(records)]
    run.enter("flush")
    try:
        producer.flush(timeout=run.remaining())
    except KafkaTimeoutError:
        run.timeout(phase)
    ok = 0
    for f in futures:
        if f.succeeded():
            ok += 1
        else:
            run.error(f"send: {f.exception!r}" if f.is_done else "send: not done after flush")
    run.result["produced"] = ok


def run_kafka_python(bootstrap: str, topic: str, *, records: int = 10000, partitions: int = 3,
                     replication_factor: int = 3, acks="all", timeout_s: float = 120) -> dict:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaTimeoutError

    run = _Run("kafka-python", _version("kafka-python"), bootstrap, topic, timeout_s)
    acks_v = _acks(acks)
    try:
        run.enter("create_topic")
        _kafka_python_create(run, bootstrap, topic, partitions, replication_factor)

        run.enter("produce")
        producer = _kp(
            KafkaProducer, run, bootstrap_servers=bootstrap, client_id="kraftcore-peer-kafka-python",
            acks="all" if acks_v == "all" else int(acks_v), enable_idempotence=False,
            linger_ms=5, max_block_ms=run.remaining_ms(30), request_timeout_ms=run.remaining_ms(30))
        try:
            _kafka_python_send_all(run, producer, topic, records, "flush")
        finally:
            producer.close(timeout=5)

        consumer = _kp(
            KafkaConsumer, run, bootstrap_servers=bootstrap, client_id="kraftcore-peer-kafka-python", group_id=None,
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=200,
            request_timeout_ms=run.remaining_ms(30))
        try:
            values = _kafka_python_read(run, consumer, topic, partitions, records, run.result["produced"])
        finally:
            consumer.close()
    except _kafka_python_no_brokers() as e:
        raise PeerError(f"kafka-python: no broker answered at {bootstrap} ({run.phase}): {e!r}") from e
    except KafkaTimeoutError as e:
        run.timeout(repr(e))
    return run.finish(values, records)


def kafka_python_idempotent(bootstrap: str, topic: str, *, records: int = 1000, partitions: int = 1,
                            replication_factor: int = 1, timeout_s: float = 60) -> dict:
    """kafka-python's *default* producer (3.x: idempotent, acks=all -> InitProducerId).

    Produces ``records`` records with nothing but ``bootstrap_servers`` configured, then reads
    them back like ``run_kafka_python``. The result adds ``enable_idempotence`` (what the
    producer settled on), ``producer_id`` and ``producer_epoch``. On kafka-python 2.x the
    default producer is not idempotent: the result says so (``idempotent_by_default=False``).
    """
    import kafka
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError, KafkaTimeoutError

    version = _version("kafka-python")
    run = _Run("kafka-python(idempotent default)", version, bootstrap, topic, timeout_s)
    major = int(getattr(kafka, "__version__", version).split(".")[0])
    run.result["idempotent_by_default"] = major >= 3
    try:
        run.enter("create_topic")
        _kafka_python_create(run, bootstrap, topic, partitions, replication_factor)
        run.enter("produce")
        producer = _kp(KafkaProducer, run, bootstrap_servers=bootstrap)  # defaults, on purpose
        try:
            run.result["enable_idempotence"] = bool(producer.config.get("enable_idempotence", False))
            run.result["acks_config"] = producer.config.get("acks")
            _kafka_python_send_all(run, producer, topic, records,
                                   "flush (an idempotent producer first needs InitProducerId)")
            tm = getattr(producer, "_transaction_manager", None)
            pid = getattr(tm, "producer_id_and_epoch", None)
            run.result["producer_id"] = getattr(pid, "producer_id", None)
            run.result["producer_epoch"] = getattr(pid, "epoch", None)
        finally:
            producer.close(timeout=5)
        consumer = _kp(
            KafkaConsumer, run, bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=200, request_timeout_ms=run.remaining_ms(30))
        try:
            values = _kafka_python_read(run, consumer, topic, partitions, records, run.result["produced"])
        finally:
            consumer.close()
    except _kafka_python_no_brokers() as e:
        raise PeerError(f"kafka-python: no broker answered at {bootstrap} ({run.phase}): {e!r}") from e
    except KafkaTimeoutError as e:
        run.timeout(repr(e))
    except KafkaError as e:
        run.error(repr(e))
        values = []
    return run.finish(values, records)


# ----------------------------------------------------------------------------- confluent-kafka


def run_confluent(bootstrap: str, topic: str, *, records: int = 10000, partitions: int = 3,
                  replication_factor: int = 3, acks="all", timeout_s: float = 120) -> dict:
    """confluent-kafka (librdkafka). Consumer without group.id: assign() only."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    run = _Run("confluent-kafka", f"{_version('confluent-kafka')} (librdkafka {ck.libversion()[0]})",
               bootstrap, topic, timeout_s)
    common = {"bootstrap.servers": bootstrap, "client.id": "kraftcore-peer-confluent"}

    run.enter("create_topic")
    admin = AdminClient(common)
    md = None
    try:
        md = admin.list_topics(timeout=run.remaining(30))
    except ck.KafkaException as e:
        raise PeerError(f"confluent-kafka: no broker answered at {bootstrap}: {e!r}") from e
    futs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)],
                               operation_timeout=run.remaining(30), request_timeout=run.remaining(30))
    try:
        futs[topic].result(timeout=run.remaining(30))
    except ck.KafkaException as e:
        if e.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            run.error(f"create_topics: {e.args[0]}")
    except concurrent.futures.TimeoutError:  # not the builtin TimeoutError on 3.10
        run.timeout("create_topics")
    del md

    run.enter("produce")
    acked = [0]

    def on_delivery(err, msg):
        if err is None:
            acked[0] += 1
        else:
            run.error(f"delivery: {err}")

    producer = ck.Producer({**common, "acks": _acks(acks), "enable.idempotence": False,
                            "linger.ms": 5, "message.timeout.ms": run.remaining_ms(60)})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value_of(i), key=key_of(i), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
                run.remaining()
        if i % 1000 == 0:
            producer.poll(0)
    run.enter("flush")
    left = producer.flush(run.remaining())
    if left:
        run.timeout(f"{left} messages still queued after flush")
    run.result["produced"] = acked[0]

    run.enter("list_offsets")
    md = admin.list_topics(topic, timeout=run.remaining(30))
    tmd = md.topics.get(topic)
    while tmd is None or tmd.error is not None or len(tmd.partitions) < partitions:
        time.sleep(0.2)
        md = admin.list_topics(topic, timeout=run.remaining(30))
        tmd = md.topics.get(topic)
    parts = sorted(tmd.partitions)
    latest: dict | None = {}
    for spec, field in ((OffsetSpec.earliest(), "earliest"), (OffsetSpec.latest(), "latest")):
        got = {}
        try:
            fs = admin.list_offsets({ck.TopicPartition(topic, p): spec for p in parts},
                                    request_timeout=run.remaining(30))
            for tp, f in fs.items():
                got[tp.partition] = f.result(timeout=run.remaining(30)).offset
        except ck.KafkaException as e:
            run.error(f"list_offsets {field}: {e.args[0]}")
            latest = None
        except concurrent.futures.TimeoutError:
            run.timeout(f"list_offsets {field}")
        run.result[field] = got
    if latest is not None:
        latest = run.result["latest"]

    run.enter("consume")
    # confluent-kafka-python refuses a Consumer without group.id even for assign() only;
    # with assign() and no commits librdkafka still looks up the group's coordinator
    # (FindCoordinator) in the background, but never joins.
    consumer = ck.Consumer({**common, "group.id": f"kraftcore-peer-assign-{topic}",
                            "enable.auto.commit": False, "enable.auto.offset.store": False,
                            "enable.partition.eof": True, "fetch.wait.max.ms": 200})
    values: list[bytes] = []
    per = {p: 0 for p in parts}
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        pos = {p: 0 for p in parts}
        while True:
            if latest is not None:
                if all(pos[p] >= latest[p] for p in parts):
                    break
            elif len(values) >= run.result["produced"]:
                break
            if time.monotonic() > run.deadline:
                run.timeout(f"positions {pos} below latest offsets {latest}")
            for m in consumer.consume(num_messages=1000, timeout=run.remaining(0.5)):
                err = m.error()
                if err is not None:
                    if err.code() != ck.KafkaError._PARTITION_EOF:
                        run.error(f"consume: {err}")
                    continue
                per[m.partition()] += 1
                pos[m.partition()] = m.offset() + 1
                values.append(m.value())
    finally:
        consumer.close()
    run.result["per_partition"] = per
    return run.finish(values, records)


def librdkafka_all_topics_metadata(bootstrap: str, *, timeout_s: float = 30) -> dict:
    """``list_topics()`` with no topic: librdkafka sends an all-topics Metadata request."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kraftcore-peer-confluent"})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except ck.KafkaException as e:
        raise PeerError(f"confluent-kafka: all-topics Metadata from {bootstrap} failed: {e.args[0]}") from e
    return {
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "orig_broker_id": md.orig_broker_id,
        "brokers": {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()},
        "topics": {
            name: {
                "error": str(t.error) if t.error is not None else None,
                "partitions": {
                    p.id: {"leader": p.leader, "replicas": list(p.replicas), "isrs": list(p.isrs),
                           "error": str(p.error) if p.error is not None else None}
                    for p in t.partitions.values()
                },
            }
            for name, t in md.topics.items()
        },
    }


# ----------------------------------------------------------------------------- aiokafka


async def _aiokafka_main(run: _Run, bootstrap: str, topic: str, records: int, partitions: int,
                         rf: int, acks: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaConnectionError, KafkaError

    cid = "kraftcore-peer-aiokafka"
    run.enter("create_topic")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid,
                                request_timeout_ms=run.remaining_ms(30))
    try:
        await admin.start()
    except KafkaConnectionError as e:
        raise PeerError(f"aiokafka: no broker answered at {bootstrap}: {e!r}") from e
    try:
        resp = await admin.create_topics([NewTopic(topic, partitions, rf)], timeout_ms=run.remaining_ms(30))
        for t in getattr(resp, "topic_errors", []):
            code = t[1]
            if code not in (0, 36):  # 36 TOPIC_ALREADY_EXISTS
                run.error(f"create_topics: {t}")
    except KafkaError as e:
        run.error(f"create_topics: {e!r}")
    finally:
        await admin.close()

    run.enter("produce")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=cid,
                                acks="all" if acks == "all" else int(acks), enable_idempotence=False,
                                linger_ms=5, request_timeout_ms=run.remaining_ms(30))
    await producer.start()
    try:
        futs = []
        for i in range(records):
            futs.append(await producer.send(topic, value=value_of(i), key=key_of(i)))
        run.enter("flush")
        await producer.flush()
        ok = 0
        for r in await asyncio.gather(*futs, return_exceptions=True):
            if isinstance(r, BaseException):
                run.error(f"send: {r!r}")
            else:
                ok += 1
        run.result["produced"] = ok
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=cid, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_wait_ms=200, request_timeout_ms=run.remaining_ms(30))
    await consumer.start()
    try:
        run.enter("metadata")
        while True:
            parts = consumer.partitions_for_topic(topic)
            if parts and len(parts) >= partitions:
                break
            await consumer._client.force_metadata_update()
            await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)

        run.enter("list_offsets")
        latest = None
        try:
            earliest = await consumer.beginning_offsets(tps)
            latest = await consumer.end_offsets(tps)
            run.result["earliest"] = {tp.partition: o for tp, o in earliest.items()}
            run.result["latest"] = {tp.partition: o for tp, o in latest.items()}
        except KafkaError as e:
            run.error(f"list offsets: {e!r}")

        run.enter("consume")
        await consumer.seek_to_beginning(*tps)
        values: list[bytes] = []
        per = {tp.partition: 0 for tp in tps}
        while True:
            if latest is not None:
                if all([await consumer.position(tp) >= latest[tp] for tp in tps]):
                    break
            elif len(values) >= run.result["produced"]:
                break
            batch = await consumer.getmany(*tps, timeout_ms=500, max_records=records or 500)
            for tp, msgs in batch.items():
                per[tp.partition] += len(msgs)
                values.extend(m.value for m in msgs)
        run.result["per_partition"] = per
        return values
    finally:
        await consumer.stop()


def run_aiokafka(bootstrap: str, topic: str, *, records: int = 10000, partitions: int = 3,
                 replication_factor: int = 3, acks="all", timeout_s: float = 120) -> dict:
    run = _Run("aiokafka", _version("aiokafka"), bootstrap, topic, timeout_s)
    coro = _aiokafka_main(run, bootstrap, topic, records, partitions, replication_factor, _acks(acks))

    async def bounded():
        return await asyncio.wait_for(coro, timeout=timeout_s)

    try:
        values = asyncio.run(bounded())
    except asyncio.TimeoutError:
        run.timeout()
    return run.finish(values, records)


# ----------------------------------------------------------------------------- KafkaJS


def ensure_kafkajs(timeout_s: float = NPM_CI_TIMEOUT_S) -> Path:
    """``npm ci`` KafkaJS into tests/peers/kafkajs/node_modules when it is missing."""
    pkg = KAFKAJS_DIR / "node_modules" / "kafkajs" / "package.json"
    if pkg.exists() and json.loads(pkg.read_text()).get("version") == KAFKAJS_VERSION:
        return KAFKAJS_DIR
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise PeerError("KafkaJS needs node and npm, and one of them is not installed")
    try:
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=KAFKAJS_DIR,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise PeerTimeout(f"npm ci in {KAFKAJS_DIR} did not finish within {timeout_s:.0f}s") from e
    if proc.returncode != 0 or not pkg.exists():
        raise PeerError(f"npm ci in {KAFKAJS_DIR} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return KAFKAJS_DIR


def run_kafkajs(bootstrap: str, topic: str, *, records: int = 10000, partitions: int = 3,
                replication_factor: int = 3, acks="all", timeout_s: float = 120) -> dict:
    """KafkaJS 2.2.4 in ``node kafkajs/run.js``. KafkaJS has no assign(): run.js reads with
    the client's own Cluster/Broker.fetch (the same Fetch its consumer sends), no group."""
    start = time.monotonic()
    ensure_kafkajs()
    budget = timeout_s - (time.monotonic() - start)
    if budget <= 0:
        raise PeerTimeout(f"KafkaJS: npm ci used the whole {timeout_s:.0f}s budget")
    args = {"bootstrap": bootstrap, "topic": topic, "records": records, "partitions": partitions,
            "replicationFactor": replication_factor, "acks": _acks(acks), "valueBytes": VALUE_BYTES,
            "timeoutMs": int(budget * 1000)}
    env = {**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    try:
        proc = subprocess.run(["node", str(KAFKAJS_DIR / "run.js"), json.dumps(args)], cwd=KAFKAJS_DIR,
                              capture_output=True, text=True, timeout=budget + 10, env=env, check=False)
    except subprocess.TimeoutExpired as e:
        raise PeerTimeout(f"KafkaJS: node run.js did not finish within {timeout_s:.0f}s against "
                          f"{bootstrap}; stderr tail: {(e.stderr or b'')[-1500:]!r}") from e
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise PeerError(f"KafkaJS: run.js printed no JSON (exit {proc.returncode}) against {bootstrap}:\n"
                        f"{proc.stderr[-3000:]}")
    out = json.loads(lines[-1])
    if out.get("timeout"):
        raise PeerTimeout(f"KafkaJS: phase {out.get('phase')!r} did not finish within the "
                          f"{timeout_s:.0f}s budget against {bootstrap} (produced={out.get('produced')}, "
                          f"consumed={out.get('consumed')}; errors so far: {out.get('errors', [])[:3]})")
    if out.get("fatal"):
        raise PeerError(f"KafkaJS: {out['fatal']} (phase {out.get('phase')!r}, against {bootstrap})")
    for field in ("earliest", "latest", "per_partition"):
        out[field] = {int(p): int(o) for p, o in out.get(field, {}).items()}
    out["expected_checksum"] = expected_checksum(records)
    out["timings_s"]["node_process"] = round(time.monotonic() - start, 3)
    return out


RUNNERS = {
    "kafka-python": run_kafka_python,
    "confluent-kafka": run_confluent,
    "aiokafka": run_aiokafka,
    "kafkajs": run_kafkajs,
}
