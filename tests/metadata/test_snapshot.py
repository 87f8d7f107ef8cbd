"""Metadata snapshots (kafka-facts §4.4): an image written as snapshot bytes and read back
is the same image; the bytes have Kafka's layout (header batch, data batches, footer batch,
offsets from 0, the image epoch on every batch); a snapshot plus the log tail after it
rebuilds the image that replaying the whole log builds; damaged bytes are refused with
`CorruptRecordError` or `MetadataError` and never load a different state."""

import contextlib
import random
import string

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, MetadataError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.metadata.delta import MetadataDelta, replay_all
from kraftcore.metadata.image import (
    CONFIG_BROKER, CONFIG_TOPIC, EMPTY_IMAGE, KRAFT_VERSION, METADATA_VERSION, MetadataImage)
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import (
    decode_snapshot, encode_snapshot, image_records, load_snapshot, record_versions)
from kraftcore.types import Uuid
from kraftcore.raft.types import CommittedBatch

LEVELS = (7, 14, 21, 23)  # RegisterBroker v1/v2/v3, PartitionRecord v0/v0/v1/v2
TS = 1_700_000_000_000
SETTINGS = dict(deadline=None, derandomize=True)

# ------------------------------------------------------------------------------ kernels


@contextlib.contextmanager
def kernel(name):
    """Route the codec dispatcher to one implementation ("c" or "py") for the duration.

    The switch is process-wide (`kraftcore.codec` module attributes, read at call time by
    the records, control and snapshot modules), so it is undone on exit."""
    kernels = codec.implementations()[name]
    with pytest.MonkeyPatch.context() as mp:
        for attr in ("encode_batch", "decode_batches", "validate_batches"):
            mp.setattr(codec, attr, getattr(kernels.records, attr))
        for attr in ("decode_struct", "decode_message", "encode_struct",
                     "decode_metadata_values", "encode_metadata_values"):
            mp.setattr(codec, attr, getattr(kernels.protocol, attr))
        mp.setattr(codec, "crc32c", kernels.crc32c.crc32c)
        yield name


KERNELS = sorted(codec.implementations())

# ------------------------------------------------------------------------------ strategies

NAME = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=10)
TEXT = st.text(max_size=12)  # any unicode scalar value (no surrogates)
UUID = st.integers(2, 2**128 - 1).map(lambda n: Uuid(n.to_bytes(16, "big")))
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
BROKER_IDS = st.integers(0, 12)


@st.composite
def broker_records(draw, level):
    ids = draw(st.lists(BROKER_IDS, unique=True, max_size=5))
    out = []
    for broker_id in ids:
        out.append(R.RegisterBrokerRecord(
            broker_id=broker_id,
            is_migrating_zk_broker=draw(st.booleans()) if level >= 8 else False,
            incarnation_id=draw(UUID),
            broker_epoch=draw(st.integers(0, 2**63 - 1)),
            end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
                name=name, host=draw(TEXT), port=draw(st.integers(0, 65535)),
                security_protocol=draw(st.integers(0, 3)))
                for name in draw(st.lists(NAME, unique=True, max_size=3))],
            features=[R.RegisterBrokerRecord.BrokerFeature(
                name=name, min_supported_version=draw(INT16),
                max_supported_version=draw(INT16))
                for name in draw(st.lists(NAME, unique=True, max_size=2))],
            rack=draw(st.none() | TEXT),
            fenced=draw(st.booleans()),
            in_controlled_shutdown=draw(st.booleans()) if level >= 7 else False,
            log_dirs=draw(st.lists(UUID, max_size=3)) if level >= 17 else []))
    return out


@st.composite
def controller_records(draw, level):
    if level < 15:
        return []
    return [R.RegisterControllerRecord(
        controller_id=cid, incarnation_id=draw(UUID), zk_migration_ready=draw(st.booleans()),
        end_points=[R.RegisterControllerRecord.ControllerEndpoint(
            name="CONTROLLER", host="h", port=draw(st.integers(0, 65535)),
            security_protocol=0)],
        features=[R.RegisterControllerRecord.ControllerFeature(
            name=METADATA_VERSION, min_supported_version=1, max_supported_version=level)])
        for cid in draw(st.lists(st.integers(3000, 3005), unique=True, max_size=3))]


