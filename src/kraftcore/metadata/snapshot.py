"""Metadata snapshots: a `MetadataImage` as the bytes of a Kafka snapshot, and back
(kafka-facts §4.4, §8.6).

Layout (what Kafka's `RecordsSnapshotWriter` produces): v2 record batches whose offsets
start at 0 and whose partitionLeaderEpoch is the snapshot's epoch:

1. a control batch holding a SnapshotHeaderRecord (version 0, the image's timestamp);
2. data batches of metadata records, each value framed as §5.1, at most
   `batch_bytes_max` of values per batch;
3. a control batch holding a SnapshotFooterRecord (version 0).

The records describe the whole image, in an order that replays on an empty image:
features (metadata.version first), controllers, brokers, topics each followed by its
partitions, configs, client quotas, producer ids, ACLs, SCRAM credentials, delegation
tokens, the ZooKeeper migration state. Record versions follow the image's
metadata.version (§5.4).

This module only makes and reads bytes: the Raft storage writes them into a
`<end offset>-<epoch>.checkpoint` file (written to a `.part` file, fsynced, renamed).
Encoding and decoding of the records run in the codec kernel (`encode_values`,
`decode_values` take whole lists).
"""

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, MetadataError, ProtocolError
from kraftcore.limits import METADATA_SNAPSHOT_BATCH_BYTES_MAX
from kraftcore.metadata import records as R
from kraftcore.raft.control import (
    SNAPSHOT_FOOTER, SNAPSHOT_HEADER, SnapshotFooterRecord, SnapshotHeaderRecord,
    decode_control_record, encode_control_batch)
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import EMPTY_IMAGE, METADATA_VERSION

__all__ = ["image_records", "encode_snapshot", "decode_snapshot", "load_snapshot",
           "record_versions"]

# metadata.version assumed for an image that does not name one (3.0-IV1, the first KRaft
# level, kafka-facts §5.4).
_MINIMUM_LEVEL = 1


def record_versions(records, level):
    """One version per record, as metadata.version `level` writes them (§5.4)."""
    by_class = R.records_version_for(level or _MINIMUM_LEVEL)
    cache = {}
    out = []
    append = out.append
    for record in records:
        cls = type(record)
        version = cache.get(cls)
        if version is None:
            version = by_class.get(cls)
            if version is None:
                version = 0 if cls not in by_class else cls.valid_versions[1]
            cache[cls] = version
        append(version)
    return out


def image_records(image):
    """The records that rebuild `image` when replayed on an empty image."""
    out = []
    features = image.features
    if METADATA_VERSION in features:
        out.append(R.FeatureLevelRecord(name=METADATA_VERSION,
                                        feature_level=features[METADATA_VERSION]))
    out += [R.FeatureLevelRecord(name=name, feature_level=level)
            for name, level in sorted(features.items()) if name != METADATA_VERSION]
    out += [image.controllers[i] for i in sorted(image.controllers)]
    out += [image.brokers[i] for i in sorted(image.brokers)]
    for name in sorted(image.topic_ids):
        topic = image.topics[image.topic_ids[name]]
        out.append(R.TopicRecord(name=topic.name, topic_id=topic.topic_id))
        partitions = topic.partitions
        out += [partitions[p] for p in sorted(partitions)]
    for (resource_type, resource_name), entries in sorted(image.configs.items()):
        out += [R.ConfigRecord(resource_type=resource_type, resource_name=resource_name,
                               name=name, value=value)
                for name, value in sorted(entries.items())]
    entity_cls = R.ClientQuotaRecord.EntityData
    for entity, entries in sorted(image.quotas.items(), key=_quota_order):
        for key, value in sorted(entries.items()):
            out.append(R.ClientQuotaRecord(
                entity=[entity_cls(entity_type=t, entity_name=n) for t, n in entity],
                key=key, value=value, remove=False))
    if image.producer_ids is not None:
        out.append(image.producer_ids)
    out += [image.acls[i] for i in sorted(image.acls)]
    out += [image.scram[k] for k in sorted(image.scram)]
    out += [image.tokens[k] for k in sorted(image.tokens)]
    if image.zk_migration_state is not None:
        out.append(R.ZkMigrationStateRecord(zk_migration_state=image.zk_migration_state))
    return out


