"""Bootstrap metadata: the records a new cluster's first active controller writes into its
empty metadata log (kafka-facts §4.5, §8.6) — the `FeatureLevelRecord` of metadata.version,
then whatever `kraftcore format` added (`--add-scram`: `UserScramCredentialRecord`s).

* `bootstrap_records(level, extra)`: the records, metadata.version first.
* `encode_bootstrap(records)`: the bytes of a `bootstrap.checkpoint` file, a snapshot's
  layout with end offset 0, epoch 0 and timestamp 0, as Kafka writes it.
* `decode_bootstrap(data)`: the records of such bytes, checked.
* `read_bootstrap_records(directory)`: the records of the bootstrap file of a node's
  `metadata.log.dir` (`kraftcore.log.bootstrap` reads the file), or () without one.

Invariant: bootstrap records name exactly one metadata.version, a known level, and replay on
an empty image; SCRAM credentials need metadata.version 3.5-IV2 or later.
"""

from kraftcore.errors import CorruptRecordError, MetadataError
from kraftcore.log.bootstrap import bootstrap_path, read_bootstrap_file
from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import EMPTY_IMAGE, METADATA_VERSION
from kraftcore.metadata.snapshot import decode_snapshot, encode_snapshot

__all__ = ["SCRAM_MINIMUM_LEVEL", "bootstrap_records", "check_bootstrap_records",
           "encode_bootstrap", "decode_bootstrap", "read_bootstrap_records"]

SCRAM_MINIMUM_LEVEL = R.METADATA_VERSION_LEVELS["3.5-IV2"]
_LEVEL_NAMES = {level: name for name, level in R.METADATA_VERSION_LEVELS.items()}


def _image(records):
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay_all(records)
    return delta.apply(0, 0, 0)


def check_bootstrap_records(records):
    """`records` as a tuple, once they hold exactly one known metadata.version and replay
    on an empty image; MetadataError otherwise."""
    records = tuple(records)
    levels = [r.feature_level for r in records
              if isinstance(r, R.FeatureLevelRecord) and r.name == METADATA_VERSION]
    if len(levels) != 1:
        raise MetadataError(f"bootstrap records must set metadata.version once, not "
                            f"{len(levels)} times")
    if levels[0] not in _LEVEL_NAMES:
        raise MetadataError(f"bootstrap metadata.version {levels[0]} is not a known level")
    if levels[0] < SCRAM_MINIMUM_LEVEL and any(
            isinstance(r, R.UserScramCredentialRecord) for r in records):
        raise MetadataError(f"SCRAM credentials need metadata.version 3.5-IV2 "
                            f"({SCRAM_MINIMUM_LEVEL}) or later, not "
                            f"{_LEVEL_NAMES[levels[0]]} ({levels[0]})")
    _image(records)  # raises MetadataError when they do not replay
    return records


def bootstrap_records(level, extra=()):
    """The bootstrap records for metadata.version `level` and `extra` records."""
    return check_bootstrap_records(
        [R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=level), *extra])


def encode_bootstrap(records):
    """The bytes of a bootstrap.checkpoint holding `records`."""
    return encode_snapshot(_image(check_bootstrap_records(records)), timestamp_ms=0)


def decode_bootstrap(data, source="bootstrap.checkpoint"):
    """The records of a bootstrap.checkpoint's bytes; CorruptRecordError or MetadataError
    naming `source` when they are not a valid one."""
    try:
        records, _ = decode_snapshot(data)
        return check_bootstrap_records(records)
    except (CorruptRecordError, MetadataError) as exc:
        raise type(exc)(f"{source}: {exc}") from None


def read_bootstrap_records(directory):
    """The records of the bootstrap file in `directory` (a node's metadata.log.dir), or ()
    when it has none."""
    data = read_bootstrap_file(directory)
    if data is None:
        return ()
    return decode_bootstrap(data, bootstrap_path(directory))