@st.composite
def topic_records(draw, level, broker_ids):
    pool = sorted(set(broker_ids) | {0, 1, 2})
    out = []
    names = draw(st.lists(NAME, unique=True, max_size=5))
    ids = draw(st.lists(UUID, unique=True, min_size=len(names), max_size=len(names)))
    for name, topic_id in zip(names, ids):
        out.append(R.TopicRecord(name=name, topic_id=topic_id))
        for partition_id in draw(st.lists(st.integers(0, 2**31 - 1), unique=True,
                                          max_size=5)):
            replicas = draw(st.lists(st.sampled_from(pool), unique=True, min_size=1,
                                     max_size=4))
            isr = [r for r in replicas if draw(st.booleans())]
            out.append(R.PartitionRecord(
                partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=isr,
                removing_replicas=[r for r in replicas if draw(st.booleans())],
                adding_replicas=draw(st.lists(BROKER_IDS, max_size=2)),
                leader=draw(st.sampled_from(isr + [-1])),
                leader_recovery_state=draw(st.sampled_from([0, 1])),
                leader_epoch=draw(st.integers(0, 2**31 - 1)),
                partition_epoch=draw(st.integers(0, 2**31 - 1)),
                directories=([draw(UUID) for _ in replicas] if level >= 17 else []),
                eligible_leader_replicas=(draw(st.none() | st.lists(BROKER_IDS, max_size=3))
                                          if level >= 23 else None),
                last_known_elr=(draw(st.none() | st.lists(BROKER_IDS, max_size=3))
                                if level >= 23 else None)))
    return out


CONFIG_TYPES = st.sampled_from([CONFIG_TOPIC, CONFIG_BROKER, 8, 16, 32])


@st.composite
def config_records(draw):
    keys = draw(st.lists(st.tuples(CONFIG_TYPES, TEXT, NAME), unique=True, max_size=8))
    return [R.ConfigRecord(resource_type=t, resource_name=n, name=k, value=draw(TEXT))
            for t, n, k in keys]


ENTITY_TYPES = ("user", "client-id", "ip")


@st.composite
def quota_records(draw):
    out = []
    for _ in range(draw(st.integers(0, 4))):
        types = draw(st.lists(st.sampled_from(ENTITY_TYPES), unique=True, min_size=1,
                              max_size=2))
        entity = [R.ClientQuotaRecord.EntityData(entity_type=t, entity_name=draw(
            st.none() | NAME)) for t in types]
        for key in draw(st.lists(NAME, unique=True, min_size=1, max_size=2)):
            out.append(R.ClientQuotaRecord(
                entity=entity, key=key, remove=False,
                value=draw(st.floats(allow_nan=False, allow_infinity=True))))
    return out


@st.composite
def other_records(draw):
    out = []
    for acl_id in draw(st.lists(UUID, unique=True, max_size=3)):
        out.append(R.AccessControlEntryRecord(
            id=acl_id, resource_type=draw(st.integers(0, 7)), resource_name=draw(TEXT),
            pattern_type=draw(st.integers(0, 4)), principal="User:" + draw(NAME),
            host=draw(st.sampled_from(["*", "10.0.0.1"])), operation=draw(st.integers(0, 14)),
            permission_type=draw(st.integers(0, 3))))
    for name, mechanism in draw(st.lists(st.tuples(NAME, st.integers(1, 2)), unique=True,
                                         max_size=3)):
        out.append(R.UserScramCredentialRecord(
            name=name, mechanism=mechanism, salt=draw(st.binary(max_size=32)),
            stored_key=draw(st.binary(max_size=32)), server_key=draw(st.binary(max_size=32)),
            iterations=draw(st.integers(4096, 2**31 - 1))))
    for token_id in draw(st.lists(NAME, unique=True, max_size=3)):
        out.append(R.DelegationTokenRecord(
            owner="User:" + draw(NAME), requester="User:" + draw(NAME),
            renewers=draw(st.lists(NAME, max_size=2)), issue_timestamp=draw(INT64),
            max_timestamp=draw(INT64), expiration_timestamp=draw(INT64), token_id=token_id))
    if draw(st.booleans()):
        out.append(R.ProducerIdsRecord(broker_id=draw(INT32), broker_epoch=draw(INT64),
                                       next_producer_id=draw(st.integers(0, 2**63 - 1))))
    if draw(st.booleans()):
        out.append(R.ZkMigrationStateRecord(zk_migration_state=draw(st.integers(0, 3))))
    return out


