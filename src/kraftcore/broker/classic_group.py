"""`ClassicGroup`: one consumer group of Kafka's classic protocol — its members, generation,
chosen protocol, leader and assignment, and the transitions JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and the timers make (Kafka's `ClassicGroup` states and rules).

States (Kafka's names, `DescribeGroups` and `ListGroups` answer them):

| state | what it means | leaves it |
|---|---|---|
| Empty | no members (offsets may remain) | a join: PreparingRebalance |
| PreparingRebalance | waiting for every member to (re)join | all joined, or the rebalance timeout: CompletingRebalance (or Empty) |
| CompletingRebalance | joined; waiting for the leader's assignment | the leader's SyncGroup stored: Stable |
| Stable | every member has its assignment | a join, leave, expiry or new protocol: PreparingRebalance |
| Dead | the group was deleted or its coordinator moved | (final) |

The rules kept here, as Kafka keeps them:

* A new dynamic member (empty member id) of JoinGroup v4+ is given an id and answered
  MEMBER_ID_REQUIRED; it is *pending* until it joins again with that id (or its session
  timeout ends). A static member (`group.instance.id`) gets its id at once; a static member
  that joins again with its instance id replaces its old member id (the old id is then
  FENCED_INSTANCE_ID), and in a Stable group with the same protocols it gets its old
  assignment without a rebalance (unless it leads: then the group rebalances).
* The first join of an Empty group waits `group.initial.rebalance.delay.ms`, and again while
  new members keep arriving, up to the rebalance timeout. Later rebalances end as soon as
  every member has joined, or at the largest rebalance timeout of the members: dynamic
  members that did not rejoin are removed then.
* The protocol is one every member supports, the one most members list first; the leader
  is the old leader when it rejoined, else the first member that joined. The leader's
  SyncGroup carries every member's assignment; the group is Stable once the coordinator has
  stored it (`store`), and every waiting SyncGroup is answered then. Members that never
  send SyncGroup within the rebalance timeout are removed, and the group rebalances.
* A member that sends no heartbeat (nor join, sync or commit) within its session timeout is
  removed, unless it is waiting in a join or sync; that starts a rebalance.
* Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
  INCONSISTENT_GROUP_PROTOCOL, GROUP_MAX_SIZE_REACHED, as Kafka answers them.

Answers are given through the callbacks the caller passes (`respond(JoinResult)`,
`respond(SyncResult)`), at once or when the group gets there; a callback is called exactly
once. Time is the `now_ms` the caller passes; member ids take their randomness from the
`rng` given (a `random.Random`). No I/O here: storing the group's record is the
coordinator's `store(group, done, now_ms)` callback; `done(error code, now_ms)` follows.
"""

import uuid
from typing import NamedTuple

from kraftcore.broker.group_records import subscription_topics
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["ClassicGroup", "Member", "JoinResult", "SyncResult", "EMPTY", "PREPARING",
           "COMPLETING", "STABLE", "DEAD", "GroupRuleError"]

_E = ErrorCode
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class GroupRuleError(Exception):
    """A request a group's rules refuse; `code` is the Kafka error code of the answer."""

    def __init__(self, code, message=""):
        self.code = int(code)
        super().__init__(message)


class JoinResult(NamedTuple):
    """A JoinGroup answer: `members` [(member id, instance id, metadata)] for the leader."""

    error: int
    generation: int = -1
    protocol_type: object = None
    protocol_name: object = None
    leader: str = ""
    member_id: str = ""
    members: tuple = ()
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    """A SyncGroup answer."""

    error: int
    protocol_type: object = None
    protocol_name: object = None
    assignment: bytes = b""


class Member:
    """One member of a group."""

    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "session_ms",
                 "rebalance_ms", "protocol_type", "protocols", "assignment", "on_join",
                 "on_sync", "deadline_ms", "synced_generation")

    def __init__(self, member_id, instance_id, client_id, client_host, session_ms,
                 rebalance_ms, protocol_type, protocols):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.protocol_type = protocol_type
        self.protocols = protocols  # [(name, metadata bytes)] in the member's preference
        self.assignment = b""
        self.on_join = None  # the callback of a JoinGroup waiting for the rebalance
        self.on_sync = None  # the callback of a SyncGroup waiting for the assignment
        self.deadline_ms = None  # session expiry; None while waiting in a join or sync
        self.synced_generation = -1

    def metadata(self, protocol):
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def same_protocols(self, protocols):
        return [(n, bytes(d)) for n, d in self.protocols] == [(n, bytes(d)) for n, d in protocols]

    def names(self):
        return [name for name, _ in self.protocols]


