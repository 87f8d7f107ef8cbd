"""The segmented log: Kafka's on-disk layout (segments, offset and time indexes,
checkpoint files), durable appends with group commit, reads, truncation, retention and
crash recovery. See `kraftcore.log.log` for the guarantees and docs/log.md for the guide.

POSIX only (it relies on pread/pwrite and flock)."""

from kraftcore.log.config import LogConfig
from kraftcore.epochs import LeaderEpochCache
from kraftcore.log.log import Log, LogOffsets, ReadResult, RecoveryReport

__all__ = ["Log", "LogConfig", "LogOffsets", "LeaderEpochCache", "ReadResult", "RecoveryReport"]