@st.composite
def images(draw, level):
    """A rich image at metadata.version `level`, built by replaying records."""
    records = [R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=level)]
    records += [R.FeatureLevelRecord(name=name, feature_level=draw(st.integers(1, 2**15 - 1)))
                for name in draw(st.lists(st.sampled_from([KRAFT_VERSION, "group.version",
                                                           "transaction.version"]),
                                          unique=True))]
    brokers = draw(broker_records(level))
    records += draw(controller_records(level)) + brokers
    records += draw(topic_records(level, [b.broker_id for b in brokers]))
    records += draw(config_records()) + draw(quota_records()) + draw(other_records())
    return replay_all(EMPTY_IMAGE, records, end_offset=draw(st.integers(1, 2**40)),
                      epoch=draw(st.integers(0, 2**31 - 1)),
                      timestamp_ms=draw(st.integers(-1, 2**45)))


# ------------------------------------------------------------------------------ helpers


def snapshot_id(image):
    return image.end_offset, image.epoch


def assert_round_trip(image, data):
    loaded = load_snapshot(data, snapshot_id(image))
    assert loaded == image
    assert loaded.same_state(image) and image.same_state(loaded)
    assert loaded.timestamp_ms == image.timestamp_ms
    assert image_records(loaded) == image_records(image)
    return loaded


def assert_layout(image, data, batch_bytes_max, timestamp=None):
    """Kafka's snapshot layout (kafka-facts §4.4)."""
    timestamp = image.timestamp_ms if timestamp is None else timestamp
    batches = codec.decode_batches(data)
    assert len(batches) >= 2
    header, footer, middle = batches[0], batches[-1], batches[1:-1]
    assert header.is_control and footer.is_control
    assert not any(b.is_control for b in middle)
    header_records = C.decode_control_batches(data[:header.batch_length + 12])
    assert header_records[0][1] == C.SNAPSHOT_HEADER
    assert header_records[0][3] == C.SnapshotHeaderRecord(version=0,
                                                          last_contained_log_timestamp=timestamp)
    footer_records = C.decode_control_batches(data[footer.position:])
    assert [(t, m) for _, t, _, m in footer_records] == [
        (C.SNAPSHOT_FOOTER, C.SnapshotFooterRecord(version=0))]
    next_offset = 0
    for b in batches:
        assert b.base_offset == next_offset
        assert b.records_count == len(b.records) == b.last_offset_delta + 1
        assert [r.offset for r in b.records] == list(range(next_offset,
                                                           next_offset + len(b.records)))
        next_offset += len(b.records)
        assert b.partition_leader_epoch == image.epoch
        assert b.magic == 2 and b.producer_id == -1 and not b.is_transactional
    records = image_records(image)
    assert next_offset == len(records) + 2
    for b in middle:
        values = [len(r.value) for r in b.records]
        assert len(values) == 1 or sum(values) <= batch_bytes_max
        assert all(r.key is None for r in b.records)
    # The data batches read as metadata records, the control batches skipped.
    decoded = R.decode_batch(data, skip_control=True)
    assert [offset for offset, _, _ in decoded] == list(range(1, len(records) + 1))
    assert [record for _, record, _ in decoded] == records
    assert [version for _, _, version in decoded] == record_versions(
        records, image.metadata_version())
    assert header.position == 0 and footer.position + footer.batch_length + 12 == len(data)


# ------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("level", LEVELS)
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_round_trip_and_layout(level, data):
    image = data.draw(images(level), label="image")
    batch_bytes_max = data.draw(st.sampled_from([1, 64, 300, 1 << 20]), label="batch_bytes_max")
    snapshot = encode_snapshot(image, batch_bytes_max=batch_bytes_max)
    assert_round_trip(image, snapshot)
    assert_layout(image, snapshot, batch_bytes_max)
    # Deterministic: the same image gives the same bytes, and so does the loaded copy.
    assert encode_snapshot(image, batch_bytes_max=batch_bytes_max) == snapshot
    loaded = load_snapshot(snapshot, snapshot_id(image))
    assert encode_snapshot(loaded, batch_bytes_max=batch_bytes_max) == snapshot


