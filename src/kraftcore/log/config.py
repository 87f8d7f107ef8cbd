"""A log's configuration: Kafka's topic-level log settings under Python names, checked once.

Defaults are Kafka's (kafka-facts §3.6) except two, chosen for an embedded library:
`fsync="always"` (an append returns once it is durable; Kafka leaves flushing to the OS
because it replicates) and no retention (`retention_bytes = retention_ms = -1`, as Kafka's
metadata log has). Limits are checked so that index positions and relative offsets fit
Kafka's int32 fields.
"""

import dataclasses

from kraftcore.errors import ConfigError
from kraftcore.layout import (BATCH_HEADER_BYTES, INT32_MAX, LOG_OVERHEAD_BYTES,
                              OFFSET_INDEX_ENTRY_BYTES, TIME_INDEX_ENTRY_BYTES)
from kraftcore.limits import LOG_SEGMENT_BYTES_MIN

FSYNC_POLICIES = ("always", "interval", "never")


@dataclasses.dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    batch_bytes_max: int = 1024 * 1024 + LOG_OVERHEAD_BYTES  # max.message.bytes
    append_bytes_max: int = 64 * 1024 * 1024  # one append call, all batches together
    fsync: str = "always"  # "always" | "interval" | "never"
    fsync_interval_ms: int = 1000  # with fsync="interval" (flush.ms)
    preallocate: bool = False  # reserve segment_bytes on disk when a segment is created
    prefill_bytes: int = 0  # zeros written ahead of the active segment's data (0: none)
    retention_bytes: int = -1  # retention.bytes; -1 keeps everything
    retention_ms: int = -1  # retention.ms; -1 keeps everything
    checkpoint_interval_ms: int = 60_000  # recovery point / high watermark checkpoints
    verify_records: bool = True  # check every record of appended batches, not only CRCs
    # False: the log's owner keeps its recovery point, high watermark, log start offset and
    # clean-shutdown marker with those of its other logs (a broker's log directory root,
    # Kafka's layout) and hands them to `Log.open(offsets=...)`; the log writes only its
    # leader-epoch checkpoint.
    own_checkpoints: bool = True
    # cleanup.policy includes "compact": the log cleaner removes records (`kraftcore.log.
    # cleaner`), so offsets may jump forward between two batches of a segment and between
    # a follower's appends, and a segment's first batch may start above its base offset.
    # A log that was ever cleaned (it has a cleaner offset) is read that way too.
    compact: bool = False

    def __post_init__(self):
        def need(ok, message):
            if not ok:
                raise ConfigError(message)

        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            expected = bool if field.type in (bool, "bool") else str if field.type in (str, "str") else int
            if type(value) is not expected:
                raise ConfigError(
                    f"{field.name} must be {expected.__name__}, got {type(value).__name__} {value!r}")
        need(self.fsync in FSYNC_POLICIES,
             f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {self.fsync!r}")
        need(LOG_SEGMENT_BYTES_MIN <= self.segment_bytes <= INT32_MAX,
             f"segment_bytes must be in [{LOG_SEGMENT_BYTES_MIN}, {INT32_MAX}], got "
             f"{self.segment_bytes}")
        need(self.segment_ms > 0, f"segment_ms must be positive, got {self.segment_ms}")
        need(self.segment_index_bytes >= TIME_INDEX_ENTRY_BYTES,
             f"segment_index_bytes must be at least {TIME_INDEX_ENTRY_BYTES}, got "
             f"{self.segment_index_bytes}")
        need(self.index_interval_bytes >= 0,
             f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        need(BATCH_HEADER_BYTES <= self.batch_bytes_max <= INT32_MAX,
             f"batch_bytes_max must be in [{BATCH_HEADER_BYTES}, {INT32_MAX}], got "
             f"{self.batch_bytes_max}")
        need(self.append_bytes_max >= self.batch_bytes_max,
             "append_bytes_max must be at least batch_bytes_max")
        need(self.fsync_interval_ms > 0,
             f"fsync_interval_ms must be positive, got {self.fsync_interval_ms}")
        need(self.prefill_bytes >= 0,
             f"prefill_bytes must be >= 0, got {self.prefill_bytes}")
        need(self.retention_bytes >= -1, "retention_bytes must be -1 or >= 0")
        need(self.retention_ms >= -1, "retention_ms must be -1 or >= 0")
        need(self.checkpoint_interval_ms >= 0, "checkpoint_interval_ms must be >= 0")

    @classmethod
    def of(cls, **settings):
        """A config from keyword settings; an unknown name is an error, not ignored."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigError(
                f"unknown log setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**settings)

    @property
    def offset_index_entries_max(self):
        return self.segment_index_bytes // OFFSET_INDEX_ENTRY_BYTES

    @property
    def time_index_entries_max(self):
        return self.segment_index_bytes // TIME_INDEX_ENTRY_BYTES
