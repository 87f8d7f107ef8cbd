"""`BrokerMetadata`: the broker's metadata follower and publisher (DESIGN.md "The flow of
data", kafka-facts §4.6, §7.8; Kafka's broker-side `MetadataLoader` and its publishers).

A broker follows `__cluster_metadata` as a Raft observer. What its `RaftCore` delivers —
a snapshot to load, then committed batches, in the order of the Readys — goes through a
`MetadataLoader` here, and every new image goes to the registered publishers
(`add_publisher(fn)`, called as `fn(image, update)` with a `MetadataUpdate`), in the order
they were added. A publisher added late first gets the current image (unless told not to),
so every publisher sees every state from its start.

`metadata_offset` is the last offset the published image contains (-1 before any): what the
broker reports in its heartbeats (`BrokerLifecycle.set_metadata_offset`). It equals
`loader.next_offset - 1` except while a metadata transaction is open, when the image (and
so the reported offset) stays before the transaction's Begin record: the broker must not
claim to have replayed records it has not applied (the controller unfences a broker, and
ends a controlled shutdown, on these offsets, §8.3).

Snapshots (§4.6: every node snapshots its own committed image): after applying a Ready, the
driver calls `maybe_snapshot(now_ms, core)`. When the loader says a snapshot is due, the
image is encoded (`encode_snapshot`) and stored through `core.create_snapshot(end offset,
data)` — the core checks that the offset is committed, applied and on a batch boundary; if
it is not yet (`InvalidOffsetError`), nothing is written and the next call tries again.

Restart: the observer core over the broker's storage first delivers `Ready.load_snapshot`
(the newest local snapshot; `on_ready` reads it from the storage), then the committed log
tail after it, so a restarted broker reaches the image of one that replayed the whole log.

Invariants: batches apply in offset order without gaps, and a snapshot the storage does not
hold is an error (`MetadataError`, from here or from the loader); a publisher is never
called with an image older than the previous one it got.

`visible_brokers(image)`: the brokers clients are told about in metadata responses —
registered, unfenced and not in controlled shutdown. A FENCED or STOPPING broker is left
out.

API:

  BrokerMetadata(*, loader=None, snapshot_interval_bytes=SNAPSHOT_INTERVAL_BYTES_DEFAULT,
                 snapshot_interval_ms=SNAPSHOT_INTERVAL_MS_DEFAULT, now_ms=0)
  on_ready(ready, storage, now_ms=None)       # Ready.load_snapshot, .commits, .leader_change
  on_load_snapshot(snapshot_id, data, now_ms=None); on_commits(commits)
  maybe_snapshot(now_ms, core) -> SnapshotId or None
  add_publisher(fn, catch_up=True); remove_publisher(fn)
  image, metadata_offset, leader (the last LeaderAndEpoch a Ready reported, or None),
  loader, snapshots_written, snapshots_deferred
  visible_brokers(image) -> [RegisterBrokerRecord] by broker id
"""

from typing import NamedTuple

from kraftcore.errors import MetadataError
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.loader import (SNAPSHOT_INTERVAL_BYTES_DEFAULT, SNAPSHOT_INTERVAL_MS_DEFAULT,
                                      MetadataLoader)

__all__ = ["BrokerMetadata", "MetadataUpdate", "visible_brokers"]


class MetadataUpdate(NamedTuple):
    """What a published image follows from. `snapshot_id` is set when a snapshot replaced
    the image (`base_offset` is then 0); otherwise the image is `previous` with the
    committed log offsets [`base_offset`, `last_offset`] applied. `last_offset` is the new
    `metadata_offset`. A catch-up for a newly added publisher has `previous` EMPTY_IMAGE
    and base_offset 0."""

    previous: object  # the MetadataImage published before this one
    snapshot_id: object  # kraftcore.raft.types.SnapshotId, or None
    base_offset: int
    last_offset: int


def visible_brokers(image):
    """The brokers a metadata response names: registered, unfenced and not in controlled
    shutdown (kafka-facts §8.3 `isActive`), by broker id."""
    return [image.brokers[b] for b in sorted(image.brokers) if image.broker_is_active(b)]