def _fixed_image(level, seed):
    """A fixed image made from a random history (for the tests that are not property
    tests)."""
    loader = MetadataLoader()
    loader.apply(_history(seed, level, 60))
    return MetadataDelta(loader.image).apply(1234, 7, TS)


@pytest.mark.smoke
@pytest.mark.parametrize("level", LEVELS)
def test_record_versions_follow_metadata_version(level):
    image = _fixed_image(level, 1)
    data = encode_snapshot(image)
    versions = {type(record): version for _, record, version in
                R.decode_batch(data, skip_control=True)}
    assert versions[R.PartitionRecord] == {7: 0, 14: 0, 21: 1, 23: 2}[level]
    assert versions[R.RegisterBrokerRecord] == {7: 1, 14: 2, 21: 3, 23: 3}[level]
    assert versions[R.TopicRecord] == 0
    assert_round_trip(image, data)


def test_metadata_version_is_the_first_record():
    image = _fixed_image(21, 2)
    first = R.decode_batch(encode_snapshot(image), skip_control=True)[0][1]
    assert first == R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21)


def test_explicit_timestamp_goes_to_the_header():
    image = _fixed_image(14, 3)
    data = encode_snapshot(image, timestamp_ms=42, batch_bytes_max=200)
    assert_layout(image, data, 200, timestamp=42)
    records, timestamp = decode_snapshot(data)
    assert timestamp == 42 and records == image_records(image)
    assert load_snapshot(data, snapshot_id(image)).timestamp_ms == 42


def test_empty_image():
    image = MetadataImage(end_offset=5, epoch=2, timestamp_ms=9)
    data = encode_snapshot(image)
    batches = codec.decode_batches(data)
    assert len(batches) == 2 and all(b.is_control for b in batches)
    assert [b.base_offset for b in batches] == [0, 1]
    loaded = load_snapshot(data, (5, 2))
    assert loaded == image and loaded.is_empty and loaded.timestamp_ms == 9


def test_snapshot_id_is_the_provenance():
    image = _fixed_image(21, 4)
    loaded = load_snapshot(encode_snapshot(image), (999, 3))
    assert (loaded.end_offset, loaded.epoch) == (999, 3) and loaded.same_state(image)


def test_batch_bytes_must_be_positive():
    with pytest.raises(ValueError):
        encode_snapshot(_fixed_image(21, 5), batch_bytes_max=0)


@pytest.mark.parametrize("writer", KERNELS)
@pytest.mark.parametrize("reader", KERNELS)
@pytest.mark.parametrize("level", (14, 23))
def test_kernels_agree(writer, reader, level):
    image = _fixed_image(level, 6)
    with kernel(writer):
        data = encode_snapshot(image, batch_bytes_max=500)
    with kernel("c" if "c" in KERNELS else "py"):
        assert data == encode_snapshot(image, batch_bytes_max=500)
    with kernel(reader):
        assert_layout(image, data, 500)
        assert_round_trip(image, data)


# ------------------------------------------------------------------------------ tail replay

TRANSACTION_MARKERS = (R.BeginTransactionRecord, R.EndTransactionRecord,
                       R.AbortTransactionRecord)


