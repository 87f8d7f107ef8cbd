"""The values the Raft core exchanges with its driver: messages in and out, snapshot ids,
leader-and-epoch, and `Ready`, the core's account of what must be persisted and sent.

The contract (DESIGN.md, "The flow of data"): the driver feeds inputs — `handle(message,
now_ms)`, `poll(now_ms)`, `propose(records)` — then calls `take_ready()`. For each `Ready`,
in the order they were taken, the driver must:

1. persist `election_state` (the quorum-state file) when it is set, durably;
2. make the log durable through `flush_offset` when it is set (fsync everything written);
3. only then send `messages` (vote grants, Fetch offsets and acknowledgements depend on
   what was persisted before them);
4. call `on_persisted(ready.number)`.

When `send_first` is set, the driver may instead send `messages` before 1 and 2 (they are
a leader's, in an epoch whose election state is already durable: its Fetch answers do not
rest on its own flush, because it counts its log toward the high watermark only once
flushed and never appends in that epoch again after a restart). Every earlier Ready not
yet persisted then has `send_first` too, so messages still leave in Ready order; step 4
stays in order after the persistence.

A crash between 1 and 4 loses that Ready's messages, which is safe: nothing was promised.
`commits`, `load_snapshot` and `leader_change` are for the state machine; they may be
applied at any time after the Ready is taken, in order (load the snapshot first).
"""

from typing import NamedTuple

from kraftcore.types import SnapshotId

NO_ID = -1
NO_EPOCH = -1
NO_OFFSET = -1



BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


class LeaderAndEpoch(NamedTuple):
    """Who leads which epoch, as a node knows it; `leader_id` None when unknown."""

    leader_id: int
    epoch: int


class RaftMessage(NamedTuple):
    """One request or response between two nodes. `body` is a message of
    `kraftcore.protocol.messages` (its `kind` says request or response); a response carries
    the `correlation_id` of the request it answers. The core never mutates a body it was
    handed or one it sent, so a transport may deliver the same object twice."""

    source: int
    destination: int
    correlation_id: int
    body: object


class CommittedBatch(NamedTuple):
    """A batch below the high watermark, for the state machine. `data` holds the whole
    v2 batch (decode it with `kraftcore.codec.decode_batches`); control batches are
    delivered too (`control` True) so that offsets stay contiguous."""

    base_offset: int
    last_offset: int
    epoch: int
    control: bool
    data: bytes


class Ready:
    """What the core produced since the previous `take_ready()`; see the module docstring
    for the order in which a driver must act on it."""

    __slots__ = ("number", "election_state", "flush_offset", "messages", "high_watermark",
                 "commits", "load_snapshot", "leader_change", "send_first")

    def __init__(self, number, election_state=None, flush_offset=None, messages=(),
                 high_watermark=None, commits=(), load_snapshot=None, leader_change=None,
                 send_first=False):
        self.number = number
        # kraftcore.types.ElectionState to write before anything else, or None.
        self.election_state = election_state
        # The log end offset the log must be durable through, or None (nothing new).
        self.flush_offset = flush_offset
        # [RaftMessage] to send once the above is persisted.
        self.messages = messages
        # The new high watermark when it moved, else None.
        self.high_watermark = high_watermark
        # [CommittedBatch], in offset order, newly below the high watermark.
        self.commits = commits
        # A SnapshotId whose contents replace the state machine's state (read it from the
        # storage) before `commits` are applied; None when there is none.
        self.load_snapshot = load_snapshot
        # A LeaderAndEpoch when the known leader or epoch changed, else None.
        self.leader_change = leader_change
        # True when `messages` may be sent before the persistence above (module docstring).
        self.send_first = send_first

    @property
    def needs_persist(self):
        return self.election_state is not None or self.flush_offset is not None

    def __bool__(self):
        return bool(self.election_state is not None or self.flush_offset is not None
                    or self.messages or self.high_watermark is not None or self.commits
                    or self.load_snapshot is not None or self.leader_change is not None)

    def __repr__(self):
        parts = [f"number={self.number}"]
        for name in self.__slots__[1:]:
            value = getattr(self, name)
            if value is not None and value != () and value is not False:
                parts.append(f"{name}={value!r}")
        return f"Ready({', '.join(parts)})"
