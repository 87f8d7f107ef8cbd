"""`RaftCore`: Kafka's Raft for the metadata quorum (KIP-595, pre-vote KIP-996, snapshots
KIP-630) as a sans-I/O state machine. It reads no clock, socket, file or global random
generator: time comes in as `now_ms`, randomness from the `random.Random` it is given, the
log through `RaftStorage`, and everything it wants done goes out in a `Ready`
(`kraftcore.raft.types` says in which order a driver acts on one).

Inputs: `handle(message, now_ms)` for every request and response, `poll(now_ms)` when the
deadline it last returned has passed, `propose(values)` on the leader, `resign(now_ms)`,
`create_snapshot(end_offset, data)` from the state machine, `on_persisted(number)`.

What the core guarantees (kafka-facts §7, §10):

* a vote, an epoch or a leader is acted on only in messages sent after the election state
  that records it (durable roles only; see `kraftcore.raft.quorum`);
* a voter reports a fetch offset only in a Fetch sent after the records below it were
  flushed, and the leader counts its own log only up to its flushed end;
* the high watermark is a majority's offset, moves forward only, and passes the leader's
  epoch start first (`kraftcore.raft.leader`); a follower's is min(leader's, log end);
* a follower never truncates below its high watermark (`RaftStateError` instead);
* the log start offset moves only to a snapshot's end offset;
* nothing another node sends can make it store an epoch above `limits.RAFT_EPOCH_MAX`, or
  jump further than `epoch_ceiling()`; a Vote, BeginQuorumEpoch or EndQuorumEpoch acts
  only when it comes from another voter (Kafka's static quorum); a value outside its range
  (an epoch, an offset, an id) is refused before anything is granted or persisted, and a
  request never raises (docs/raft.md, "Epochs and ids from other nodes").

One request per destination is in flight at a time; a response whose correlation id is not
the one outstanding (a duplicate, or the answer to a request given up) is ignored, so
duplicated and reordered deliveries are harmless.
"""

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, InvalidOffsetError,
                              NotLeaderError, RaftStateError)
from kraftcore.layout import INT32_MAX, INT64_MAX
from kraftcore.limits import (RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_MAX,
                              RAFT_EPOCH_REQUEST_STEP_MAX, RAFT_EPOCH_STEP_MAX,
                              RAFT_OBSERVERS_MAX)
from kraftcore.raft.control import LeaderChangeMessage, encode_control_batch
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.raft import rpc
from kraftcore.raft.config import RaftConfig
from kraftcore.raft.leader import LeaderState
from kraftcore.raft.quorum import QuorumState
from kraftcore.raft.types import (BOOTSTRAP_SNAPSHOT_ID, NO_ID, LeaderAndEpoch, RaftMessage,
                                  Ready, SnapshotId)

NONE = ErrorCode.NONE
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
BROKER_NOT_AVAILABLE = ErrorCode.BROKER_NOT_AVAILABLE
INCONSISTENT_CLUSTER_ID = ErrorCode.INCONSISTENT_CLUSTER_ID
INVALID_VOTER_KEY = ErrorCode.INVALID_VOTER_KEY
INCONSISTENT_VOTER_SET = ErrorCode.INCONSISTENT_VOTER_SET
SNAPSHOT_NOT_FOUND = ErrorCode.SNAPSHOT_NOT_FOUND
POSITION_OUT_OF_RANGE = ErrorCode.POSITION_OUT_OF_RANGE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

VOTE, BEGIN_EPOCH, END_EPOCH, FETCH, FETCH_SNAPSHOT, DESCRIBE = 52, 53, 54, 1, 59, 55
_NEVER_MS = 1 << 62


class _Inflight:
    __slots__ = ("correlation_id", "deadline_ms", "tag")

    def __init__(self, correlation_id, deadline_ms, tag):
        self.correlation_id = correlation_id
        self.deadline_ms = deadline_ms
        self.tag = tag


class _Parked:
    """A Fetch the leader holds until it has something to say or `deadline_ms`."""

    __slots__ = ("message", "replica", "fetch_offset", "deadline_ms")

    def __init__(self, message, replica, fetch_offset, deadline_ms):
        self.message = message
        self.replica = replica
        self.fetch_offset = fetch_offset
        self.deadline_ms = deadline_ms