class History:
    """A random but consistent metadata log at one metadata.version: batches of records that
    a controller could have written (every record applies to the image before it),
    including metadata transactions (committed and aborted) spanning batches."""

    def __init__(self, rng, level):
        self.rng = rng
        self.level = level
        self.brokers = {}  # id -> epoch
        self.topics = {}  # name -> (topic id, {partition id: replicas})
        self.acls, self.scram, self.tokens, self.configs = set(), set(), set(), set()
        self.next_producer_id = 0
        self.in_transaction = False
        self.uuids = 0
        self.open_batches = 0

    def uuid(self):
        return Uuid.random(self.rng)

    def broker_ids(self):
        return sorted(self.brokers) or [0]

    def _register(self):
        rng = self.rng
        broker_id = rng.randrange(8)
        epoch = self.brokers.get(broker_id, 0) + rng.randrange(1, 100)
        self.brokers[broker_id] = epoch
        return [R.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=self.uuid(), broker_epoch=epoch,
            end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
                name="PLAINTEXT", host=f"b{broker_id}", port=9092, security_protocol=0)],
            rack=rng.choice([None, "r1", "r2"]), fenced=rng.random() < 0.5,
            log_dirs=[self.uuid()] if self.level >= 17 else [])]

    def _broker_change(self):
        if not self.brokers:
            return self._register()
        rng = self.rng
        broker_id = rng.choice(sorted(self.brokers))
        epoch = self.brokers[broker_id]
        if self.level < 6:
            cls = rng.choice([R.FenceBrokerRecord, R.UnfenceBrokerRecord])
            return [cls(id=broker_id, epoch=epoch)]
        kind = rng.randrange(4)
        if kind == 0:
            del self.brokers[broker_id]
            return [R.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch)]
        return [R.BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=epoch, fenced=rng.choice([-1, 0, 1]),
            in_controlled_shutdown=rng.choice([0, 1]) if self.level >= 7 else 0,
            log_dirs=[self.uuid()] if self.level >= 17 and kind == 3 else [])]

    def _partition(self, topic_id, partition_id):
        rng = self.rng
        replicas = rng.sample(range(8), rng.randrange(1, 4))
        return R.PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=replicas,
            isr=list(replicas), leader=replicas[0], leader_epoch=0, partition_epoch=0,
            directories=[self.uuid() for _ in replicas] if self.level >= 17 else [])

    def _create_topic(self):
        name = f"t{self.rng.randrange(30)}"
        if name in self.topics:
            return self._change_partition()
        topic_id = self.uuid()
        partitions = {p: None for p in range(self.rng.randrange(1, 5))}
        self.topics[name] = (topic_id, partitions)
        out = [R.TopicRecord(name=name, topic_id=topic_id)]
        for p in partitions:
            record = self._partition(topic_id, p)
            partitions[p] = record.replicas
            out.append(record)
        return out

    def _change_partition(self):
        if not self.topics:
            return self._create_topic()
        rng = self.rng
        name = rng.choice(sorted(self.topics))
        topic_id, partitions = self.topics[name]
        if rng.random() < 0.2:  # add a partition
            p = len(partitions)
            record = self._partition(topic_id, p)
            partitions[p] = record.replicas
            return [record]
        p = rng.choice(sorted(partitions))
        replicas = partitions[p]
        change = {}
        if rng.random() < 0.7:
            change["isr"] = sorted(rng.sample(replicas, rng.randrange(1, len(replicas) + 1)))
        if rng.random() < 0.5:
            change["leader"] = rng.choice(replicas + [-1])
        if rng.random() < 0.2:
            new = rng.sample(range(8), rng.randrange(1, 4))
            partitions[p] = new
            change.update(replicas=new, isr=list(new), leader=new[0])
            if self.level >= 17 and rng.random() < 0.5:
                change["directories"] = [self.uuid() for _ in new]
        if rng.random() < 0.1:
            change["leader_recovery_state"] = rng.choice([0, 1])
        return [R.PartitionChangeRecord(partition_id=p, topic_id=topic_id, **change)]

    def _remove_topic(self):
        if not self.topics:
            return self._create_topic()
        name = self.rng.choice(sorted(self.topics))
        topic_id, _ = self.topics.pop(name)
        return [R.RemoveTopicRecord(topic_id=topic_id)]

    def _config(self):
        rng = self.rng
        names = sorted(self.topics) + ["gone"]
        key = (rng.choice([CONFIG_TOPIC, CONFIG_TOPIC, CONFIG_BROKER]),
               rng.choice(names) if rng.random() < 0.7 else "",
               rng.choice(["retention.ms", "segment.bytes", "min.insync.replicas"]))
        value = None if rng.random() < 0.3 else str(rng.randrange(1000))
        return [R.ConfigRecord(resource_type=key[0], resource_name=key[1], name=key[2],
                               value=value)]

    def _misc(self):
        rng = self.rng
        kind = rng.randrange(9)
        if kind == 0:
            self.next_producer_id += 1000 * rng.randrange(1, 3)
            return [R.ProducerIdsRecord(broker_id=rng.choice(self.broker_ids()),
                                        broker_epoch=rng.randrange(100),
                                        next_producer_id=self.next_producer_id)]
        if kind == 1:
            entity = [R.ClientQuotaRecord.EntityData(entity_type="user",
                                                     entity_name=rng.choice(["a", "b", None]))]
            return [R.ClientQuotaRecord(entity=entity, key=rng.choice(["k1", "k2"]),
                                        value=rng.random() * 1000, remove=rng.random() < 0.3)]
        if kind == 2:
            if self.acls and rng.random() < 0.4:
                acl_id = rng.choice(sorted(self.acls))
                self.acls.discard(acl_id)
                return [R.RemoveAccessControlEntryRecord(id=acl_id)]
            acl_id = self.uuid()
            self.acls.add(acl_id)
            return [R.AccessControlEntryRecord(
                id=acl_id, resource_type=2, resource_name=rng.choice(["t1", "*"]),
                pattern_type=3, principal="User:x", host="*", operation=rng.randrange(2, 14),
                permission_type=3)]
        if kind == 3:
            key = (rng.choice(["alice", "bob"]), rng.choice([1, 2]))
            if key in self.scram and rng.random() < 0.4:
                self.scram.discard(key)
                return [R.RemoveUserScramCredentialRecord(name=key[0], mechanism=key[1])]
            self.scram.add(key)
            return [R.UserScramCredentialRecord(
                name=key[0], mechanism=key[1], salt=rng.randbytes(8),
                stored_key=rng.randbytes(32), server_key=rng.randbytes(32), iterations=4096)]
        if kind == 4:
            token_id = rng.choice(["tk1", "tk2", "tk3"])
            if token_id in self.tokens and rng.random() < 0.4:
                self.tokens.discard(token_id)
                return [R.RemoveDelegationTokenRecord(token_id=token_id)]
            self.tokens.add(token_id)
            return [R.DelegationTokenRecord(
                owner="User:a", requester="User:a", renewers=[], issue_timestamp=1,
                max_timestamp=rng.randrange(10**12), expiration_timestamp=2, token_id=token_id)]
        if kind == 5:
            return [R.FeatureLevelRecord(name=rng.choice(["group.version", KRAFT_VERSION]),
                                         feature_level=rng.randrange(0, 3))]
        if kind == 6:
            return [R.ZkMigrationStateRecord(zk_migration_state=rng.randrange(4))]
        if kind == 7 and self.level >= 15:
            controller_id = 3000 + rng.randrange(3)
            return [R.RegisterControllerRecord(controller_id=controller_id,
                                               incarnation_id=self.uuid(),
                                               zk_migration_ready=False)]
        return [R.NoOpRecord()] if self.level >= 5 else self._config()

    def records(self):
        ops = (self._register, self._broker_change, self._create_topic,
               self._change_partition, self._change_partition, self._remove_topic,
               self._config, self._misc, self._misc)
        return self.rng.choice(ops)()

    def batches(self, count):
        """`count` batches of records, the first setting metadata.version; transactions
        are closed by the end."""
        rng = self.rng
        out = [[R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=self.level)]]
        aborted = None
        while len(out) < count or self.in_transaction:
            batch = []
            for _ in range(rng.randrange(1, 5)):
                if (not self.in_transaction and self.level >= 13 and rng.random() < 0.08
                        and len(out) < count):
                    batch.append(R.BeginTransactionRecord(name=rng.choice([None, "tx"])))
                    self.in_transaction = True
                    aborted = rng.random() < 0.3
                    saved = self._save() if aborted else None
                elif self.in_transaction and (rng.random() < 0.25 or len(out) >= count):
                    if aborted:
                        self._restore(saved)
                        batch.append(R.AbortTransactionRecord(reason="test"))
                    else:
                        batch.append(R.EndTransactionRecord())
                    self.in_transaction = False
                else:
                    batch += self.records()
            out.append(batch)
        return out

    def _save(self):
        return (dict(self.brokers),
                {n: (t, dict(ps)) for n, (t, ps) in self.topics.items()},
                set(self.acls), set(self.scram), set(self.tokens), self.next_producer_id)

    def _restore(self, saved):
        (self.brokers, self.topics, self.acls, self.scram, self.tokens,
         self.next_producer_id) = saved


