"""`RaftConfig`: Kafka's defaults, and each setting refused outside its bounds with the
setting's name."""

import pytest

from kraftcore import limits
from kraftcore.errors import ConfigError
from kraftcore.raft.config import RaftConfig


def test_the_defaults_are_kafkas():
    config = RaftConfig()
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.fetch_wait_ms_max,
            config.election_backoff_ms_max) == (1000, 2000, 500, 1000)
    assert config.fetch_bytes_max == limits.RAFT_FETCH_BYTES_MAX
    assert config.batch_bytes_max == limits.RAFT_BATCH_BYTES_MAX


@pytest.mark.parametrize("settings, named", [
    ({"fetch_bytes_max": limits.RAFT_FETCH_BYTES_MAX + 1}, "fetch_bytes_max must be at most"),
    ({"batch_bytes_max": limits.RAFT_BATCH_BYTES_MAX + 1}, "batch_bytes_max must be at most"),
    ({"fetch_bytes_max": 0}, "fetch_bytes_max must be > 0"),
    ({"batch_bytes_max": 0}, "batch_bytes_max must be > 0"),
    ({"election_backoff_ms_max": -1}, "election_backoff_ms_max must be an int >= 0"),
    ({"fetch_wait_ms_max": 2000}, "fetch_wait_ms_max (2000) must be below"),
])
def test_a_setting_out_of_bounds_is_refused_by_name(settings, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        RaftConfig(**settings)
