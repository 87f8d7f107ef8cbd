"""`MetadataWatch`: the committed metadata log of a running quorum, followed from outside it
as it commits (`kraftcore metadata watch`, docs/admin.md).

    watch = MetadataWatch(("127.0.0.1", 9093), from_beginning=False, note=print)
    await watch.run(lambda change: print(change.text()) or True)

It reads only. It finds the quorum's leader (DescribeCluster for the controllers'
addresses, DescribeQuorum for the leader and its epoch), then sends the leader Fetch for
`__cluster_metadata-0` with replica id -1, as Kafka's consumers do: a fetcher that is no
replica. The leader answers such a Fetch at once with the records it has and its high
watermark, and neither tracks it (it is no observer in DescribeQuorum) nor holds it for a
long poll; so when an answer brings nothing newly committed, the watch asks again after
`poll_interval_ms`. `kraftcore.metadata.watch.LogFollower` turns the answers into changes,
only below each answer's high watermark, so what it reports is final.

* When the leader's log no longer starts where the watch asks (it was cleaned up to a
  snapshot), the answer names the snapshot: the watch fetches it (FetchSnapshot, replica id
  -1) and continues from its end.
* A leader change (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
  BROKER_NOT_AVAILABLE from a resigning leader) or a lost connection: the watch takes the
  leader the answer names, or asks the controllers it knows (the bootstrap first) until one
  names a leader it can reach, says so through `note`, and continues from the same offset.
  Committed records are in every later leader's log, so nothing is missed or repeated.
* `timeout_ms` bounds the wait for the first Fetch answer; a bootstrap that refuses the
  connection at the start, or that is not a controller, fails at once. After the first
  answer the watch looks for a leader for as long as it takes (the caller cancels it).

Failures are `AdminError` (or `MetadataError` for records that do not apply); the network's
errors are handled here. No clock is read except the event loop's, for deadlines.
"""

import asyncio
from typing import NamedTuple

from kraftcore.admin.client import AdminClient, address_text
from kraftcore.errors import AdminError, ConnectError, KraftcoreError, NetworkError
from kraftcore.limits import METADATA_WATCH_SNAPSHOT_BYTES_MAX, RAFT_FETCH_BYTES_MAX
from kraftcore.metadata.watch import LogFollower, SnapshotChunks
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.raft import rpc
from kraftcore.raft.types import SnapshotId

__all__ = ["MetadataWatch", "Leader", "REPLICA_ID", "POLL_INTERVAL_MS_DEFAULT",
           "TIMEOUT_MS_DEFAULT", "REQUEST_TIMEOUT_MS_DEFAULT"]

# Kafka's replica id of a fetcher that is not a replica (a consumer).
REPLICA_ID = -1
POLL_INTERVAL_MS_DEFAULT = 100
TIMEOUT_MS_DEFAULT = 30_000
# Each request; the leader answers a Fetch from a non-replica at once.
REQUEST_TIMEOUT_MS_DEFAULT = 5_000
# Pause before asking the controllers again when none names a reachable leader.
LEADER_RETRY_MS = 200

# Answers that mean "ask the leader of a newer epoch".
_LEADER_MOVED = frozenset((ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                           ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.BROKER_NOT_AVAILABLE))


class Leader(NamedTuple):
    node_id: int
    epoch: int
    address: tuple

    def text(self):
        return f"node {self.node_id} (leader in epoch {self.epoch})"


class _LeaderMoved(Exception):
    """The node asked is not the leader of the epoch asked for (any more)."""

    def __init__(self, reason, leader_id=-1, epoch=-1):
        super().__init__(reason)
        self.reason = reason
        self.leader_id = leader_id
        self.epoch = epoch