def committed(batches, level, epochs, start=0):
    """CommittedBatch objects for lists of records: data batches as a KRaft leader writes
    them, with a control batch (LeaderChange) wherever the epoch moves."""
    out = []
    offset = start
    epoch = None
    for i, records in enumerate(batches):
        if epochs[i] != epoch:
            epoch = epochs[i]
            data = C.encode_control_batch(
                [C.LeaderChangeMessage(version=0, leader_id=1, voters=[], granting_voters=[])],
                base_offset=offset, leader_epoch=epoch, timestamp=TS + i)
            out.append(CommittedBatch(offset, offset, epoch, True, data))
            offset += 1
        data = R.encode_batch(records, base_offset=offset, leader_epoch=epoch,
                              timestamp=TS + i, versions=record_versions(records, level))
        out.append(CommittedBatch(offset, offset + len(records) - 1, epoch, False, data))
        offset += len(records)
    return out


def _history(seed, level, count):
    rng = random.Random(seed)
    batches = History(rng, level).batches(count)
    epochs, epoch = [], 1
    for _ in batches:
        epoch += rng.random() < 0.1
        epochs.append(epoch)
    return committed(batches, level, epochs)


@pytest.mark.parametrize("level", (3, 14, 21))
@settings(max_examples=25, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), cut=st.floats(0, 1),
       batch_bytes_max=st.sampled_from([100, 1 << 20]))