def _ignore(code, now_ms):
    del code, now_ms


def _respond(callback, result):
    if callback is not None:
        callback(result)


class ClassicGroup:
    """One classic group (module docstring). `config` is the coordinator's `GroupConfig`;
    `store(group, done, now_ms)` writes the group's record and calls `done(error code,
    now_ms)` once it is committed (0) or refused; `observe(group, state before, now_ms)`, when given, is
    called on every change of state."""

    def __init__(self, group_id, config, store, rng, now_ms, observe=None):
        self.group_id = group_id
        self.config = config
        self.store = store
        self.observe = observe
        self.rng = rng
        self.state = EMPTY
        self.state_since_ms = now_ms
        self.generation = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader_id = None
        self.members = {}  # member id -> Member, in join order
        self.static = {}  # group instance id -> member id
        self.pending = {}  # member ids given out with MEMBER_ID_REQUIRED -> expiry
        self.rebalance_deadline_ms = None
        self.initial_phase = False  # the first rebalance of an Empty group waits for more
        self.initial_delay_left_ms = 0
        self.new_member_added = False
        self.sync_deadline_ms = None
        self.storing = None  # the generation whose assignment is being stored

    # ------------------------------------------------------------------ views

    def subscribed_topics(self):
        """The topics the members' consumer-protocol subscriptions name (None when a
        subscription does not decode: treated as subscribing to everything)."""
        topics = set()
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return topics
        for member in self.members.values():
            found = subscription_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics.update(found)
        return topics

    def next_deadline_ms(self):
        deadlines = [d for d in (self.rebalance_deadline_ms, self.sync_deadline_ms)
                     if d is not None]
        deadlines.extend(self.pending.values())
        deadlines.extend(m.deadline_ms for m in self.members.values()
                         if m.deadline_ms is not None)
        return min(deadlines) if deadlines else None

    def _transition(self, state, now_ms):
        before, self.state = self.state, state
        self.state_since_ms = now_ms
        if self.observe is not None and before != state:
            self.observe(self, before, now_ms)

    def _new_member_id(self, prefix):
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    def _supported(self):
        """The protocol names every member supports."""
        common = None
        for member in self.members.values():
            names = set(member.names())
            common = names if common is None else common & names
        return common or set()

    def _check_member(self, member_id, instance_id):
        """The member `member_id` is, or raise UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is not None and known != member_id:
                raise GroupRuleError(_E.FENCED_INSTANCE_ID, (
                    f"instance {instance_id!r} of group {self.group_id!r} is member "
                    f"{known!r} now, not {member_id!r}"))
        member = self.members.get(member_id)
        if member is None:
            raise GroupRuleError(_E.UNKNOWN_MEMBER_ID, (
                f"{member_id!r} is not a member of group {self.group_id!r}"))
        return member  # a static member may leave its instance id out, as Kafka accepts

    # ------------------------------------------------------------------ join

    def join(self, req, now_ms, respond):
        """A JoinGroup (`req` a `JoinRequest` of `kraftcore.broker.groups`); `respond` gets
        its `JoinResult` now or when the rebalance completes."""
        if self.state == DEAD:
            return respond(JoinResult(_E.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
        if not req.protocols or not req.protocol_type:
            return respond(JoinResult(_E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
        if self.members:
            if (req.protocol_type != self.protocol_type
                    or not set(n for n, _ in req.protocols) & self._supported()):
                if req.member_id not in self.members or len(self.members) > 1:
                    return respond(JoinResult(_E.INCONSISTENT_GROUP_PROTOCOL,
                                              member_id=req.member_id))
        if not req.member_id:
            return self._join_new(req, now_ms, respond)
        return self._join_known(req, now_ms, respond)

    def _join_new(self, req, now_ms, respond):
        instance = req.instance_id
        if instance is not None and instance in self.static:
            return self._replace_static(req, now_ms, respond)
        if len(self.members) + len(self.pending) >= self.config.group_size_max:
            return respond(JoinResult(_E.GROUP_MAX_SIZE_REACHED))
        member_id = self._new_member_id(instance if instance is not None else req.client_id)
        if instance is None and req.require_known_member_id:
            self.pending[member_id] = now_ms + req.session_ms
            return respond(JoinResult(_E.MEMBER_ID_REQUIRED, member_id=member_id))
        self._add(member_id, req, now_ms, respond)

    def _join_known(self, req, now_ms, respond):
        member_id = req.member_id
        if member_id in self.pending:
            del self.pending[member_id]
            return self._add(member_id, req, now_ms, respond)
        try:
            member = self._check_member(member_id, req.instance_id)
        except GroupRuleError as exc:
            return respond(JoinResult(exc.code, member_id=member_id))
        if self.state == PREPARING:
            self._update(member, req, respond)
            self._maybe_complete_join(now_ms)
        elif self.state == COMPLETING:
            if member.same_protocols(req.protocols):
                # the member missed the answer of this generation: give it again
                respond(self._join_result(member))
            else:
                self._update(member, req, respond)
                self._prepare(now_ms, f"member {member_id} changed its protocols")
        elif self.state == STABLE:
            if member_id == self.leader_id or not member.same_protocols(req.protocols):
                self._update(member, req, respond)
                self._prepare(now_ms, f"member {member_id} joined again")
            else:
                member.deadline_ms = now_ms + member.session_ms
                respond(self._join_result(member, leader_view=False))
        else:  # EMPTY: no member can be known
            respond(JoinResult(_E.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _add(self, member_id, req, now_ms, respond):
        member = Member(member_id, req.instance_id, req.client_id, req.client_host,
                        req.session_ms, req.rebalance_ms, req.protocol_type,
                        list(req.protocols))
        member.on_join = respond
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.instance_id is not None:
            self.static[req.instance_id] = member_id
        self.new_member_added = True
        if self.state in (EMPTY, STABLE, COMPLETING):
            self._prepare(now_ms, f"member {member_id} joined")
        else:
            self._maybe_complete_join(now_ms)

    def _update(self, member, req, respond):
        if member.on_join is not None and member.on_join is not respond:
            # an older JoinGroup of the same member: superseded (Kafka answers it so too)
            _respond(member.on_join, JoinResult(_E.UNKNOWN_MEMBER_ID,
                                                member_id=member.member_id))
        member.protocols = list(req.protocols)
        member.session_ms = req.session_ms
        member.rebalance_ms = req.rebalance_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.on_join = respond
        member.deadline_ms = None

    def _replace_static(self, req, now_ms, respond):
        """A static member joins again with an empty member id: it takes a new id."""
        old_id = self.static[req.instance_id]
        old = self.members.pop(old_id)
        new_id = self._new_member_id(req.instance_id)
        _respond(old.on_join, JoinResult(_E.FENCED_INSTANCE_ID, member_id=old_id))
        _respond(old.on_sync, SyncResult(_E.FENCED_INSTANCE_ID))
        old.on_join = old.on_sync = None
        old.member_id = new_id
        self.members[new_id] = old
        self.static[req.instance_id] = new_id
        was_leader = self.leader_id == old_id
        if was_leader:
            self.leader_id = new_id
        if self.state == STABLE and not was_leader and old.same_protocols(req.protocols):
            old.deadline_ms = now_ms + req.session_ms
            old.client_id, old.client_host = req.client_id, req.client_host
            self.store(self, _ignore, now_ms)  # the new member id, for a later load
            return respond(self._join_result(old, leader_view=False))
        self._update(old, req, respond)
        if self.state == PREPARING:
            self._maybe_complete_join(now_ms)
        else:
            self._prepare(now_ms, f"static member {req.instance_id} joined again")

    # ------------------------------------------------------------------ rebalance

    def _prepare(self, now_ms, reason):
        """Start a rebalance (from Empty, CompletingRebalance or Stable)."""
        del reason  # the coordinator logs transitions; the reason is for a reader
        if self.state == COMPLETING:
            self._reset_assignment(_E.REBALANCE_IN_PROGRESS)
        was_empty = self.state == EMPTY
        self._transition(PREPARING, now_ms)
        self.sync_deadline_ms = None
        timeout = max((m.rebalance_ms for m in self.members.values()), default=0)
        delay = self.config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            first = min(delay, timeout)
            self.initial_phase = True
            self.initial_delay_left_ms = max(0, timeout - first)
            self.new_member_added = False
            self.rebalance_deadline_ms = now_ms + first
        else:
            self.initial_phase = False
            self.initial_delay_left_ms = 0
            self.rebalance_deadline_ms = now_ms + timeout
            self._maybe_complete_join(now_ms)

    def _maybe_complete_join(self, now_ms):
        if self.state != PREPARING or self.initial_phase:
            return
        if not self.pending and all(m.on_join is not None for m in self.members.values()):
            self._complete_join(now_ms)

    def _rebalance_timer(self, now_ms):
        """The rebalance deadline passed."""
        if self.initial_phase:
            left = self.initial_delay_left_ms
            if self.new_member_added and left > 0:
                step = min(self.config.initial_rebalance_delay_ms, left)
                self.initial_delay_left_ms = left - step
                self.new_member_added = False
                self.rebalance_deadline_ms = now_ms + step
                return
            self.initial_phase = False
            self.initial_delay_left_ms = 0
        # members that did not rejoin in time leave (static ones stay: they rejoin later)
        for member in list(self.members.values()):
            if member.on_join is None and member.instance_id is None:
                self._remove(member)
        self.pending.clear()
        self._complete_join(now_ms)

    def _complete_join(self, now_ms):
        self.rebalance_deadline_ms = None
        self.initial_phase = False
        self.initial_delay_left_ms = 0
        self.generation += 1
        if not self.members:
            self.protocol_name = self.leader_id = None  # the protocol type stays
            self._transition(EMPTY, now_ms)
            self.store(self, _ignore, now_ms)
            return
        self.protocol_name = self._select_protocol()
        joined = [m for m in self.members.values() if m.on_join is not None]
        if self.leader_id not in self.members or self.members[self.leader_id].on_join is None:
            self.leader_id = (joined[0] if joined else next(iter(self.members.values()))).member_id
        self._transition(COMPLETING, now_ms)
        self.sync_deadline_ms = now_ms + max(m.rebalance_ms for m in self.members.values())
        for member in joined:
            callback, member.on_join = member.on_join, None
            member.deadline_ms = now_ms + member.session_ms
            callback(self._join_result(member))
        for member in self.members.values():
            if member.deadline_ms is None and member.on_sync is None:
                member.deadline_ms = now_ms + member.session_ms

    def _select_protocol(self):
        supported = self._supported()
        votes = {}
        order = []
        for member in self.members.values():
            for name in member.names():
                if name in supported:
                    if name not in votes:
                        votes[name] = 0
                        order.append(name)
                    votes[name] += 1
                    break
        return max(order, key=lambda name: votes[name])

    def _join_result(self, member, leader_view=True):
        members = ()
        if leader_view and member.member_id == self.leader_id:
            members = tuple((m.member_id, m.instance_id, m.metadata(self.protocol_name))
                            for m in self.members.values())
        return JoinResult(0, self.generation, self.protocol_type, self.protocol_name,
                          self.leader_id, member.member_id, members)

    # ------------------------------------------------------------------ sync

    def sync(self, generation, member_id, instance_id, protocol_type, protocol_name,
             assignments, now_ms, respond):
        """A SyncGroup; `assignments` {member id: bytes} (the leader's). `respond` gets its
        `SyncResult` now or once the leader's assignment is stored."""
        try:
            member = self._check_member(member_id, instance_id)
        except GroupRuleError as exc:
            return respond(SyncResult(exc.code))
        if generation != self.generation:
            return respond(SyncResult(_E.ILLEGAL_GENERATION))
        if ((protocol_type is not None and protocol_type != self.protocol_type)
                or (protocol_name is not None and protocol_name != self.protocol_name)):
            return respond(SyncResult(_E.INCONSISTENT_GROUP_PROTOCOL))
        if self.state == EMPTY:
            return respond(SyncResult(_E.UNKNOWN_MEMBER_ID))
        if self.state == PREPARING:
            return respond(SyncResult(_E.REBALANCE_IN_PROGRESS))
        member.deadline_ms = None
        if self.state == STABLE:
            member.deadline_ms = now_ms + member.session_ms
            member.synced_generation = generation
            return respond(self._sync_result(member))
        # CompletingRebalance
        _respond(member.on_sync, SyncResult(_E.REBALANCE_IN_PROGRESS))
        member.on_sync = respond
        member.synced_generation = generation
        if member_id == self.leader_id and self.storing != generation:
            for m in self.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            self.storing = generation
            self.store(self, lambda code, now, g=generation: self._stored(g, code, now), now_ms)

    def _stored(self, generation, code, now_ms):
        """The leader's assignment of `generation` was stored (code 0) or not (the store of
        an older generation changes nothing)."""
        if self.storing == generation:
            self.storing = None
        if self.state != COMPLETING or generation != self.generation:
            return
        if code:
            self._reset_assignment(code)
            self._prepare(now_ms, "the assignment was not stored")
            return
        self._transition(STABLE, now_ms)
        for member in self.members.values():
            if member.on_sync is not None:
                callback, member.on_sync = member.on_sync, None
                member.deadline_ms = now_ms + member.session_ms
                callback(self._sync_result(member))

    def _sync_result(self, member):
        return SyncResult(0, self.protocol_type, self.protocol_name, member.assignment)

    def _reset_assignment(self, code):
        for member in self.members.values():
            member.assignment = b""
            if member.on_sync is not None:
                callback, member.on_sync = member.on_sync, None
                callback(SyncResult(code))

    # ------------------------------------------------------------------ heartbeat, leave

    def heartbeat(self, generation, member_id, instance_id, now_ms):
        """A Heartbeat: returns its error code (0, or REBALANCE_IN_PROGRESS to rejoin)."""
        if self.state == EMPTY:
            return _E.UNKNOWN_MEMBER_ID
        member = self._check_member(member_id, instance_id)
        if generation != self.generation:
            return _E.ILLEGAL_GENERATION
        if member.on_join is None and member.on_sync is None:
            member.deadline_ms = now_ms + member.session_ms
        if self.state == PREPARING:
            return _E.REBALANCE_IN_PROGRESS
        return 0

    def touch(self, member_id, now_ms):
        """A member's offset commit counts as a heartbeat."""
        member = self.members.get(member_id)
        if member is not None and member.deadline_ms is not None:
            member.deadline_ms = now_ms + member.session_ms

    def leave(self, member_id, instance_id, now_ms):
        """One member of a LeaveGroup: its error code. A static member may be named by its
        instance id alone (member id empty)."""
        if not member_id and instance_id is not None:
            member_id = self.static.get(instance_id)
            if member_id is None:
                return _E.UNKNOWN_MEMBER_ID
        if member_id in self.pending and instance_id is None:
            del self.pending[member_id]
            self._maybe_complete_join(now_ms)
            return 0
        try:
            member = self._check_member(member_id, instance_id)
        except GroupRuleError as exc:
            return exc.code
        self._remove(member)
        self._after_removal(now_ms, f"member {member_id} left")
        return 0

    def _remove(self, member):
        self.members.pop(member.member_id, None)
        instance = member.instance_id
        if instance is not None and self.static.get(instance) == member.member_id:
            del self.static[instance]
        _respond(member.on_join, JoinResult(_E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        _respond(member.on_sync, SyncResult(_E.UNKNOWN_MEMBER_ID))
        member.on_join = member.on_sync = None
        if self.leader_id == member.member_id:
            self.leader_id = None

    def _after_removal(self, now_ms, reason):
        if self.state in (STABLE, COMPLETING):
            self._prepare(now_ms, reason)
        elif self.state == PREPARING:
            self._maybe_complete_join(now_ms)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms):
        """Act on the deadlines that passed by `now_ms`."""
        for member_id, expiry in list(self.pending.items()):
            if expiry <= now_ms:
                del self.pending[member_id]
                self._maybe_complete_join(now_ms)
        expired = [m for m in self.members.values()
                   if m.deadline_ms is not None and m.deadline_ms <= now_ms
                   and m.on_join is None and m.on_sync is None]
        for member in expired:
            self._remove(member)
        if expired:
            self._after_removal(now_ms, "session timeouts")
        if (self.state == PREPARING and self.rebalance_deadline_ms is not None
                and self.rebalance_deadline_ms <= now_ms):
            self._rebalance_timer(now_ms)
        if (self.sync_deadline_ms is not None and self.sync_deadline_ms <= now_ms):
            self.sync_deadline_ms = None
            if self.state in (COMPLETING, STABLE):
                late = [m for m in self.members.values()
                        if m.synced_generation != self.generation]
                for member in late:
                    self._remove(member)
                if late:
                    self._after_removal(now_ms, "members did not sync in time")

    def close(self, code):
        """The group is no longer served here: every waiting request gets `code`."""
        for member in self.members.values():
            _respond(member.on_join, JoinResult(code, member_id=member.member_id))
            _respond(member.on_sync, SyncResult(code))
            member.on_join = member.on_sync = None
        self._transition(DEAD, self.state_since_ms)
