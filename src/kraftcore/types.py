"""The values that cross layers: every layer may import this module, and it imports none.

* `Uuid`: Kafka's 128-bit ids (topic ids, incarnation ids, directory ids; kafka-facts
  §1.3). A `Uuid` is the 16 raw bytes (it subclasses `bytes`, so it is immutable, hashable
  and written as is). Its text form is Kafka's: URL-safe base64 without padding, 22
  characters. Randomness is an input: `Uuid.random(rng)` takes the generator to draw from.
* `SnapshotId`: a snapshot's (end offset, epoch), as Raft, the snapshot files and the tools
  name it.
* `ElectionState`: what a Raft node remembers across restarts (the `quorum-state` file).
* `RegistrationResult`, `HeartbeatResult`: the active controller's answers to a broker's
  registration and heartbeat, as the controller returns them and as `BrokerLifecycle`
  takes them (Kafka's `BrokerRegistrationReply`, `BrokerHeartbeatReply`), whether they
  came from a local controller or over the network.
* `FileRegion`: bytes of an open file that travel by reference (a Fetch answer's records,
  which the listener sends from the segment file with `sendfile` instead of copying them).
"""

import base64
import dataclasses
import os
from typing import NamedTuple

from kraftcore.layout import INT32_MAX


class Uuid(bytes):
    __slots__ = ()

    def __new__(cls, raw=bytes(16)):
        if len(raw) != 16:
            raise ValueError(f"a Uuid is 16 bytes, not {len(raw)}")
        return super().__new__(cls, raw)

    @classmethod
    def from_str(cls, text):
        """Parse Kafka's text form; rejects anything that is not 16 bytes of base64url."""
        if not isinstance(text, str) or len(text) > 24:
            raise ValueError(f"not a Kafka uuid: {text!r}")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except ValueError:
            raise ValueError(f"not a Kafka uuid: {text!r}") from None
        if len(raw) != 16:
            raise ValueError(f"not a Kafka uuid (decodes to {len(raw)} bytes): {text!r}")
        return cls(raw)

    @classmethod
    def from_ints(cls, most_significant, least_significant):
        mask = (1 << 64) - 1
        return cls(((most_significant & mask) << 64 | (least_significant & mask)).to_bytes(16, "big"))

    @classmethod
    def random(cls, rng):
        """A random id that is not reserved (ZERO, ONE) and whose text does not start with
        '-', as Kafka's `Uuid.randomUuid()` guarantees. `rng` is a `random.Random`."""
        while True:
            candidate = cls(rng.getrandbits(128).to_bytes(16, "big"))
            if candidate not in RESERVED and not str(candidate).startswith("-"):
                return candidate

    def __str__(self):
        return base64.urlsafe_b64encode(self).rstrip(b"=").decode("ascii")

    def __repr__(self):
        return f"Uuid('{self}')"


ZERO_UUID = Uuid(bytes(16))
ONE_UUID = Uuid(bytes(15) + b"\x01")
# The topic id of `__cluster_metadata` (kafka-facts §1.3).
METADATA_TOPIC_ID = ONE_UUID
RESERVED = frozenset((ZERO_UUID, ONE_UUID))


class SnapshotId(NamedTuple):
    """A snapshot's identity (kafka-facts §4.4): `end_offset` is exclusive (last contained
    offset + 1), `epoch` is the epoch of the last contained record."""

    end_offset: int
    epoch: int


class RegistrationResult(NamedTuple):
    """A broker registration the active controller accepted: the broker's epoch."""

    broker_epoch: int


class HeartbeatResult(NamedTuple):
    """The active controller's answer to a broker heartbeat (kafka-facts §8.3)."""

    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


@dataclasses.dataclass(frozen=True)
class ElectionState:
    """What a node must remember across restarts: the epoch, whom it voted for in it, and
    the leader it knows of. `voters` are the static voter ids (data version 0 only)."""

    epoch: int
    leader_id: int = None
    voted_id: int = None
    voted_directory_id: Uuid = ZERO_UUID
    voters: tuple = None

    def __post_init__(self):
        # The file holds int32 fields: a value out of their range is never written.
        if not isinstance(self.epoch, int) or not 0 <= self.epoch <= INT32_MAX:
            raise ValueError(f"epoch must be an int32 >= 0, not {self.epoch!r}")
        for name in ("leader_id", "voted_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int)
                                      or not 0 <= value <= INT32_MAX):
                raise ValueError(f"{name} must be None or a node id in [0, 2^31), not "
                                 f"{value!r}")


class FileRegion:
    """`length` bytes at `position` of `file` (a binary file object open for reading, which
    the region owns): a records field that a response carries by reference. The listener
    sends it with `sendfile` (zero-copy) and closes it; whoever drops a region unsent calls
    `close()` (the file also closes when the region is collected). `read()` gives the bytes,
    for a reader that wants them in memory after all."""

    __slots__ = ("file", "position", "length")

    def __init__(self, file, position, length):
        if not isinstance(position, int) or not isinstance(length, int) or position < 0 \
                or not 0 <= length <= INT32_MAX:
            raise ValueError(f"bad file region: position {position!r}, length {length!r}")
        self.file = file
        self.position = position
        self.length = length

    def read(self):
        """The region's bytes; `OSError` when the file no longer holds them all."""
        data = os.pread(self.file.fileno(), self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"a file region of {self.length} bytes at {self.position} holds "
                          f"only {len(data)} now (the file was truncated)")
        return data

    def close(self):
        self.file.close()

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"FileRegion(fd={self.file.fileno() if not self.file.closed else None}, " \
               f"position={self.position}, length={self.length})"