def test_snapshot_plus_tail_equals_full_replay(level, seed, cut, batch_bytes_max):
    commits = _history(seed, level, 40)
    full = MetadataLoader()
    full.apply(commits)
    assert not full.in_transaction and full.next_offset == commits[-1].last_offset + 1
    # The image at a cut where no transaction is open.
    prefix = MetadataLoader()
    k = int(cut * len(commits))
    prefix.apply(commits[:k])
    while prefix.in_transaction:
        prefix.apply([commits[k]])
        k += 1
    image = prefix.image
    assert image.end_offset == prefix.next_offset
    data = encode_snapshot(image, batch_bytes_max=batch_bytes_max)
    follower = MetadataLoader()
    loaded = follower.load_snapshot(snapshot_id(image), data)
    assert loaded == image and follower.next_offset == image.end_offset
    tail = commits[k:]
    # The tail in two calls, to cross a call boundary too.
    half = len(tail) // 2
    follower.apply(tail[:half])
    follower.apply(tail[half:])
    assert follower.image == full.image
    assert follower.image.same_state(full.image)
    assert follower.image.timestamp_ms == full.image.timestamp_ms
    # And a snapshot of the final image loads to the same image.
    assert_round_trip(full.image, encode_snapshot(full.image, batch_bytes_max=batch_bytes_max))


@pytest.mark.parametrize("name", KERNELS)
def test_snapshot_plus_tail_on_each_kernel(name):
    commits = _history(11, 21, 30)
    with kernel(name):
        full = MetadataLoader()
        full.apply(commits)
        prefix = MetadataLoader()
        k = len(commits) // 2
        prefix.apply(commits[:k])
        while prefix.in_transaction:
            prefix.apply([commits[k]])
            k += 1
        follower = MetadataLoader()
        follower.load_snapshot(snapshot_id(prefix.image),
                               encode_snapshot(prefix.image, batch_bytes_max=300))
        follower.apply(commits[k:])
    assert follower.image == full.image


# ------------------------------------------------------------------------------ corruption


def _small_snapshot():
    image = replay_all(EMPTY_IMAGE, [
        R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
        R.RegisterBrokerRecord(broker_id=1, incarnation_id=Uuid.from_ints(1, 2),
                               broker_epoch=5, fenced=False),
        R.TopicRecord(name="foo", topic_id=Uuid.from_ints(3, 4)),
        R.PartitionRecord(partition_id=0, topic_id=Uuid.from_ints(3, 4), replicas=[1],
                          isr=[1], leader=1, leader_epoch=0, partition_epoch=0,
                          directories=[Uuid.from_ints(5, 6)]),
        R.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name="foo", name="a", value="b"),
    ], end_offset=10, epoch=3, timestamp_ms=TS)
    return image, encode_snapshot(image, batch_bytes_max=100)


@pytest.mark.smoke
@pytest.mark.parametrize("name", KERNELS)
def test_every_truncation_is_refused(name):
    image, data = _small_snapshot()
    assert len(codec.decode_batches(data)) >= 4
    with kernel(name):
        for end in range(len(data)):
            with pytest.raises((CorruptRecordError, MetadataError)):
                load_snapshot(data[:end], (10, 3))
        assert load_snapshot(data, (10, 3)) == image


