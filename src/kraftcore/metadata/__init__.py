"""The KRaft metadata log's contents (kafka-facts §2.7, §5).

This package owns what goes *inside* the batches of `__cluster_metadata`:

* `kraftcore.metadata.records`: the metadata record types (api keys 0-27 of §5.2), their
  frame (§5.1), bulk encoding and decoding of record values through the codec kernel, the
  record batches a KRaft leader writes, and the record versions each metadata.version
  writes (§5.4).
* `kraftcore.metadata.control`: the control records (LeaderChange, snapshot header and
  footer, KRaft version, voters, and the ABORT / COMMIT transaction markers), their keys,
  and control batches.

Later: the metadata image (replaying records into cluster state) and snapshots.

The public names used by other modules (keep them stable): `RECORD_TYPES`, `type_name`,
`encode_values`, `decode_values`, `encode_batch`, `decode_batch`, `records_version_for`,
`decode_control_record`, `encode_control_batch`, `decode_control_batches`, and each
record's `to_json(version)` (from `kraftcore.protocol.schema`).
"""

from kraftcore.metadata.control import (  # noqa: F401
    CONTROL_TYPE_NAMES,
    decode_control_batches,
    decode_control_record,
    encode_control_batch,
)
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
    "encode_batch", "decode_batch", "records_version_for", "CONTROL_TYPE_NAMES",
    "decode_control_record", "encode_control_batch", "decode_control_batches",
]
