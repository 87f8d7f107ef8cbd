"""The KRaft metadata log's contents (kafka-facts §2.7, §5).

This package owns what goes *inside* the batches of `__cluster_metadata`:

* `kraftcore.metadata.records`: the metadata record types (api keys 0-27 of §5.2), their
  frame (§5.1), bulk encoding and decoding of record values through the codec kernel, the
  record batches a KRaft leader writes, and the record versions each metadata.version
  writes (§5.4).
* `kraftcore.metadata.image` / `delta` / `partition`: the cluster state the records build
  up, and how a batch of them changes it.
* `kraftcore.metadata.loader` and `snapshot`: replaying committed batches and snapshots
  into an image, and writing an image as a snapshot.

The control records that share these batches (LeaderChange, snapshot header and footer,
KRaft version, voters) belong to the Raft layer: `kraftcore.raft.control`.

The public names used by other modules (keep them stable): `RECORD_TYPES`, `type_name`,
`encode_values`, `decode_values`, `encode_batch`, `decode_batch`, `records_version_for`,
and each record's `to_json(version)` (from `kraftcore.protocol.schema`).
"""

from kraftcore.metadata.records import (  # noqa: F401
    RECORD_TYPES,
    TYPE_NAMES,
    decode_batch,
    decode_values,
    encode_batch,
    encode_values,
    records_version_for,
    type_name,
)

__all__ = [
    "RECORD_TYPES", "TYPE_NAMES", "type_name", "encode_values", "decode_values",
    "encode_batch", "decode_batch", "records_version_for",
]