@pytest.mark.parametrize("name", KERNELS)
def test_every_bit_flip_is_refused_or_harmless(name):
    # Bytes outside the CRC (base offset, partition leader epoch) may change without
    # changing what the snapshot says; any other flip must be refused. No flip may load a
    # different state or raise another exception type.
    image, data = _small_snapshot()
    with kernel(name):
        for i in range(len(data)):
            for bit in range(8):
                damaged = bytearray(data)
                damaged[i] ^= 1 << bit
                try:
                    loaded = load_snapshot(bytes(damaged), (10, 3))
                except (CorruptRecordError, MetadataError):
                    continue
                assert loaded.same_state(image), (i, bit)


def _batches(data):
    batches = codec.decode_batches(data)
    return [data[b.position:b.position + b.batch_length + 12] for b in batches]


def test_missing_header_or_footer():
    image, data = _small_snapshot()
    parts = _batches(data)
    header, body, footer = parts[0], parts[1:-1], parts[-1]
    for damaged in (b"".join(body + [footer]),          # no header
                    b"".join([header] + body),          # no footer
                    b"".join(body),                     # neither
                    b"".join([footer] + body + [header]),  # swapped
                    header + footer[:0],                # header alone
                    b""):
        with pytest.raises(MetadataError):
            load_snapshot(damaged, (10, 3))
    # Header and footer alone are an empty (valid) snapshot.
    assert load_snapshot(header + footer, (10, 3)).is_empty


def test_control_batch_that_is_not_a_header():
    leader_change = C.encode_control_batch(
        [C.LeaderChangeMessage(version=0, leader_id=1)], base_offset=0, leader_epoch=3,
        timestamp=TS)
    _, data = _small_snapshot()
    parts = _batches(data)
    with pytest.raises(MetadataError):
        load_snapshot(leader_change + b"".join(parts[1:]), (10, 3))
    with pytest.raises(MetadataError):
        load_snapshot(b"".join(parts[:-1]) + leader_change, (10, 3))


def test_transaction_marker_in_a_snapshot():
    _, data = _small_snapshot()
    parts = _batches(data)
    marker = R.encode_batch([R.BeginTransactionRecord()], base_offset=1, leader_epoch=3,
                            timestamp=TS)
    with pytest.raises(MetadataError):
        load_snapshot(parts[0] + marker + b"".join(parts[1:]), (10, 3))


def test_inconsistent_records_in_a_snapshot():
    _, data = _small_snapshot()
    parts = _batches(data)
    orphan = R.encode_batch([R.PartitionRecord(partition_id=0, topic_id=Uuid.from_ints(9, 9),
                                               replicas=[1], isr=[1], leader=1)],
                            base_offset=1, leader_epoch=3, timestamp=TS)
    with pytest.raises(MetadataError):
        load_snapshot(parts[0] + orphan + parts[-1], (10, 3))


def test_malformed_metadata_value_with_a_good_crc_is_corrupt():
    _, data = _small_snapshot()
    parts = _batches(data)
    bad = codec.encode_batch([b"\x01\x02\x00\xff"], timestamp=TS, base_offset=1,
                             leader_epoch=3)
    null = codec.encode_batch([None], timestamp=TS, base_offset=1, leader_epoch=3)
    for batch in (bad, null):
        with pytest.raises(CorruptRecordError):
            load_snapshot(parts[0] + batch + parts[-1], (10, 3))


def test_malformed_header_value_with_a_good_crc_is_corrupt():
    # A header control record whose value does not decode (its batch CRC is right): the
    # snapshot is corrupt, and load_snapshot promises CorruptRecordError or MetadataError.
    _, data = _small_snapshot()
    parts = _batches(data)
    bad_header = codec.encode_batch([b"\x00"], keys=[C.control_key(C.SNAPSHOT_HEADER)],
                                    timestamp=TS, base_offset=0, leader_epoch=3,
                                    control=True)
    with pytest.raises((CorruptRecordError, MetadataError)):
        load_snapshot(bad_header + b"".join(parts[1:]), (10, 3))
    bad_footer = codec.encode_batch([b""], keys=[C.control_key(C.SNAPSHOT_FOOTER)],
                                    timestamp=TS, base_offset=len(parts) - 1,
                                    leader_epoch=3, control=True)
    with pytest.raises((CorruptRecordError, MetadataError)):
        load_snapshot(b"".join(parts[:-1]) + bad_footer, (10, 3))