class BrokerMetadata:
    def __init__(self, *, loader=None, snapshot_interval_bytes=SNAPSHOT_INTERVAL_BYTES_DEFAULT,
                 snapshot_interval_ms=SNAPSHOT_INTERVAL_MS_DEFAULT, now_ms=0):
        if loader is None:
            loader = MetadataLoader(snapshot_interval_bytes=snapshot_interval_bytes,
                                    snapshot_interval_ms=snapshot_interval_ms, now_ms=now_ms)
        self.loader = loader
        self._publishers = []
        self.leader = None
        self.snapshots_loaded = 0

    def __repr__(self):
        return (f"BrokerMetadata(offset={self.metadata_offset}, image={self.image!r}, "
                f"publishers={len(self._publishers)})")

    @property
    def image(self):
        return self.loader.image

    @property
    def metadata_offset(self):
        """The last offset the current image contains; -1 before any."""
        return self.loader.image.end_offset - 1

    # ------------------------------------------------------------------ publishers

    def add_publisher(self, fn, catch_up=True):
        """Call `fn(image, update)` with every new image. With `catch_up`, `fn` first gets
        the current image at once (when there is one)."""
        if fn in self._publishers:
            raise ValueError(f"publisher {fn!r} is registered already")
        self._publishers.append(fn)
        image = self.image
        if catch_up and image.end_offset > 0:
            fn(image, MetadataUpdate(EMPTY_IMAGE, None, 0, image.end_offset - 1))

    def remove_publisher(self, fn):
        self._publishers.remove(fn)

    def _publish(self, image, update):
        for fn in list(self._publishers):
            fn(image, update)

    # ------------------------------------------------------------------ inputs

    def on_ready(self, ready, storage, now_ms=None):
        """Apply a Ready of the broker's observer core: its snapshot to load (read from
        `storage`), then its commits. Returns the current image."""
        if ready.leader_change is not None:
            self.leader = ready.leader_change
        snapshot_id = ready.load_snapshot
        if snapshot_id is not None:
            size = storage.snapshot_size(snapshot_id)
            if size is None:
                raise MetadataError(f"the Raft core asked to load snapshot {snapshot_id}, "
                                    "which the storage does not hold")
            data = storage.read_snapshot(snapshot_id, 0, size)
            if data is None or len(data) != size:
                raise MetadataError(f"snapshot {snapshot_id} reads back as "
                                    f"{None if data is None else len(data)} bytes, not "
                                    f"{size}")
            self.on_load_snapshot(snapshot_id, data, now_ms)
        if ready.commits:
            self.on_commits(ready.commits)
        return self.image

    def on_load_snapshot(self, snapshot_id, data, now_ms=None):
        """Replace the image with the snapshot's (restart, or the leader sent one)."""
        previous = self.image
        image = self.loader.load_snapshot(snapshot_id, data, now_ms)
        self.snapshots_loaded += 1
        self._publish(image, MetadataUpdate(previous, snapshot_id, 0, image.end_offset - 1))
        return image

    def on_commits(self, commits):
        """Apply committed batches (in offset order, following what was applied)."""
        if not commits:
            return self.image
        previous = self.image
        image = self.loader.apply(commits)
        if image is not previous:
            # From where the previous image ended: a metadata transaction's records may
            # have arrived in earlier calls.
            self._publish(image, MetadataUpdate(previous, None, previous.end_offset,
                                                image.end_offset - 1))
        return image

    # ------------------------------------------------------------------ snapshots

    def maybe_snapshot(self, now_ms, core):
        """Write a snapshot of the image through `core` when one is due; returns its
        SnapshotId, or None when none is due or the core cannot take it yet
        (`MetadataLoader.maybe_snapshot`)."""
        return self.loader.maybe_snapshot(now_ms, core.create_snapshot)

    @property
    def snapshots_written(self):
        return self.loader.snapshots_written

    @property
    def snapshots_deferred(self):
        return self.loader.snapshots_deferred
