"""`RaftConfig`: the quorum settings of one node, with Kafka's defaults (kafka-facts §7.1,
§4.3) and their derived timeouts. Values are checked once, here, with a `ConfigError` that
names the setting."""

import dataclasses

from kraftcore.errors import ConfigError
from kraftcore.limits import RAFT_BATCH_BYTES_MAX, RAFT_FETCH_BYTES_MAX

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_PARTITION = 0


@dataclasses.dataclass(frozen=True)
class RaftConfig:
    # Each election timer is drawn from [T, 2T).
    election_timeout_ms: int = 1000
    # A follower with no successful Fetch for this long starts an election; a leader
    # without Fetches from a majority for 1.5x this long resigns (check-quorum).
    fetch_timeout_ms: int = 2000
    # Cap of the exponential backoff after a lost election (and of the resignation backoff).
    election_backoff_ms_max: int = 1000
    # Base of the election backoff (Kafka's RETRY_BACKOFF_BASE_MS).
    election_backoff_base_ms: int = 100
    # A request without a response for this long is given up and may be retried.
    request_timeout_ms: int = 2000
    # Wait before retrying a destination whose request failed or timed out.
    retry_backoff_ms: int = 20
    # How long the leader holds a Fetch that has nothing to return (long poll).
    fetch_wait_ms_max: int = 500
    fetch_bytes_max: int = RAFT_FETCH_BYTES_MAX
    batch_bytes_max: int = RAFT_BATCH_BYTES_MAX
    # Pre-vote (KIP-996): a node first asks whether it could win before bumping the epoch.
    pre_vote: bool = True
    # Voters fsync every follower append before the next Fetch; observers need not.
    observers_flush: bool = False
    cluster_id: str = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" or field.type is int:
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ConfigError(f"{field.name} must be an int >= 0, got {value!r}")
        for name in ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms",
                     "fetch_bytes_max", "batch_bytes_max"):
            if getattr(self, name) == 0:
                raise ConfigError(f"{name} must be > 0")
        for name, bound in (("fetch_bytes_max", RAFT_FETCH_BYTES_MAX),
                            ("batch_bytes_max", RAFT_BATCH_BYTES_MAX)):
            if getattr(self, name) > bound:
                raise ConfigError(f"{name} must be at most {bound}, got {getattr(self, name)}")
        if self.fetch_wait_ms_max >= min(self.request_timeout_ms, self.fetch_timeout_ms):
            # A long-polled Fetch on an idle log would time out before its answer, and the
            # follower, never counting a Fetch as successful, would start elections forever.
            raise ConfigError(
                f"fetch_wait_ms_max ({self.fetch_wait_ms_max}) must be below request_timeout_ms "
                f"({self.request_timeout_ms}) and fetch_timeout_ms ({self.fetch_timeout_ms})")
        if self.cluster_id is not None and not isinstance(self.cluster_id, str):
            raise ConfigError(f"cluster_id must be a string or None, got {self.cluster_id!r}")

    @property
    def check_quorum_timeout_ms(self):
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_interval_ms(self):
        return self.fetch_timeout_ms // 2
