"""The topic-level configs kraftcore knows (Kafka's `TopicConfig` names, types and
defaults, kafka-facts §3.6): how the controller checks a value it is asked to store, and
how a broker turns a topic's values into the settings of its partition logs.

`check(name, value)` returns None for a value Kafka would take, else why not (the
controller answers INVALID_CONFIG with it). `log_settings(values)` maps a topic's values
({name: text}) to `kraftcore.log.LogConfig` fields; configs that are not log settings
(min.insync.replicas, unclean.leader.election.enable, message.timestamp.type,
compression.type) are read where they act. A partition log takes its topic's values when
it opens.

cleanup.policy (`compacted`, `deletes`): with "compact" the log is compacted
(`LogConfig.compact`, its offsets may jump where the cleaner removed records) and the
broker's cleaner cleans it with `cleaner_settings` (min.cleanable.dirty.ratio,
min.compaction.lag.ms, delete.retention.ms, read each time a clean starts); without
"delete" its segments are never deleted by age or size (retention.ms and retention.bytes
do not apply, as in Kafka).
"""

__all__ = ["TOPIC_CONFIGS", "check", "log_settings", "cleaner_settings", "compacted",
           "deletes", "MIN_INSYNC_REPLICAS", "UNCLEAN_LEADER_ELECTION",
           "MESSAGE_TIMESTAMP_TYPE", "LOG_APPEND_TIME", "CLEANUP_POLICY"]

MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
MESSAGE_TIMESTAMP_TYPE = "message.timestamp.type"
LOG_APPEND_TIME = "LogAppendTime"
CLEANUP_POLICY = "cleanup.policy"
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
_SEGMENT_BYTES_MIN = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0


def _integer(low, high):
    def check(value):
        try:
            number = int(value.strip())
        except (ValueError, AttributeError):
            return "must be an integer"
        if not low <= number <= high:
            return f"must be in [{low}, {high}]"
        return None
    return check


def _choice(*allowed):
    def check(value):
        if value not in allowed:
            return f"must be one of {', '.join(allowed)}"
        return None
    return check


def _ratio(value):
    try:
        number = float(value.strip())
    except (ValueError, AttributeError):
        return "must be a number"
    if not 0 <= number <= 1:
        return "must be in [0, 1]"
    return None


def _policy(value):
    parts = [p.strip() for p in (value or "").split(",")]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        return "must be delete, compact or compact,delete"
    return None


# name -> (check, LogConfig field or None)
TOPIC_CONFIGS = {
    MIN_INSYNC_REPLICAS: (_integer(1, INT32_MAX), None),
    UNCLEAN_LEADER_ELECTION: (_choice("true", "false"), None),
    MESSAGE_TIMESTAMP_TYPE: (_choice("CreateTime", LOG_APPEND_TIME), None),
    CLEANUP_POLICY: (_policy, None),
    "min.cleanable.dirty.ratio": (_ratio, None),
    "min.compaction.lag.ms": (_integer(0, INT64_MAX), None),
    "delete.retention.ms": (_integer(0, INT64_MAX), None),
    "compression.type": (_choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                         None),
    "retention.ms": (_integer(-1, INT64_MAX), "retention_ms"),
    "retention.bytes": (_integer(-1, INT64_MAX), "retention_bytes"),
    "segment.bytes": (_integer(_SEGMENT_BYTES_MIN, INT32_MAX), "segment_bytes"),
    "segment.ms": (_integer(1, INT64_MAX), "segment_ms"),
    "segment.index.bytes": (_integer(4, INT32_MAX), "segment_index_bytes"),
    "index.interval.bytes": (_integer(0, INT32_MAX), "index_interval_bytes"),
    "max.message.bytes": (_integer(0, INT32_MAX), "batch_bytes_max"),
    "flush.ms": (_integer(0, INT64_MAX), None),
    "flush.messages": (_integer(1, INT64_MAX), None),
}


def check(name, value):
    """Why topic config `name` cannot take `value` (text), or None when it can."""
    entry = TOPIC_CONFIGS.get(name)
    if entry is None:
        return (f"unknown topic config {name!r}; kraftcore knows "
                f"{', '.join(sorted(TOPIC_CONFIGS))}")
    if value is None:
        return None  # a removal
    problem = entry[0](value)
    return None if problem is None else f"{name} {problem}, not {value!r}"


def log_settings(values, base):
    """`base` (LogConfig keyword settings, a dict) with a topic's log configs applied.
    Values that do not parse are left out (the controller refused them already)."""
    settings = dict(base)
    for name, value in values.items():
        entry = TOPIC_CONFIGS.get(name)
        if entry is None or value is None or check(name, value) is not None:
            continue
        field = entry[1]
        if field is not None:
            settings[field] = int(value)
    flush_messages = values.get("flush.messages")
    flush_ms = values.get("flush.ms")
    if flush_messages is not None and check("flush.messages", flush_messages) is None \
            and int(flush_messages) == 1:
        settings["fsync"] = "always"
    elif flush_ms is not None and check("flush.ms", flush_ms) is None \
            and 0 < int(flush_ms) < INT64_MAX:
        settings["fsync"] = "interval"
        settings["fsync_interval_ms"] = int(flush_ms)
    if settings.get("batch_bytes_max", 0) < 61:
        settings.pop("batch_bytes_max", None)  # below one batch header: Log refuses it
    if compacted(values):
        settings["compact"] = True
    if not deletes(values):
        settings["retention_ms"] = settings["retention_bytes"] = -1
    return settings


def _policies(values):
    value = values.get(CLEANUP_POLICY)
    if value is None or _policy(value) is not None:
        return ("delete",)  # Kafka's default (log.cleanup.policy)
    return tuple(p.strip() for p in value.split(","))


def compacted(values):
    """Whether a topic's cleanup.policy includes "compact"."""
    return "compact" in _policies(values)


def deletes(values):
    """Whether a topic's cleanup.policy includes "delete" (the default)."""
    return "delete" in _policies(values)


def cleaner_settings(values, base):
    """`base` (`kraftcore.log.cleaner.CleanerConfig` keyword settings, the broker's
    defaults) with a topic's compaction configs applied."""
    settings = dict(base)
    for name, field, parse in (("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", float),
                               ("min.compaction.lag.ms", "min_compaction_lag_ms", int),
                               ("delete.retention.ms", "delete_retention_ms", int)):
        value = values.get(name)
        if value is not None and check(name, value) is None:
            settings[field] = parse(value.strip())
    return settings