def _quota_order(item):
    return [(t, "" if n is None else n, n is None) for t, n in item[0]]


def encode_snapshot(image, *, timestamp_ms=None,
                    batch_bytes_max=METADATA_SNAPSHOT_BATCH_BYTES_MAX):
    """The bytes of a snapshot of `image` (its epoch stamps every batch). `timestamp_ms`
    defaults to the image's."""
    if batch_bytes_max < 1:
        raise ValueError(f"batch_bytes_max must be positive, not {batch_bytes_max}")
    with R.cyclic_gc_paused():
        return _encode_snapshot(image, timestamp_ms, batch_bytes_max)


def _encode_snapshot(image, timestamp_ms, batch_bytes_max):
    epoch = max(image.epoch, 0)
    timestamp = image.timestamp_ms if timestamp_ms is None else timestamp_ms
    records = image_records(image)
    values = R.encode_values(records, record_versions(records, image.metadata_version()))
    parts = [encode_control_batch(
        [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=timestamp)],
        base_offset=0, leader_epoch=epoch, timestamp=timestamp)]
    offset = 1
    start = 0
    size = 0
    for i, value in enumerate(values):
        if size and size + len(value) > batch_bytes_max:
            parts.append(codec.encode_batch(values[start:i], timestamp=timestamp,
                                            base_offset=offset, leader_epoch=epoch))
            offset += i - start
            start, size = i, 0
        size += len(value)
    if start < len(values):
        parts.append(codec.encode_batch(values[start:], timestamp=timestamp,
                                        base_offset=offset, leader_epoch=epoch))
        offset += len(values) - start
    parts.append(encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=offset,
                                      leader_epoch=epoch, timestamp=timestamp))
    return b"".join(parts)


def decode_snapshot(data):
    """`(records, timestamp_ms)` of snapshot bytes. Raises `CorruptRecordError` for bad
    batches and `MetadataError` when the batches are not a snapshot (no header first, no
    footer last, control records in between, a metadata transaction marker)."""
    try:
        batches = codec.decode_batches(data)
    except ProtocolError as exc:
        raise CorruptRecordError(f"snapshot batches do not decode: {exc}") from None
    if len(batches) < 2:
        raise MetadataError(f"a snapshot holds at least a header and a footer batch; found "
                            f"{len(batches)} batch(es)")
    timestamp = _control_record(batches[0], SNAPSHOT_HEADER).last_contained_log_timestamp
    _control_record(batches[-1], SNAPSHOT_FOOTER)
    records = []
    for batch in batches[1:-1]:
        if batch.is_control:
            # Kafka also writes KRaftVersion / Voters records in the header batch; a control
            # batch in the middle carries nothing for the image.
            continue
        try:
            decoded = R.decode_values([r.value for r in batch.records])
        except ProtocolError as exc:
            raise CorruptRecordError(f"snapshot batch at offset {batch.base_offset}: "
                                     f"{exc.reason}") from None
        records += [record for record, _ in decoded]
    return records, timestamp


def _control_record(batch, want):
    name = "header" if want == SNAPSHOT_HEADER else "footer"
    if not batch.is_control or not batch.records:
        raise MetadataError(f"the snapshot's {name} batch (offset {batch.base_offset}) is not "
                            "a control batch")
    record = batch.records[0]
    try:
        type_id, type_name, message = decode_control_record(record.key, record.value)
    except ProtocolError as exc:
        raise CorruptRecordError(f"the snapshot's {name} record does not decode: "
                                 f"{exc}") from None
    if type_id != want:
        raise MetadataError(f"the snapshot's {name} batch opens with {type_name}, not "
                            f"SNAPSHOT_{name.upper()}")
    return message


def load_snapshot(data, snapshot_id):
    """The `MetadataImage` a snapshot holds; `snapshot_id` (end offset, epoch) is its
    provenance. A metadata transaction marker in it raises `MetadataError` (a snapshot
    holds a whole image, never part of a transaction)."""
    with R.cyclic_gc_paused():
        records, timestamp = decode_snapshot(data)
        delta = MetadataDelta(EMPTY_IMAGE)
        delta.replay_all(records)
        return delta.apply(snapshot_id[0], snapshot_id[1], timestamp)