class MetadataWatch:
    """Follows the metadata log of the quorum reached at `bootstrap` (host, port); see the
    module docstring. `from_beginning`: report the whole log (a snapshot it starts with as
    one summary line) instead of what commits from now on. `note(text)` hears what the
    watch itself does (the leader it follows, a leader change); `follower` is the
    `LogFollower` (its `image` is the committed image so far)."""

    def __init__(self, bootstrap, *, from_beginning=False, timeout_ms=TIMEOUT_MS_DEFAULT,
                 poll_interval_ms=POLL_INTERVAL_MS_DEFAULT,
                 request_timeout_ms=REQUEST_TIMEOUT_MS_DEFAULT, note=None,
                 connection_options=None):
        for name, value in (("timeout_ms", timeout_ms), ("poll_interval_ms", poll_interval_ms),
                            ("request_timeout_ms", request_timeout_ms)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, not {value}")
        self.bootstrap = tuple(bootstrap)
        self.timeout_ms = timeout_ms
        self.poll_interval_ms = poll_interval_ms
        self.follower = LogFollower(0 if from_beginning else None)
        self.leader = None
        self._note = note or (lambda text: None)
        self._admin = AdminClient(self.bootstrap, min(request_timeout_ms, timeout_ms),
                                  connection_options)
        self._controllers = {}  # node id -> (host, port), from DescribeCluster
        self._announced = False
        self._lost = None  # the leader lost, until another one (or it) answers a Fetch
        self._lost_at = None  # the offset the watch had reached then

    async def close(self):
        await self._admin.close()

    async def run(self, on_change):
        """Follow the log, calling `on_change(change)` for each change in order, until it
        returns False (then return) or the task is cancelled. Raises `AdminError` when no
        leader answers within `timeout_ms` at the start, `MetadataError` for records that
        do not apply."""
        try:
            await self._run(on_change)
        finally:
            await self.close()

    async def _run(self, on_change):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        self.leader = await self._find_leader(deadline, first=True)
        answered = False
        while True:
            try:
                changes, taken = await self._follow_once()
            except (_LeaderMoved, NetworkError, OSError) as exc:
                if isinstance(exc, _LeaderMoved):
                    reason, leader_id, epoch = exc.reason, exc.leader_id, exc.epoch
                else:
                    reason, leader_id, epoch = f"stopped answering ({exc})", -1, -1
                if not answered and loop.time() >= deadline:
                    raise AdminError(f"no Fetch answer from the quorum's leader within "
                                     f"{self.timeout_ms} ms: {self.leader.text()} "
                                     f"{reason}") from None
                await self._move(reason, None if answered else deadline, leader_id, epoch)
                continue
            answered = True
            if self._lost is not None:
                again = " again" if self.leader == self._lost else ""
                self._lost = None
                self._note(f"following {self.leader.text()}{again} from offset "
                           f"{self._lost_at}")
            if self.follower.live and not self._announced:
                self._announced = True
                self._note(f"following {self.leader.text()}; changes from offset "
                           f"{self.follower.print_from} on")
            for change in changes:
                if on_change(change) is False:
                    return
            if not taken:
                await asyncio.sleep(self.poll_interval_ms / 1000)

    # ------------------------------------------------------------------ the log

    async def _follow_once(self):
        """One Fetch (and the snapshot it points to, if any): (changes, batches taken)."""
        leader, follower = self.leader, self.follower
        body = rpc.fetch_request(None, REPLICA_ID, leader.epoch, follower.next_offset,
                                 follower.last_epoch, 0, RAFT_FETCH_BYTES_MAX)
        response = await self._admin.send(leader.address, m.FetchRequest, lambda v: body)
        part = rpc.fetch_response_partition(response)
        where = leader.text()
        if part is None:
            raise AdminError(f"{where} answered Fetch without the metadata partition "
                             f"(error {_error(response.error_code)})")
        error = response.error_code or part.error_code
        current = part.current_leader
        if error in _LEADER_MOVED:
            raise _LeaderMoved(f"answered {_error(error)}", current.leader_id,
                               current.leader_epoch)
        if error:
            raise AdminError(f"{where} refused Fetch at offset {follower.next_offset}: "
                             f"{_error(error)}")
        if current.leader_epoch != leader.epoch or current.leader_id != leader.node_id:
            raise _LeaderMoved(f"names node {current.leader_id} leader in epoch "
                               f"{current.leader_epoch}", current.leader_id,
                               current.leader_epoch)
        follower.on_high_watermark(part.high_watermark)
        diverging = part.diverging_epoch
        if diverging is not None and diverging.epoch >= 0:
            # Committed records are in every leader's log: a leader that does not hold
            # them belongs to another log.
            raise AdminError(f"{where} says its log diverges from offset "
                             f"{diverging.end_offset} (epoch {diverging.epoch}) when asked "
                             f"for committed offset {follower.next_offset}; is it the same "
                             "cluster?")
        snapshot = part.snapshot_id
        if snapshot is not None and snapshot.end_offset >= 0:
            snapshot_id = SnapshotId(snapshot.end_offset, snapshot.epoch)
            data = await self._fetch_snapshot(snapshot_id)
            if data is None:
                return [], 0
            return follower.on_snapshot(snapshot_id, data), 1
        return follower.on_records(part.records, part.high_watermark)

    async def _fetch_snapshot(self, snapshot_id):
        """The snapshot's bytes, or None when the leader no longer holds it."""
        leader = self.leader
        chunks = SnapshotChunks(snapshot_id, METADATA_WATCH_SNAPSHOT_BYTES_MAX)
        while True:
            body = rpc.fetch_snapshot_request(None, REPLICA_ID, leader.epoch, snapshot_id,
                                              chunks.position, RAFT_FETCH_BYTES_MAX)
            response = await self._admin.send(leader.address, m.FetchSnapshotRequest,
                                              lambda v: body)
            part = rpc.fetch_snapshot_partition(response)
            if part is None:
                raise AdminError(f"{leader.text()} answered FetchSnapshot without the "
                                 f"metadata partition (error {_error(response.error_code)})")
            error = response.error_code or part.error_code
            current = part.current_leader
            if error in _LEADER_MOVED:
                raise _LeaderMoved(f"answered {_error(error)}", current.leader_id,
                                   current.leader_epoch)
            if error in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
                return None  # replaced meanwhile: the next Fetch answer names the new one
            if error:
                raise AdminError(f"{leader.text()} refused FetchSnapshot: {_error(error)}")
            data = chunks.add(part.size, part.position, part.unaligned_records or b"")
            if data is not None:
                return data

    # ------------------------------------------------------------------ the leader

    async def _move(self, reason, deadline, leader_id=-1, epoch=-1):
        """Leave the current leader (`reason`: what it did) for the one it named, when its
        address is known and its epoch is newer, else for the one the controllers name.
        The first failure of a run of them is noted; the answer of the next leader ends it
        (`_run` notes that)."""
        old = self.leader
        if self._lost is None:
            self._lost, self._lost_at = old, self.follower.next_offset
            self._note(f"{old.text()} {reason}; looking for the quorum's leader")
        address = self._controllers.get(leader_id)
        if leader_id >= 0 and address is not None and epoch > old.epoch:
            self.leader = Leader(leader_id, epoch, address)
            return
        await asyncio.sleep(LEADER_RETRY_MS / 1000)
        self.leader = await self._find_leader(deadline)

    def _addresses(self):
        seen = [self.bootstrap]
        seen += [a for _, a in sorted(self._controllers.items()) if a not in seen]
        return seen

    async def _find_leader(self, deadline, first=False):
        """The leader the controllers name (the bootstrap asked first), once one names a
        leader whose address they list; asked again every LEADER_RETRY_MS until `deadline`
        (event loop time; None: no end)."""
        loop = asyncio.get_running_loop()
        last = "no controller answered"
        while True:
            for address in self._addresses():
                try:
                    leader = await self._ask_leader(address)
                except (KraftcoreError, OSError) as exc:
                    if first and not self._controllers and isinstance(exc, (ConnectError,
                                                                            AdminError)):
                        # The bootstrap cannot be reached, or is no controller: say so now.
                        raise AdminError(str(exc)) from None
                    last = f"{address_text(address)}: {exc}"
                    continue
                if leader is not None:
                    return leader
                last = f"{address_text(address)} knows no leader yet"
            if deadline is not None and loop.time() >= deadline:
                raise AdminError(f"no quorum leader answered within {self.timeout_ms} ms "
                                 f"({last})")
            await asyncio.sleep(LEADER_RETRY_MS / 1000)

    async def _ask_leader(self, address):
        """What the controller at `address` says: the leader (with its address), or None."""
        cluster = await self._admin.describe_controllers(address)
        self._controllers.update(cluster.controllers)
        response = await self._admin.send(address, m.DescribeQuorumRequest,
                                          lambda v: rpc.describe_quorum_request())
        part = rpc.describe_quorum_partition(response)
        if part is None or response.error_code:
            return None
        if part.error_code not in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            return None
        leader_id = part.leader_id
        if leader_id < 0 or leader_id not in self._controllers:
            return None
        return Leader(leader_id, part.leader_epoch, self._controllers[leader_id])


def _error(code):
    return f"{error_name(code)} ({code})"
