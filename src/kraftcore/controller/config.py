"""The active controller's settings, with Kafka's defaults (kafka-facts §8.1–8.4)."""

import dataclasses

from kraftcore.errors import ConfigError, MetadataError
from kraftcore.metadata.bootstrap import check_bootstrap_records
from kraftcore.metadata.records import METADATA_VERSION_LEVELS

__all__ = ["ControllerConfig", "DEFAULT_METADATA_VERSION"]

DEFAULT_METADATA_VERSION = METADATA_VERSION_LEVELS["3.9-IV0"]
"""The metadata.version a new cluster is bootstrapped with."""


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    cluster_id: str = "kraftcore-cluster"
    # broker.session.timeout.ms / broker.heartbeat.interval.ms
    session_timeout_ms: int = 9000
    heartbeat_interval_ms: int = 2000
    # metadata.max.idle.interval.ms: a NoOpRecord this often keeps the high watermark moving
    # (0: never).
    idle_interval_ms_max: int = 500
    # num.partitions / default.replication.factor, used when a request says -1.
    default_partitions: int = 1
    default_replication_factor: int = 1
    # A single operation's records (MAX_RECORDS_PER_BATCH is 10 000 in Kafka for user
    # operations; fencing a broker may need one record per partition it holds).
    operation_records_max: int = 1_000_000
    # The most value bytes the controller puts in one Raft batch; an operation above it is
    # written as a metadata transaction over several batches.
    batch_bytes_max: int = 4 * 1024 * 1024
    # The most records the controller puts in one Raft batch when it joins the writes of
    # one run (a single operation's records are never split for this limit).
    batch_records_max: int = 10_000
    # metadata.version written when the log is empty.
    bootstrap_metadata_version: int = DEFAULT_METADATA_VERSION
    # The records written instead when the log is empty, when given (the node's
    # bootstrap.checkpoint: metadata.version, then SCRAM credentials from format).
    bootstrap_records: tuple = ()
    # producer ids per ProducerIdsRecord block
    producer_id_block_size: int = 1000

    def with_bootstrap_records(self, records):
        """This config with `bootstrap_records` set to `records` (() keeps the default)."""
        return dataclasses.replace(self, bootstrap_records=tuple(records))

    def __post_init__(self):
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "default_partitions",
                     "default_replication_factor", "operation_records_max",
                     "batch_bytes_max", "batch_records_max", "producer_id_block_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"controller config {name} must be >= 1, not "
                                  f"{getattr(self, name)!r}")
        if self.idle_interval_ms_max < 0:
            raise ConfigError(f"controller config idle_interval_ms_max must be >= 0, not "
                              f"{self.idle_interval_ms_max!r}")
        if self.bootstrap_metadata_version not in METADATA_VERSION_LEVELS.values():
            raise ConfigError(f"bootstrap_metadata_version {self.bootstrap_metadata_version!r}"
                              " is not a known metadata.version level (1-"
                              f"{max(METADATA_VERSION_LEVELS.values())})")
        if self.bootstrap_records:
            try:
                object.__setattr__(self, "bootstrap_records",
                                   check_bootstrap_records(self.bootstrap_records))
            except MetadataError as exc:
                raise ConfigError(f"controller config bootstrap_records: {exc}") from None
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be "
                              f"below session_timeout_ms ({self.session_timeout_ms})")
