"""The reconnect backoff schedule: how long a peer pool waits before connecting again to a
peer whose last connections failed.

The delay after the n-th consecutive failure (n >= 1) is Kafka's exponential backoff
(`org.apache.kafka.common.utils.ExponentialBackoff`, KIP-144 `reconnect.backoff.ms` /
`reconnect.backoff.max.ms`): base * 2^(n-1), capped at max, then multiplied by a random
factor drawn uniformly from [1 - jitter, 1 + jitter] so that peers that failed together do
not all reconnect in the same millisecond. The randomness comes from a `random.Random` the
caller passes in, so a seeded generator reproduces the schedule exactly.

This module owns no clock and no socket: it only computes delays.
"""

import random

# Kafka's client defaults: reconnect.backoff.ms, reconnect.backoff.max.ms, and the jitter
# of its ExponentialBackoff (CommonClientConfigs.RECONNECT_BACKOFF_JITTER_DEFAULT = 0.2).
RECONNECT_BACKOFF_MS_DEFAULT = 50
RECONNECT_BACKOFF_MS_MAX_DEFAULT = 1000
RECONNECT_BACKOFF_JITTER_DEFAULT = 0.2


class Backoff:
    """Exponential backoff with jitter: `delay_ms(failures)` for `failures` >= 1 consecutive
    failures lies in [d * (1 - jitter), d * (1 + jitter)] where d = min(ms_max,
    base_ms * 2^(failures - 1)); `delay_ms(0)` is 0. Each call draws once from `rng`."""

    __slots__ = ("base_ms", "ms_max", "jitter", "_rng")

    def __init__(self, base_ms=RECONNECT_BACKOFF_MS_DEFAULT,
                 ms_max=RECONNECT_BACKOFF_MS_MAX_DEFAULT,
                 jitter=RECONNECT_BACKOFF_JITTER_DEFAULT, rng=None):
        if not base_ms >= 0:
            raise ValueError(f"base_ms must be >= 0, not {base_ms!r}")
        if not ms_max >= base_ms:
            raise ValueError(f"ms_max must be >= base_ms ({base_ms}), not {ms_max!r}")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), not {jitter!r}")
        self.base_ms = base_ms
        self.ms_max = ms_max
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    def delay_ms(self, failures):
        """Milliseconds to wait before the next attempt after `failures` consecutive ones."""
        if failures <= 0:
            return 0.0
        # 2^64 is far past any cap; bounding the exponent keeps the float finite.
        delay = min(float(self.ms_max), self.base_ms * 2.0 ** min(failures - 1, 64))
        if self.jitter:
            delay *= self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return delay