class RaftCore:
    def __init__(self, node_id, voters, storage, election_state=None, config=None, rng=None,
                 now_ms=0):
        if rng is None:
            raise ValueError("RaftCore needs a seeded random.Random (rng=...)")
        voters = frozenset(voters)
        if not voters:
            raise ValueError("the quorum needs at least one voter")
        self.node_id = node_id
        self.config = config or RaftConfig()
        self.storage = storage
        self.rng = rng
        self.quorum = QuorumState(node_id, voters)
        self.is_voter = self.quorum.is_voter
        self._flushes = self.is_voter or self.config.observers_flush
        self._now = now_ms
        self._outbox = []
        self._correlation = 0
        self._inflight = {}
        self._backoff_until = {}
        self._parked = {}
        self._ready_number = 0
        self._pending_flushes = []  # (ready number, flush offset), oldest first
        # The number of the last Ready whose messages wait for its persistence, until the
        # driver has persisted it; None when every Ready since has `send_first`.
        self._held_back = None
        # What the log holds at startup may not all be on disk (a process crash keeps
        # unsynced writes): the first Ready flushes it before any message goes out.
        self._unflushed = True
        self._durable_end = storage.log_start_offset
        self.high_watermark = None
        self._hw_changed = False
        self._election_retries = 0
        self._observer_cursor = rng.randrange(len(voters))
        self._download = None
        self._download_size = None
        self._reported_leader = None
        self._load_snapshot = None
        latest = storage.latest_snapshot_id()
        if latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID and self._snapshot_ahead(latest):
            storage.truncate_fully_and_start_at(latest)
            self._durable_end = storage.log_start_offset
        if storage.log_start_offset > 0 and latest is None:
            raise RaftStateError(
                f"node {node_id}: the log starts at {storage.log_start_offset} but there is "
                "no snapshot there")
        if latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
            self._load_snapshot = latest
        self._applied = latest.end_offset if latest is not None else 0
        if self._applied < storage.log_start_offset:
            self._applied = storage.log_start_offset
        self.quorum.initialize(election_state, storage.last_fetched_epoch(),
                               self._election_deadline(now_ms))
        if voters == {node_id} and self.quorum.role != "leader":
            self._start_election(now_ms, pre_vote=False)

    # ================================================================ queries

    @property
    def role(self):
        return self.quorum.role

    @property
    def epoch(self):
        return self.quorum.epoch

    @property
    def leader_id(self):
        return self.quorum.leader_id() if self.quorum.role != "resigned" else None

    @property
    def voted_id(self):
        return self.quorum.state.voted_id

    @property
    def log_end_offset(self):
        return self.storage.log_end_offset

    @property
    def voters(self):
        return self.quorum.voters

    @property
    def epoch_start_offset(self):
        """On the leader, the offset of its epoch's LeaderChange record (everything below it
        is committed once that record is); None on every other role. A state machine on the
        leader may act as leader once it has applied the log past this offset."""
        state = self.quorum.state
        return state.epoch_start_offset if state.name == "leader" else None

    def epoch_ceiling(self, step=RAFT_EPOCH_STEP_MAX):
        """The largest epoch one message may move this node to: any epoch up to
        RAFT_EPOCH_ACCEPTED_MAX (as Kafka adopts any epoch it hears of), beyond it at most
        `step` past its own — RAFT_EPOCH_STEP_MAX for a response, RAFT_EPOCH_REQUEST_STEP_MAX
        for a request — never past RAFT_EPOCH_MAX (kraftcore.limits)."""
        return min(RAFT_EPOCH_MAX, max(RAFT_EPOCH_ACCEPTED_MAX, self.quorum.epoch + step))

    def requests_in_flight(self):
        """{destination: correlation id} of the requests this node waits for: the only
        responses it acts on."""
        return {dest: flight.correlation_id for dest, flight in self._inflight.items()}

    def __repr__(self):
        return (f"RaftCore(node={self.node_id}, {self.quorum.state!r}, hw={self.high_watermark}, "
                f"leo={self.storage.log_end_offset})")

    # ================================================================ timers

    def _election_deadline(self, now_ms):
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self.rng.randrange(timeout)

    def _election_backoff_ms(self):
        retries = max(self._election_retries, 1)
        bound = 1 << (min(20, retries - 1) + 1)
        return min(self.config.election_backoff_base_ms * self.rng.randrange(bound),
                   self.config.election_backoff_ms_max)

    def _resignation_backoff_ms(self, preferred):
        """Kafka's strict exponential backoff: the first preferred successor runs at once,
        the others later the further down the list they are."""
        limit = self.config.election_backoff_ms_max
        if self.node_id not in preferred:
            return limit
        position = preferred.index(self.node_id)
        if position == 0:
            return 0
        return min(limit, (limit >> (len(preferred) - 1)) << (position - 1))

    def poll(self, now_ms):
        """Fire every timer due at `now_ms`; return the next deadline (absolute ms).

        Any input can move the deadline earlier: a driver calls `poll` after each batch
        of inputs (it is cheap when nothing is due) and again at the deadline it returns."""
        self._now = now_ms
        for dest in [d for d, f in self._inflight.items() if f.deadline_ms <= now_ms]:
            del self._inflight[dest]
            self._backoff(dest)
            self._maybe_rotate_observer()
        state = self.quorum.state
        role = state.name
        if role == "leader":
            self._poll_leader(state, now_ms)
        elif state.deadline_ms is not None and now_ms >= state.deadline_ms:
            if role == "follower":
                self._on_fetch_timeout(now_ms)
            elif role == "prospective":
                self._on_election_lost(now_ms)
            elif role == "candidate":
                if state.backing_off:
                    self._start_election(now_ms)
                else:
                    self._on_election_lost(now_ms)
            elif role == "resigned":
                self._transition_to_unattached(state.epoch + 1)
            elif self.is_voter:  # unattached or voted
                self._start_election(now_ms)
            else:  # an observer that found no leader in a fetch timeout: ask another voter
                self._observer_cursor += 1
                state.deadline_ms = now_ms + self.config.fetch_timeout_ms
        self._maybe_send_requests()
        return self._next_deadline()

    def _next_deadline(self):
        state = self.quorum.state
        deadline = _NEVER_MS if state.deadline_ms is None else state.deadline_ms
        for flight in self._inflight.values():
            deadline = min(deadline, flight.deadline_ms)
        for until in self._backoff_until.values():
            if until > self._now:
                deadline = min(deadline, until)
        if state.name == "leader":
            if state.check_quorum_deadline_ms is not None:
                deadline = min(deadline, state.check_quorum_deadline_ms)
            for replica in state.others():
                voter = replica.replica_id
                if not replica.acknowledged and voter not in self._inflight:
                    deadline = min(deadline, max(replica.begin_epoch_due_ms,
                                                 self._backoff_until.get(voter, 0)))
            for parked in self._parked.values():
                deadline = min(deadline, parked.deadline_ms)
        return deadline

    # ================================================================ outbound

    def _send(self, destination, body, tag=None):
        self._correlation += 1
        cid = self._correlation
        self._inflight[destination] = _Inflight(
            cid, self._now + self.config.request_timeout_ms, tag)
        self._outbox.append(RaftMessage(self.node_id, destination, cid, body))

    def _respond(self, request, body):
        self._outbox.append(RaftMessage(self.node_id, request.source, request.correlation_id,
                                        body))

    def _can_send(self, destination):
        return (destination not in self._inflight
                and self._backoff_until.get(destination, 0) <= self._now)

    def _backoff(self, destination):
        self._backoff_until[destination] = self._now + self.config.retry_backoff_ms

    def _maybe_rotate_observer(self):
        """An observer still looking for the leader moves on to the next voter after a
        failed or fruitless request (Kafka rotates over its bootstrap servers)."""
        if not self.is_voter and self.quorum.role == "unattached":
            self._observer_cursor += 1

    def _maybe_send_requests(self):
        state = self.quorum.state
        role = state.name
        if self._parked and role != "leader":
            self._flush_parked()
        if role in ("prospective", "candidate"):
            if role == "candidate" and state.backing_off:
                return
            pre_vote = role == "prospective"
            last_epoch = self.storage.last_fetched_epoch()
            leo = self.storage.log_end_offset
            for voter in state.unrecorded():
                if self._can_send(voter):
                    self._send(voter, rpc.vote_request(
                        self.config.cluster_id, voter, state.epoch, self.node_id, last_epoch,
                        leo, pre_vote), tag=state)
        elif role == "follower":
            self._maybe_send_fetch(state.leader_id, state)
        elif role == "leader":
            self._send_begin_quorum_epoch(state)
        elif role == "unattached" and not self.is_voter:
            voters = sorted(self.quorum.voters)
            target = voters[self._observer_cursor % len(voters)]
            self._maybe_send_fetch(target, state)

    def _maybe_send_fetch(self, target, state):
        if not self._can_send(target):
            return
        if self._download is not None:
            self._send(target, rpc.fetch_snapshot_request(
                self.config.cluster_id, self.node_id, state.epoch, self._download.snapshot_id,
                self._download.size, self.config.fetch_bytes_max), tag=state)
            return
        self._send(target, rpc.fetch_request(
            self.config.cluster_id, self.node_id, state.epoch, self.storage.log_end_offset,
            self.storage.last_fetched_epoch(), self.config.fetch_wait_ms_max,
            self.config.fetch_bytes_max), tag=state)

    # ================================================================ transitions

    def _reset_role(self):
        self._inflight.clear()
        self._backoff_until.clear()
        if self._download is not None:
            self._download.abort()
            self._download = None

    def _transition_to_unattached(self, epoch, deadline_ms=None):
        if deadline_ms is None:
            state = self.quorum.state
            if state.name in ("unattached", "voted", "prospective", "candidate") \
                    and state.deadline_ms is not None:
                # Keep the election timer running (as Kafka does): a node that restarted it
                # on every higher epoch it sees could be kept from ever standing by a
                # less up-to-date candidate that keeps bumping the epoch.
                deadline_ms = state.deadline_ms
            else:
                deadline_ms = self._election_deadline(self._now)
        self._reset_role()
        self.quorum.transition_to_unattached(epoch, deadline_ms)

    def _transition_to_follower(self, epoch, leader_id):
        self._reset_role()
        self._election_retries = 0
        self.quorum.transition_to_follower(epoch, leader_id,
                                           self._now + self.config.fetch_timeout_ms)

    def _start_election(self, now_ms, pre_vote=None):
        if pre_vote is None:
            pre_vote = self.config.pre_vote
        self._reset_role()
        if pre_vote:
            self.quorum.transition_to_prospective(self._election_deadline(now_ms))
        else:
            self._election_retries += 1
            self.quorum.transition_to_candidate(self._election_deadline(now_ms))
        self._maybe_won(now_ms)

    def _on_election_lost(self, now_ms):
        """A pre-vote or vote that was rejected or timed out: back off before the next."""
        state = self.quorum.state
        backoff = self._election_backoff_ms()
        if state.name == "prospective":
            self._reset_role()
            if state.leader_id is not None:
                self.quorum.transition_to_follower(state.epoch, state.leader_id,
                                                   now_ms + self.config.fetch_timeout_ms)
            else:
                self.quorum.transition_to_unattached(state.epoch, now_ms + backoff)
        else:
            state.backing_off = True
            state.deadline_ms = now_ms + backoff

    def _maybe_won(self, now_ms):
        state = self.quorum.state
        if state.name not in ("prospective", "candidate") or not state.granted():
            return
        if state.name == "prospective":
            # Pre-votes still in flight are moot: the candidate asks every voter afresh.
            self._reset_role()
            self._election_retries += 1
            self.quorum.transition_to_candidate(self._election_deadline(now_ms))
            self._maybe_won(now_ms)
            return
        self._become_leader(state, now_ms)

    def _become_leader(self, candidate, now_ms):
        self._reset_role()
        self._election_retries = 0
        leo = self.storage.log_end_offset
        leader = LeaderState(candidate.epoch, self.node_id, self.quorum.voters, leo,
                             candidate.granting(), now_ms, self.config.check_quorum_timeout_ms)
        self.quorum.transition_to_leader(leader)
        change = LeaderChangeMessage(
            version=0, leader_id=self.node_id,
            voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(self.quorum.voters)],
            granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in leader.granting])
        batch = encode_control_batch([change], base_offset=leo, leader_epoch=leader.epoch,
                                     timestamp=now_ms)
        self.storage.append_as_leader(batch, leader.epoch)
        self._unflushed = True
        leader.update_local_end(min(self._durable_end, leo), now_ms)

    def resign(self, now_ms):
        """Step down gracefully (shutdown): EndQuorumEpoch to every voter, most up-to-date
        first in the preferred successors. Does nothing unless leader."""
        self._now = now_ms
        state = self.quorum.state
        if state.name != "leader":
            return
        self._resign(state, now_ms)
        self._maybe_send_requests()

    def _resign(self, leader, now_ms):
        preferred = leader.preferred_successors()
        self._reset_role()
        self.quorum.transition_to_resigned(self._election_deadline(now_ms), preferred)
        for voter in preferred:
            self._send(voter, rpc.end_quorum_epoch_request(
                self.config.cluster_id, self.node_id, leader.epoch, preferred))

    def _on_fetch_timeout(self, now_ms):
        if self.is_voter:
            self._start_election(now_ms)
        else:
            # An observer forgets the leader and asks the voters again, in turn.
            self._observer_cursor += 1
            self._reset_role()
            self.quorum.forget_leader(self._now + self.config.fetch_timeout_ms)

    # ================================================================ inbound

    def handle(self, message, now_ms):
        """Process one request or response addressed to this node."""
        self._now = now_ms
        body = message.body
        key = body.api_key
        if body.kind == "request":
            handler = self._REQUEST_HANDLERS.get(key)
            if handler is not None:
                handler(self, message, body)
        else:
            flight = self._inflight.get(message.source)
            if flight is None or flight.correlation_id != message.correlation_id:
                return  # a duplicate, or the answer to a request given up
            del self._inflight[message.source]
            handler = self._RESPONSE_HANDLERS.get(key)
            if handler is not None:
                handler(self, message, body, flight.tag)
        self._maybe_send_requests()

    def _cluster_ok(self, cluster_id):
        return cluster_id is None or self.config.cluster_id is None or \
            cluster_id == self.config.cluster_id

    def _response_partition(self, message, body, part, current=False, possible=None):
        """The partition of a response that needs handling beyond what every response
        teaches (`_handle_common_response`), else None. With `current`, the leader and
        epoch are in the partition's CurrentLeader (Fetch, FetchSnapshot). `possible(part,
        error)`, when given, checks the response's own fields first: a response holding a
        value no peer could send is dropped whole, before any of it is acted on."""
        if part is None:
            return None
        leader = part.current_leader if current else part
        error = body.error_code or part.error_code
        if possible is not None and not possible(part, error):
            self._backoff(message.source)
            return None
        if self._handle_common_response(message.source, error, leader.leader_id,
                                        leader.leader_epoch):
            return None
        return part

    def _handle_common_response(self, source, error, leader_id, epoch):
        """Kafka's `maybeHandleCommonResponse`: learn a newer epoch or leader from any
        response. True when the response needs no further handling.

        An epoch outside [0, RAFT_EPOCH_MAX] or a leader that is not a voter cannot come
        from a peer of this static quorum: the response is dropped. An epoch above what one
        message may move this node to (`epoch_ceiling`) moves it only that far, with no
        leader: a voter far behind climbs in a few round trips, and no single answer can
        spend the epoch space."""
        local = self.quorum.epoch
        if not 0 <= epoch <= RAFT_EPOCH_MAX or (
                leader_id != NO_ID and leader_id not in self.quorum.voters):
            self._backoff(source)
            self._maybe_rotate_observer()
            return True
        if epoch < local or error == UNKNOWN_LEADER_EPOCH:
            self._backoff(source)
            self._maybe_rotate_observer()
            return True
        ceiling = self.epoch_ceiling()
        if epoch > ceiling:
            self._transition_to_unattached(ceiling)
            return True
        leader = None if leader_id == NO_ID else leader_id
        known = self.quorum.leader_id()
        if epoch > local or (leader is not None and known is None):
            if leader is not None:
                self._transition_to_follower(epoch, leader)
            elif epoch > local:
                self._transition_to_unattached(epoch)
            return error != NONE
        if leader is not None and known is not None and leader != known:
            raise RaftStateError(
                f"node {self.node_id}: epoch {epoch} has leader {known}, but node {source} "
                f"names {leader}")
        if error != NONE:
            self._backoff(source)
            self._maybe_rotate_observer()
            return True
        return False

    # ---------------------------------------------------------------- epochs and voters

    def _voter_only_error(self, sender, epoch):
        """Kafka's `validateVoterOnlyRequest` of a static quorum (before KIP-853), with
        kraftcore's epoch bound: the error a Vote, BeginQuorumEpoch or EndQuorumEpoch from
        `sender` at `epoch` gets before it may change anything, else None. Only voters
        elect and lead, and only voters take part: anything else answers
        INCONSISTENT_VOTER_SET, so no request from a non-voter is ever granted or
        persisted. A request naming this node as its sender did not come from a peer."""
        if epoch < self.quorum.epoch:
            return FENCED_LEADER_EPOCH
        if not 0 <= sender <= INT32_MAX or sender == self.node_id:
            return INVALID_REQUEST
        if not self.is_voter or sender not in self.quorum.voters:
            return INCONSISTENT_VOTER_SET
        if epoch > self.epoch_ceiling(RAFT_EPOCH_REQUEST_STEP_MAX):
            return INVALID_REQUEST
        return None

    # ---------------------------------------------------------------- Vote

    def _handle_vote_request(self, message, body):
        if not self._cluster_ok(body.cluster_id):
            return self._respond(message, rpc.vote_response(
                INCONSISTENT_CLUSTER_ID, None, self.quorum.epoch, False))
        part = rpc.vote_partition(body)
        if part is None:
            return self._respond(message, rpc.vote_response(
                INVALID_REQUEST, None, self.quorum.epoch, False))
        epoch, candidate, pre_vote = part.replica_epoch, part.replica_id, part.pre_vote
        last_epoch, last_offset = part.last_offset_epoch, part.last_offset
        if (not 0 <= last_offset <= INT64_MAX or last_epoch < 0
                or (last_epoch > epoch if pre_vote else last_epoch >= epoch)):
            return self._vote_answer(message, False, INVALID_REQUEST)
        error = self._voter_only_error(candidate, epoch)
        if error is not None:
            return self._vote_answer(message, False, error)
        if epoch > self.quorum.epoch:
            self._transition_to_unattached(epoch)
        if body.voter_id >= 0 and body.voter_id != self.node_id:
            return self._vote_answer(message, False, INVALID_VOTER_KEY)
        granted = self._can_grant(candidate, pre_vote, last_epoch, last_offset)
        if granted and not pre_vote:
            state = self.quorum.state
            if state.voted_id is None:
                self.quorum.transition_to_voted(epoch, candidate,
                                                self._election_deadline(self._now))
        self._vote_answer(message, granted, NONE)

    def _vote_answer(self, message, granted, error):
        self._respond(message, rpc.vote_response(
            NONE, self.leader_id, self.quorum.epoch, granted, partition_error=error))

    def _can_grant(self, candidate, pre_vote, last_epoch, last_offset):
        """The grant table of kafka-facts §7.3 (KIP-595, KIP-996)."""
        if not self.is_voter or candidate == self.node_id:
            return False
        up_to_date = (last_epoch, last_offset) >= (
            self.storage.last_fetched_epoch(), self.storage.log_end_offset)
        state = self.quorum.state
        role = state.name
        if role in ("leader", "resigned"):
            return False
        if pre_vote:
            if role == "follower":
                return up_to_date and not state.fetched
            return up_to_date
        if role in ("follower", "candidate"):
            return False
        if state.voted_id is not None:
            return state.voted_id == candidate
        if state.leader_id is not None:
            return False
        return up_to_date

    def _handle_vote_response(self, message, body, tag):
        part = self._response_partition(message, body, rpc.vote_response_partition(body))
        if part is None:
            return
        state = self.quorum.state
        if tag is not state or state.name not in ("prospective", "candidate"):
            return
        state.record(message.source, part.vote_granted)
        if state.granted():
            self._maybe_won(self._now)
        elif state.lost() and not getattr(state, "backing_off", False):
            self._on_election_lost(self._now)

    # ---------------------------------------------------------------- Begin/EndQuorumEpoch

    def _epoch_request_part(self, message, body, response_cls):
        if not self._cluster_ok(body.cluster_id):
            self._respond(message, rpc.quorum_epoch_response(
                response_cls, INCONSISTENT_CLUSTER_ID, None, self.quorum.epoch))
            return None
        part = rpc.quorum_epoch_partition(body)
        if part is None:
            self._respond(message, rpc.quorum_epoch_response(
                response_cls, INVALID_REQUEST, None, self.quorum.epoch))
            return None
        error = self._voter_only_error(part.leader_id, part.leader_epoch)
        if error is None and part.leader_epoch == 0:
            error = INVALID_REQUEST  # every election bumps the epoch: epoch 0 has no leader
        if error is None and getattr(body, "voter_id", -1) >= 0 \
                and body.voter_id != self.node_id:
            error = INVALID_VOTER_KEY  # meant for another voter
        if error is not None:
            self._respond(message, rpc.quorum_epoch_response(
                response_cls, NONE, self.leader_id, self.quorum.epoch, partition_error=error))
            return None
        return part

    def _handle_begin_quorum_epoch_request(self, message, body):
        cls = m.BeginQuorumEpochResponse
        part = self._epoch_request_part(message, body, cls)
        if part is None:
            return
        epoch, leader = part.leader_epoch, part.leader_id
        state = self.quorum.state
        if epoch == state.epoch and state.leader_id not in (None, leader):
            # This epoch's leader is known (perhaps this node): a second one cannot be.
            # Refused, never fatal: what a request claims is no proof (a response that
            # says so is, see _handle_common_response).
            return self._respond(message, rpc.quorum_epoch_response(
                cls, NONE, self.leader_id, state.epoch, partition_error=INVALID_REQUEST))
        if not (state.name == "follower" and state.epoch == epoch and state.leader_id == leader):
            self._transition_to_follower(epoch, leader)
        self._respond(message, rpc.quorum_epoch_response(cls, NONE, leader, epoch))

    def _handle_end_quorum_epoch_request(self, message, body):
        cls = m.EndQuorumEpochResponse
        part = self._epoch_request_part(message, body, cls)
        if part is None:
            return
        epoch, leader = part.leader_epoch, part.leader_id
        preferred = rpc.preferred_candidates(part)
        backoff = self._resignation_backoff_ms(preferred)
        if epoch > self.quorum.epoch:
            self._transition_to_unattached(epoch, self._now + backoff)
        else:
            state = self.quorum.state
            if state.name == "follower" and state.leader_id == leader:
                # The leader is leaving: stop fetching from it, grant pre-votes again, and
                # stand for election after the backoff its preference order gives us.
                state.fetched = False
                state.deadline_ms = min(state.deadline_ms, self._now + backoff)
            elif state.name in ("unattached", "voted") and state.deadline_ms is not None:
                state.deadline_ms = min(state.deadline_ms, self._now + backoff)
        self._respond(message, rpc.quorum_epoch_response(cls, NONE, self.leader_id,
                                                         self.quorum.epoch))

    def _handle_quorum_epoch_response(self, message, body, tag):
        part = self._response_partition(message, body, rpc.quorum_epoch_partition(body))
        if part is None:
            return
        state = self.quorum.state
        if body.api_key == BEGIN_EPOCH and state.name == "leader":
            replica = state.voters.get(message.source)
            if replica is not None:
                replica.acknowledged = True

    # ---------------------------------------------------------------- Fetch (leader side)

    def _fetch_error(self, message, error, top_error=NONE):
        self._respond(message, rpc.fetch_response(
            error, self.leader_id, self.quorum.epoch, top_error=top_error,
            high_watermark=-1 if self.high_watermark is None else self.high_watermark,
            log_start_offset=self.storage.log_start_offset))

    def _leader_check(self, request_epoch):
        """The error a leader-only request at `request_epoch` gets, or None."""
        state = self.quorum.state
        if request_epoch < state.epoch:
            return FENCED_LEADER_EPOCH
        if request_epoch > state.epoch:
            return UNKNOWN_LEADER_EPOCH
        if state.name == "resigned":
            return BROKER_NOT_AVAILABLE
        if state.name != "leader":
            return NOT_LEADER
        return None

    def _handle_fetch_request(self, message, body):
        if not self._cluster_ok(body.cluster_id):
            return self._fetch_error(message, NONE, top_error=INCONSISTENT_CLUSTER_ID)
        part = rpc.fetch_partition(body)
        if part is None:
            return self._fetch_error(message, NONE, top_error=INVALID_REQUEST)
        offset, last_epoch = part.fetch_offset, part.last_fetched_epoch
        if (body.max_wait_ms < 0 or not 0 <= offset <= INT64_MAX or last_epoch < 0
                or last_epoch > part.current_leader_epoch):
            return self._fetch_error(message, INVALID_REQUEST)
        error = self._leader_check(part.current_leader_epoch)
        if error is not None:
            return self._fetch_error(message, error)
        leader = self.quorum.state
        replica_id = rpc.fetch_replica_id(body)
        if replica_id == self.node_id or replica_id > INT32_MAX:
            # The leader's own entry tracks its durable log; nobody else may move it.
            return self._fetch_error(message, INVALID_REQUEST)
        if replica_id < 0:
            # Not a replica (Kafka ignores such a fetcher's offsets): answered at once,
            # neither tracked nor held.
            outcome, value = self._validate_offset_and_epoch(offset, last_epoch)
            if outcome != "valid":
                return self._respond(message, self._redirect_answer(leader, outcome, value))
            data = b""
            if offset < self.storage.log_end_offset:
                data = self.storage.read(offset, self.config.fetch_bytes_max)
            return self._respond(message, self._fetch_answer(leader, records=data))
        leader.on_voter_fetch(replica_id, self._now)
        superseded = self._parked.pop(replica_id, None)
        if superseded is not None:
            # The replica gave that Fetch up; it still gets an answer (empty, which the
            # replica ignores), so that nothing waits for one forever.
            self._respond(superseded.message, self._fetch_answer(leader))
        latest = self.storage.latest_snapshot_id()
        if offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
            return self._respond(message, self._fetch_answer(leader, snapshot_id=latest))
        outcome, value = self._validate_offset_and_epoch(offset, last_epoch)
        if outcome != "valid":
            return self._respond(message, self._redirect_answer(leader, outcome, value))
        replica = leader.replica(replica_id, self._now)
        if leader.update_replica(replica, offset, self.storage.log_end_offset, self._now):
            self._on_high_watermark(leader.high_watermark)
        if (offset < self.storage.log_end_offset or body.max_wait_ms == 0
                or len(self._parked) >= len(leader.voters) + RAFT_OBSERVERS_MAX):
            return self._complete_fetch(message, replica, offset)
        # Nothing to send but perhaps a newer high watermark: held, and answered by the
        # first take_ready that delivers no commits (see there), at once when records
        # arrive, or at its MaxWaitMs.
        self._parked[replica_id] = _Parked(message, replica, offset,
                                           self._now + body.max_wait_ms)

    def _hw_news(self, replica):
        hw = self.quorum.state.high_watermark
        return hw is not None and hw > replica.hw_sent

    def _complete_fetch(self, message, replica, offset):
        leader = self.quorum.state
        data = b""
        if offset < self.storage.log_end_offset:
            data = self.storage.read(offset, self.config.fetch_bytes_max)
        hw = leader.high_watermark
        replica.hw_sent = -1 if hw is None else hw
        self._respond(message, self._fetch_answer(leader, records=data))

    def _fetch_answer(self, leader, records=None, diverging=None, snapshot_id=None):
        # A leader reports only the high watermark of its own epoch (-1 until it has
        # one), never the one it knew as a follower (kafka-facts §7.4).
        return rpc.fetch_response(
            NONE, self.node_id, leader.epoch,
            high_watermark=-1 if leader.high_watermark is None else leader.high_watermark,
            log_start_offset=self.storage.log_start_offset, records=records,
            diverging=diverging, snapshot_id=snapshot_id)

    def _redirect_answer(self, leader, outcome, value):
        """The answer to a Fetch that `_validate_offset_and_epoch` did not find valid."""
        if outcome == "snapshot":
            return self._fetch_answer(leader, snapshot_id=value)
        return self._fetch_answer(leader, diverging=value)

    def _validate_offset_and_epoch(self, offset, epoch):
        """Kafka's `validateOffsetAndEpoch`: ("valid", None), ("snapshot", SnapshotId)
        or ("diverging", (epoch, end offset))."""
        storage = self.storage
        start = storage.log_start_offset
        if start == 0 and offset == 0:
            return "valid", None
        earliest = storage.earliest_snapshot_id()
        if earliest is not None and earliest != BOOTSTRAP_SNAPSHOT_ID and (
                offset < start or (offset == start and epoch != earliest.epoch)
                or epoch < earliest.epoch):
            return "snapshot", storage.latest_snapshot_id()
        end_epoch, end_offset = self._end_offset_for_epoch(epoch)
        if end_epoch != epoch or end_offset < offset:
            return "diverging", (end_epoch, end_offset)
        return "valid", None

    def _end_offset_for_epoch(self, epoch):
        end_epoch, end_offset = self.storage.end_offset_for_epoch(epoch)
        if end_epoch < 0:
            # An empty log after a snapshot: the snapshot's epoch is the latest.
            snap_epoch = self.storage.last_fetched_epoch()
            if epoch >= snap_epoch and self.storage.log_start_offset == self.storage.log_end_offset:
                return snap_epoch, self.storage.log_end_offset
        return end_epoch, end_offset

    def _complete_parked(self, hw_news=True):
        """Answer held Fetches that now have records or (with `hw_news`) a newer high
        watermark."""
        leo = self.storage.log_end_offset
        for replica_id, parked in list(self._parked.items()):
            if leo > parked.fetch_offset or (hw_news and self._hw_news(parked.replica)):
                del self._parked[replica_id]
                self._complete_fetch(parked.message, parked.replica, parked.fetch_offset)

    def _flush_parked(self):
        """Answer the Fetches held by a leader that is no longer one, with what it knows
        now (the new epoch and leader), so the fetchers move on at once."""
        parked, self._parked = self._parked, {}
        for entry in parked.values():
            epoch = rpc.fetch_partition(entry.message.body).current_leader_epoch
            self._fetch_error(entry.message, self._leader_check(epoch) or NOT_LEADER)

    def _poll_leader(self, leader, now_ms):
        if leader.check_quorum_expired(now_ms):
            # No Fetch from a majority within the check-quorum timeout: resign (KIP-595).
            self._resign(leader, now_ms)
            return
        for replica_id, parked in list(self._parked.items()):
            if parked.deadline_ms <= now_ms:
                del self._parked[replica_id]
                self._complete_fetch(parked.message, parked.replica, parked.fetch_offset)

    def _send_begin_quorum_epoch(self, leader):
        """BeginQuorumEpoch to each voter that has not acknowledged the epoch (by answering
        it or by fetching), again every fetch timeout / 2."""
        now = self._now
        for replica in leader.others():
            if not replica.acknowledged and replica.begin_epoch_due_ms <= now \
                    and self._can_send(replica.replica_id):
                replica.begin_epoch_due_ms = now + self.config.begin_quorum_epoch_interval_ms
                self._send(replica.replica_id, rpc.begin_quorum_epoch_request(
                    self.config.cluster_id, replica.replica_id, self.node_id, leader.epoch))

    # ---------------------------------------------------------------- Fetch (follower side)

    @staticmethod
    def _fetch_response_possible(part, error):
        """What a leader can send: a high watermark of -1 or more; a diverging epoch or a
        snapshot id either absent (epoch / both -1) or within range and at most the
        leader's own epoch (its log holds no later one)."""
        epoch = part.current_leader.leader_epoch
        diverging, snapshot = part.diverging_epoch, part.snapshot_id
        return (-1 <= part.high_watermark <= INT64_MAX
                and (diverging is None or diverging.epoch == -1
                     or (0 <= diverging.epoch <= epoch
                         and 0 <= diverging.end_offset <= INT64_MAX))
                and (snapshot is None or (snapshot.end_offset, snapshot.epoch) == (-1, -1)
                     or (0 <= snapshot.end_offset <= INT64_MAX
                         and 0 <= snapshot.epoch <= epoch)))

    def _handle_fetch_response(self, message, body, tag):
        part = self._response_partition(message, body, rpc.fetch_response_partition(body),
                                        current=True, possible=self._fetch_response_possible)
        if part is None:
            return
        current = part.current_leader
        state = self.quorum.state
        if (state.name != "follower" or state.leader_id != message.source
                or current.leader_epoch != state.epoch):
            return
        state.deadline_ms = self._now + self.config.fetch_timeout_ms
        state.fetched = True
        diverging = part.diverging_epoch
        if diverging is not None and diverging.epoch >= 0:
            return self._truncate_to_diverging(diverging.epoch, diverging.end_offset)
        snapshot = part.snapshot_id
        if snapshot is not None and snapshot.end_offset >= 0:
            return self._begin_download(SnapshotId(snapshot.end_offset, snapshot.epoch))
        records = part.records
        if records:
            storage = self.storage
            end = storage.log_end_offset
            try:
                storage.append_as_follower(records)
            except (InvalidAppendError, CorruptRecordError):
                self._backoff(message.source)  # refetch from the log end offset
                return
            if storage.last_fetched_epoch() > state.epoch:
                # The leader's log holds no epoch above its own: these are not its records.
                storage.truncate_to(end)
                self._backoff(message.source)
                return
            self._unflushed = True
        if part.high_watermark >= 0:
            self._maybe_update_follower_hw(part.high_watermark)

    def _maybe_update_follower_hw(self, leader_hw):
        hw = min(leader_hw, self.storage.log_end_offset)
        if self.high_watermark is None or hw > self.high_watermark:
            self._on_high_watermark(hw)

    def _on_high_watermark(self, hw):
        self.high_watermark = hw
        self._hw_changed = True

    def _truncate_to_diverging(self, epoch, end_offset):
        storage = self.storage
        hw = self.high_watermark if self.high_watermark is not None else 0
        if end_offset < hw:
            raise RaftStateError(
                f"node {self.node_id}: the leader says the log diverges at {end_offset}, "
                f"below the high watermark {hw}: committed data would be lost")
        if epoch == 0:
            target = min(end_offset, storage.log_end_offset)
        else:
            local_epoch, local_end = storage.end_offset_for_epoch(epoch)
            if local_epoch == epoch:
                target = min(local_end, end_offset)
            else:
                target = local_end if local_end >= 0 else storage.log_start_offset
        target = max(target, storage.log_start_offset)
        if target < hw:
            raise RaftStateError(
                f"node {self.node_id}: truncating to {target} would remove committed "
                f"records below the high watermark {hw}")
        if target < storage.log_end_offset:
            storage.truncate_to(target)
            self._durable_end = min(self._durable_end, storage.log_end_offset)
            self._unflushed = True

    # ---------------------------------------------------------------- FetchSnapshot

    def _begin_download(self, snapshot_id):
        if self.storage.snapshot_size(snapshot_id) is not None:
            self._install_snapshot(snapshot_id)  # already here: just catch up the log
            return
        self._download = self.storage.begin_snapshot_download(snapshot_id)
        self._download.snapshot_id = snapshot_id
        self._download_size = None  # the size the leader gives, from its first answer

    def _handle_fetch_snapshot_request(self, message, body):
        def answer(error, snapshot_id=None, size=0, position=0, data=b"", top_error=NONE):
            self._respond(message, rpc.fetch_snapshot_response(
                error, self.leader_id, self.quorum.epoch, snapshot_id, size, position, data,
                top_error=top_error))

        if not self._cluster_ok(body.cluster_id):
            return answer(NONE, top_error=INCONSISTENT_CLUSTER_ID)
        part = rpc.fetch_snapshot_partition(body)
        if part is None:
            return answer(NONE, top_error=UNKNOWN_TOPIC_OR_PARTITION)
        error = self._leader_check(part.current_leader_epoch)
        if error is not None:
            return answer(error)
        self.quorum.state.on_voter_fetch(body.replica_id, self._now)
        snapshot_id = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        size = None
        if (snapshot_id != BOOTSTRAP_SNAPSHOT_ID and 0 < snapshot_id.end_offset <= INT64_MAX
                and 0 <= snapshot_id.epoch <= RAFT_EPOCH_MAX):
            size = self.storage.snapshot_size(snapshot_id)
        if size is None:
            return answer(SNAPSHOT_NOT_FOUND, snapshot_id)
        position = part.position
        if not 0 <= position < size:
            return answer(POSITION_OUT_OF_RANGE, snapshot_id, size, position)
        limit = min(max(body.max_bytes, 1), self.config.fetch_bytes_max)
        data = self.storage.read_snapshot(snapshot_id, position, limit)
        answer(NONE, snapshot_id, size, position, data)

    @staticmethod
    def _fetch_snapshot_response_possible(part, error):
        """A chunk of a snapshot the leader holds: an id within range and at most its
        epoch, and position + bytes within the size."""
        if error != NONE:
            return True
        snapshot, data = part.snapshot_id, part.unaligned_records or b""
        return (0 <= snapshot.end_offset <= INT64_MAX
                and 0 <= snapshot.epoch <= part.current_leader.leader_epoch
                and 0 <= part.position and part.position + len(data) <= part.size <= INT64_MAX)

    def _handle_fetch_snapshot_response(self, message, body, tag):
        raw = rpc.fetch_snapshot_partition(body)
        part = self._response_partition(message, body, raw, current=True,
                                        possible=self._fetch_snapshot_response_possible)
        if part is None:
            if raw is not None and raw.error_code == SNAPSHOT_NOT_FOUND \
                    and self._download is not None:
                self._download.abort()  # the leader dropped it: back to Fetch
                self._download = None
            return
        download = self._download
        state = self.quorum.state
        if download is None or state.name != "follower" or state.leader_id != message.source:
            return
        state.deadline_ms = self._now + self.config.fetch_timeout_ms
        state.fetched = True
        snapshot_id = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        if snapshot_id != download.snapshot_id or part.position != download.size:
            return  # an answer to an older request; ask again from where we are
        if self._download_size is None:
            self._download_size = part.size
        elif part.size != self._download_size:
            self._backoff(message.source)  # one snapshot has one size
            return
        download.append(part.unaligned_records)
        if download.size >= part.size:
            download.freeze()
            self._download = None
            self._install_snapshot(snapshot_id)

    def _snapshot_ahead(self, snapshot_id):
        """True unless the log already holds the snapshot's last record in the snapshot's
        epoch (or starts at or past its end): then the log can stay as it is."""
        storage = self.storage
        end = snapshot_id.end_offset
        if end <= storage.log_start_offset:
            return False
        return not (end <= storage.log_end_offset
                    and storage.epoch_for_offset(end - 1) == snapshot_id.epoch)

    def _install_snapshot(self, snapshot_id):
        """A complete snapshot from the leader: restart the log at its end unless the log
        matches it there, and load it into the state machine if that is behind it."""
        storage = self.storage
        if self._snapshot_ahead(snapshot_id):
            hw = self.high_watermark
            if hw is not None and hw > snapshot_id.end_offset:
                raise RaftStateError(
                    f"node {self.node_id}: the leader's snapshot {snapshot_id} disagrees "
                    f"with the log below the high watermark {hw}")
            storage.truncate_fully_and_start_at(snapshot_id)
            self._durable_end = storage.log_end_offset
        if self._applied < snapshot_id.end_offset:
            self._load_snapshot = snapshot_id
            self._applied = snapshot_id.end_offset
        if snapshot_id.end_offset <= storage.log_end_offset:
            self._maybe_update_follower_hw(snapshot_id.end_offset)

    # ---------------------------------------------------------------- DescribeQuorum

    def _handle_describe_quorum_request(self, message, body):
        part = rpc.describe_quorum_partition(body)
        state = self.quorum.state
        if part is None:
            return self._respond(message, rpc.describe_quorum_response(
                UNKNOWN_TOPIC_OR_PARTITION))
        if state.name != "leader":
            return self._respond(message, rpc.describe_quorum_response(
                NOT_LEADER, self.leader_id, state.epoch))
        now = self._now

        def rows(replicas, own=False):
            return [(r.replica_id, r.end_offset,
                     now if own and r.replica_id == self.node_id else r.last_fetch_ms,
                     now if own and r.replica_id == self.node_id else r.last_caught_up_ms)
                    for r in sorted(replicas, key=lambda r: r.replica_id)]

        self._respond(message, rpc.describe_quorum_response(
            NONE, self.node_id, state.epoch,
            -1 if state.high_watermark is None else state.high_watermark,
            voters=rows(state.voters.values(), own=True),
            observers=rows(state.observers.values())))

    _REQUEST_HANDLERS = {
        VOTE: _handle_vote_request,
        BEGIN_EPOCH: _handle_begin_quorum_epoch_request,
        END_EPOCH: _handle_end_quorum_epoch_request,
        FETCH: _handle_fetch_request,
        FETCH_SNAPSHOT: _handle_fetch_snapshot_request,
        DESCRIBE: _handle_describe_quorum_request,
    }
    _RESPONSE_HANDLERS = {
        VOTE: _handle_vote_response,
        BEGIN_EPOCH: _handle_quorum_epoch_response,
        END_EPOCH: _handle_quorum_epoch_response,
        FETCH: _handle_fetch_response,
        FETCH_SNAPSHOT: _handle_fetch_snapshot_response,
    }

    # ================================================================ proposals, snapshots

    def propose(self, values, now_ms=None, *, timestamp_ms=None):
        """Append `values` (a list of bytes) as one batch in the leader's epoch; returns
        the offset of the last one. They are committed once the high watermark passes
        it. Raises `NotLeaderError` on any node that is not the leader, and
        `InvalidAppendError`, with nothing appended, for values that cannot form a batch
        (not bytes, or too large). The batch's timestamp is `timestamp_ms`, by default the
        time now (a state machine that stamps its own view of the records with the time it
        wrote them passes that time)."""
        if now_ms is not None:
            self._now = now_ms
        state = self.quorum.state
        if state.name != "leader":
            raise NotLeaderError(self.node_id, self.leader_id, state.epoch)
        if not values:
            raise ValueError("propose() needs at least one value")
        try:
            batch = codec.encode_batch(
                values, base_offset=self.storage.log_end_offset, leader_epoch=state.epoch,
                timestamp=self._now if timestamp_ms is None else timestamp_ms)
        except (TypeError, ValueError) as exc:
            raise InvalidAppendError(
                f"cannot append these values: {exc}; pass a list of bytes (and a timestamp "
                "in the int64 range)") from exc
        if len(batch) > self.config.batch_bytes_max:
            raise InvalidAppendError(
                f"a proposal of {len(batch)} bytes exceeds the batch limit of "
                f"{self.config.batch_bytes_max} bytes; split it")
        _, last = self.storage.append_as_leader(batch, state.epoch)
        self._unflushed = True
        if self._parked:
            self._complete_parked()
        return last

    def create_snapshot(self, end_offset, data):
        """Store `data`, the state machine's snapshot of every record below `end_offset`
        (a committed batch boundary the state machine has applied), and move the log start
        up to the previous snapshot: one snapshot interval of log stays for followers
        that are a little behind (Kafka keeps the newest snapshot and cleans older ones)."""
        storage = self.storage
        hw = self.high_watermark
        if hw is None or not storage.log_start_offset < end_offset <= min(hw, self._applied):
            raise InvalidOffsetError(
                f"a snapshot must end in ({storage.log_start_offset}, "
                f"{min(hw or 0, self._applied)}] (log start, applied committed offset), "
                f"not at {end_offset}")
        holder = storage.read_batches(end_offset - 1, end_offset)
        if not holder or holder[-1].last_offset != end_offset - 1:
            raise InvalidOffsetError(f"a snapshot must end at a batch boundary; offset "
                                     f"{end_offset} falls inside a batch")
        snapshot_id = SnapshotId(end_offset, holder[-1].epoch)
        previous = storage.latest_snapshot_id()
        if previous is not None and previous.end_offset >= end_offset:
            return previous
        storage.write_snapshot(snapshot_id, data)
        if previous is not None and previous.end_offset > storage.log_start_offset:
            storage.advance_log_start_offset(previous)
        return snapshot_id

    # ================================================================ Ready

    def take_ready(self):
        """Everything produced since the last call, or None when there is nothing."""
        state = self.quorum.state
        if self._parked and state.name == "leader":
            # Held Fetches with new records are answered now. Those whose only news is the
            # high watermark wait while this Ready delivers commits: the driver hands them
            # to the state machine and proposes what it appends in reaction before taking
            # the next Ready, whose answers then carry those records with the new high
            # watermark (one round trip instead of two under a steady load).
            delivering = (self._hw_changed and self.high_watermark is not None
                          and self._applied < self.high_watermark)
            self._complete_parked(hw_news=not delivering)
        election = self.quorum.take_unpersisted()
        flush = None
        if self._unflushed:
            self._unflushed = False
            if self._flushes:
                flush = self.storage.log_end_offset
        leader = LeaderAndEpoch(self.leader_id, state.epoch)
        change = None
        if leader != self._reported_leader:
            change = self._reported_leader = leader
        hw = None
        commits = ()
        if self._hw_changed:
            self._hw_changed = False
            hw = self.high_watermark
            if self._applied < hw:
                commits = self.storage.read_batches(self._applied, hw)
                if commits:
                    self._applied = commits[-1].last_offset + 1
        load, self._load_snapshot = self._load_snapshot, None
        messages, self._outbox = self._outbox, []
        if (election is None and flush is None and not messages and hw is None
                and load is None and change is None):
            return None
        self._ready_number += 1
        if flush is not None or election is not None:
            self._pending_flushes.append((self._ready_number, flush))
        # A leader's messages do not rest on its own flush: it counts its log toward the
        # high watermark only once flushed, and one that restarts never appends in its
        # epoch again. They do rest on the election state that made it leader, and they
        # do not overtake the messages of an earlier Ready still held back.
        send_first = (state.name == "leader" and election is None
                      and self._held_back is None)
        if not send_first:
            self._held_back = self._ready_number
        return Ready(self._ready_number, election, flush, messages, hw, commits, load, change,
                     send_first)

    def on_persisted(self, number):
        """The driver persisted Ready `number` (and every one before it)."""
        if self._held_back is not None and self._held_back <= number:
            self._held_back = None
        pending = self._pending_flushes
        flushed = None
        while pending and pending[0][0] <= number:
            _, flush = pending.pop(0)
            if flush is not None:
                flushed = flush
        if flushed is None:
            return
        self._durable_end = max(self._durable_end, min(flushed, self.storage.log_end_offset))
        state = self.quorum.state
        if state.name == "leader" and state.update_local_end(self._durable_end, self._now):
            self._on_high_watermark(state.high_watermark)
            if self._parked:
                self._complete_parked(hw_news=False)  # the news goes with the next Ready


__all__ = ["RaftCore"]
