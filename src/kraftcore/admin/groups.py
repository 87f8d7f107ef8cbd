"""`GroupAdmin`: the consumer groups of a cluster as Kafka's admin client sees them, talking
to brokers (the group APIs are theirs, not the controllers'): what `kraftcore groups` prints
(docs/admin.md), like Kafka's `kafka-consumer-groups`.

    async with GroupAdmin([("127.0.0.1", 9092)], timeout_ms=30_000) as admin:
        groups = await admin.list_groups()
        doc = await admin.describe_group("billing")
        plan = await admin.reset_plan("billing", {"orders": None}, TO_EARLIEST)
        await admin.commit_offsets("billing", {(r["topic"], r["partition"]): r["new_offset"]
                                               for r in plan["offsets"]})

Where requests go:

* the bootstrap addresses (a broker's listener, or a controller's: both answer Metadata)
  give the brokers clients may use (Metadata without topics); ListGroups goes to every one
  of them, as a group is listed only by its coordinator;
* a group's requests (DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups) go to its
  coordinator, found with FindCoordinator (key type 0) at any broker;
* ListOffsets goes to each partition's leader, found with Metadata.

Retries: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS (the
offsets topic being created, a coordinator moving or loading), a leader that moved, and a
broker that stopped answering after the cluster had answered once are tried again every
`RETRY_MS` (with a fresh FindCoordinator or Metadata) until `timeout_ms` from the
client's creation, less one pause, so a command bounded by the same time reports this
module's reason. A bootstrap that cannot be reached at all fails at once.

What the operations return is plain data (dicts and lists, snake_case keys: what the
commands print with --json). A refusal is an `AdminError` whose message names the group,
topic or partition and the Kafka error; a member's assignment that does not decode is
reported in that member's `assignment_error` (never raised: the rest of the description
stands). Offsets are only committed by `commit_offsets`, with generation -1 and no member
id (Kafka's rule for a group without members; a group with members refuses it).
"""

import asyncio
import time

from kraftcore.admin.client import (TIMEOUT_MS_DEFAULT, AdminConnections, address_text,
                                    error_text, metadata_request)
from kraftcore.broker.classic_group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE
from kraftcore.broker.group_records import decode_assignment, subscription_topics
from kraftcore.errors import AdminError, NetworkError, ProtocolError
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["GroupAdmin", "GroupNotFoundError", "TO_EARLIEST", "TO_LATEST", "TO_OFFSET", "SHIFT_BY", "GROUP_STATES",
           "REBALANCING_STATES", "INACTIVE_STATES", "plan_offsets", "owners", "RETRY_MS"]

_E = ErrorCode
RETRY_MS = 200  # pause before trying a retriable failure again
CONSUMER_PROTOCOL = "consumer"
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1  # ListOffsets' special timestamps
COORDINATOR_GROUP = 0  # FindCoordinator key type

# The states of a classic group (Kafka's names), and those whose offsets may be reset.
GROUP_STATES = (PREPARING, COMPLETING, STABLE, DEAD, EMPTY)
REBALANCING_STATES = (PREPARING, COMPLETING)
INACTIVE_STATES = (EMPTY, DEAD)

# Reset strategies (`plan_offsets`).
TO_EARLIEST, TO_LATEST, TO_OFFSET, SHIFT_BY = "to-earliest", "to-latest", "to-offset", "shift-by"

_COORDINATOR_MOVED = (_E.COORDINATOR_NOT_AVAILABLE, _E.NOT_COORDINATOR,
                      _E.COORDINATOR_LOAD_IN_PROGRESS)
_LEADER_MOVED = (_E.NOT_LEADER_OR_FOLLOWER, _E.LEADER_NOT_AVAILABLE, _E.FENCED_LEADER_EPOCH,
                 _E.UNKNOWN_LEADER_EPOCH, _E.OFFSET_NOT_AVAILABLE, _E.REQUEST_TIMED_OUT)
# The highest OffsetFetch / OffsetCommit versions that name topics (v10 names them by id).
_OFFSET_FETCH_BY_NAME_MAX = 9
_OFFSET_COMMIT_BY_NAME_MAX = 9
# A peer that cannot be reached or stopped answering (not one that answered "no").
_NETWORK_ERRORS = (NetworkError, OSError)


class _Retry(Exception):
    """A failure worth another attempt after `RETRY_MS`; the message says what it was."""


class GroupNotFoundError(AdminError):
    """The group does not exist: no members and no committed offsets."""

    def __init__(self, group):
        super().__init__(f"consumer group {group!r} does not exist")
        self.group = group


def _entry(items, group, api):
    """The entry of `group` in an answer's `items` (each with a `group_id`)."""
    found = next((x for x in items if x.group_id == group), None)
    if found is None:
        raise AdminError(f"{api}'s answer does not mention group {group!r}")
    return found


def owners(members):
    """{(topic, partition): member dict} from described members' decoded assignments."""
    out = {}
    for member in members:
        for entry in member["assignment"]:
            for p in entry["partitions"]:
                out[(entry["topic"], p)] = member
    return out


def plan_offsets(partitions, committed, earliest, latest, strategy, value=None):
    """The offsets a reset commits: (rows, warnings). `partitions` [(topic, partition)];
    `committed`, `earliest`, `latest` {(topic, partition): offset}. Each row is
    {"topic", "partition", "current_offset" (None: none committed), "new_offset"}. A
    --to-offset or --shift-by target outside [earliest, latest] is moved to the nearer end,
    with a warning, as Kafka's tool does; shifting a partition without a committed offset
    is an `AdminError`."""
    rows, warnings = [], []
    for tp in sorted(partitions):
        topic, index = tp
        current = committed.get(tp)
        if strategy == TO_EARLIEST:
            new = earliest[tp]
        elif strategy == TO_LATEST:
            new = latest[tp]
        else:
            if strategy == TO_OFFSET:
                new = value
            elif strategy == SHIFT_BY:
                if current is None:
                    raise AdminError(f"cannot shift the offset of {topic}-{index}: the group "
                                     "has no committed offset there; use --to-offset, "
                                     "--to-earliest or --to-latest for it")
                new = current + value
            else:
                raise ValueError(f"unknown reset strategy {strategy!r}")
            if new < earliest[tp]:
                warnings.append(f"new offset {new} of {topic}-{index} is below its earliest "
                                f"offset {earliest[tp]}: {earliest[tp]} is used")
                new = earliest[tp]
            elif new > latest[tp]:
                warnings.append(f"new offset {new} of {topic}-{index} is above its latest "
                                f"offset {latest[tp]}: {latest[tp]} is used")
                new = latest[tp]
        rows.append({"topic": topic, "partition": index, "current_offset": current,
                     "new_offset": new})
    return rows, warnings


def _member_doc(member, protocol_type):
    """A DescribeGroups member as a dict; a consumer's subscription and assignment
    decoded (an assignment that does not decode: `assignment_error`, no partitions)."""
    doc = {"member_id": member.member_id, "group_instance_id": member.group_instance_id,
           "client_id": member.client_id, "host": member.client_host, "subscription": None,
           "assignment": [], "assignment_error": None}
    if protocol_type != CONSUMER_PROTOCOL:
        return doc
    if member.member_metadata:
        doc["subscription"] = subscription_topics(member.member_metadata)
    if member.member_assignment:
        try:
            decoded = decode_assignment(member.member_assignment)
        except ProtocolError as exc:
            doc["assignment_error"] = str(exc)
        else:
            merged = {}
            for topic, parts in decoded.partitions:
                merged.setdefault(topic, set()).update(parts)
            doc["assignment"] = [{"topic": t, "partitions": sorted(merged[t])}
                                 for t in sorted(merged)]
    return doc


class GroupAdmin(AdminConnections):
    """A group admin client bootstrapped at `bootstrap` [(host, port)]; see the module
    docstring. Close it (`close`, or `async with`) to close its connections."""

    def __init__(self, bootstrap, timeout_ms=TIMEOUT_MS_DEFAULT, connection_options=None):
        super().__init__(timeout_ms, connection_options)
        self.bootstrap = [tuple(a) for a in bootstrap]
        if not self.bootstrap:
            raise ValueError("GroupAdmin needs at least one bootstrap address")
        # retries stop one pause short of timeout_ms (see the module docstring)
        self._deadline = time.monotonic() + (timeout_ms - RETRY_MS) / 1000
        self._brokers = None  # {id: (host, port)} from the last Metadata answer
        self._answered = None  # the address that gave it
        self._coordinators = {}  # group -> (id, (host, port))

    # ------------------------------------------------------------------ plumbing

    async def _send(self, address, request_cls, build, version_max=None):
        conn = await self._conn(address)
        version = conn.choose_version(request_cls)
        if version_max is not None:
            version = min(version, version_max)
        return await conn.send(build(version), version)

    async def _retrying(self, what, attempt):
        """`await attempt()` until it does not raise `_Retry`, for as long as the deadline
        allows another attempt."""
        while True:
            try:
                return await attempt()
            except _Retry as exc:
                last = str(exc)
            if time.monotonic() + RETRY_MS / 1000 > self._deadline:
                raise AdminError(f"{what}: still failing after {self.timeout_ms} ms "
                                 f"({last}); retry, or give a longer --timeout-ms")
            await asyncio.sleep(RETRY_MS / 1000)

    async def _metadata(self, topics):
        """A Metadata answer for `topics` (None: every topic, []: only brokers), from the
        address that answered last, else a bootstrap one. Before any answer, an
        unreachable bootstrap is raised at once; after one, it is a `_Retry`."""
        tried = [self._answered] if self._answered else []
        tried += [a for a in self.bootstrap if a not in tried]
        tried += [a for a in (self._brokers or {}).values() if a not in tried]
        last = None
        for address in tried:
            try:
                response = await self._send(address, m.MetadataRequest,
                                            metadata_request(topics))
            except _NETWORK_ERRORS as exc:
                last = exc
                continue
            self._answered = address
            self._brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            if not self._brokers:
                raise _Retry(f"{address_text(address)} knows no broker that clients may use")
            return response
        if self._brokers is None:
            raise last
        self._answered = None
        raise _Retry(f"no broker answered Metadata: {last}")

    async def brokers(self):
        """{broker id: (host, port)} of the brokers clients may use."""
        if self._brokers is None:
            await self._retrying("finding the brokers", lambda: self._metadata([]))
        return dict(self._brokers)

    # ------------------------------------------------------------------ list

    async def list_groups(self, states=()):
        """[{"group", "protocol_type", "state", "coordinator" (broker id)}] of every group
        of every broker, sorted by group; `states`: only the groups in one of these
        (Kafka's names, any case). The state is None from a broker that answers ListGroups
        below v4 (and `states` are refused there)."""
        wanted = {s.lower() for s in states}

        async def attempt():
            await self._metadata([])
            found = {}
            for broker_id, address in sorted(self._brokers.items()):
                for g in await self._list_groups_of(broker_id, address, states):
                    found.setdefault(g["group"], g)
            return [found[g] for g in sorted(found)
                    if not wanted or (found[g]["state"] or "").lower() in wanted]

        return await self._retrying("listing the groups", attempt)

    async def _list_groups_of(self, broker_id, address, states):
        cls = m.ListGroupsRequest

        def build(version):
            body = cls()
            if version >= 4:
                body.states_filter = list(states)
            return body

        where = f"broker {broker_id} ({address_text(address)})"
        try:
            response = await self._send(address, cls, build)
        except _NETWORK_ERRORS as exc:
            raise _Retry(f"{where} did not answer ListGroups: {exc}") from None
        if response.error_code in _COORDINATOR_MOVED:
            raise _Retry(f"{where} answered {error_text(response.error_code)}")
        if response.error_code:
            raise AdminError(f"{where} refused ListGroups: {error_text(response.error_code)}")
        state_known = (response.decoded_version or 0) >= 4
        if states and not state_known:
            raise AdminError(f"{where} answers ListGroups below v4 only, which carries no "
                             "group states: list without --state")
        return [{"group": g.group_id, "protocol_type": g.protocol_type,
                 "state": g.group_state if state_known else None, "coordinator": broker_id}
                for g in response.groups]

    # ------------------------------------------------------------------ the coordinator

    async def _find_coordinator(self, group):
        """(broker id, (host, port)) of `group`'s coordinator; `_Retry` while none."""
        known = self._coordinators.get(group)
        if known is not None:
            return known
        await self._metadata([])
        cls = m.FindCoordinatorRequest

        def build(version):
            if version >= 4:
                return cls(key_type=COORDINATOR_GROUP, coordinator_keys=[group])
            return cls(key=group, key_type=COORDINATOR_GROUP)

        last = None
        for broker_id, address in sorted(self._brokers.items()):
            try:
                r = await self._send(address, cls, build)
                break
            except _NETWORK_ERRORS as exc:
                last = f"broker {broker_id} ({address_text(address)}): {exc}"
        else:
            self._answered = None  # ask for the brokers again
            raise _Retry(f"no broker answered FindCoordinator ({last})")
        if (r.decoded_version or 0) >= 4:
            entry = next((c for c in r.coordinators if c.key == group), None)
            if entry is None:
                raise AdminError(f"FindCoordinator's answer does not mention group {group!r}")
            code, message, node = entry.error_code, entry.error_message, entry
        else:
            code, message, node = r.error_code, getattr(r, "error_message", None), r
        if code in _COORDINATOR_MOVED:
            raise _Retry(f"no coordinator for group {group!r} yet: "
                         f"{error_text(code, message)}")
        if code:
            raise AdminError(f"cannot find the coordinator of group {group!r}: "
                             f"{error_text(code, message)}")
        found = (node.node_id, (node.host, node.port))
        self._coordinators[group] = found
        return found

    async def _to_coordinator(self, group, request_cls, build, version_max=None):
        """(coordinator id, address, response) of a request to `group`'s coordinator;
        `_Retry` when it cannot be reached (it is forgotten, to be found again)."""
        node_id, address = await self._find_coordinator(group)
        try:
            response = await self._send(address, request_cls, build, version_max)
        except _NETWORK_ERRORS as exc:
            self._coordinators.pop(group, None)
            raise _Retry(f"coordinator {node_id} ({address_text(address)}) did not answer: "
                         f"{exc}") from None
        return node_id, address, response

    def _moved(self, group, node_id, code, message=None):
        self._coordinators.pop(group, None)
        return _Retry(f"coordinator {node_id} of group {group!r} answered "
                      f"{error_text(code, message)}")

    # ------------------------------------------------------------------ describe

    async def describe_group(self, group):
        """{"group", "state", "protocol_type", "assignment_strategy", "coordinator": {"id",
        "host", "port"}, "members": [{"member_id", "group_instance_id", "client_id",
        "host", "subscription" (topics, or None), "assignment": [{"topic", "partitions"}],
        "assignment_error"}]}. A group that does not exist is an `AdminError`."""
        cls = m.DescribeGroupsRequest

        async def attempt():
            node_id, address, r = await self._to_coordinator(
                group, cls, lambda version: cls(groups=[group]))
            d = _entry(r.groups, group, "DescribeGroups")
            message = getattr(d, "error_message", None)
            if d.error_code in _COORDINATOR_MOVED:
                raise self._moved(group, node_id, d.error_code, message)
            if d.error_code == _E.GROUP_ID_NOT_FOUND or (
                    not d.error_code and d.group_state == DEAD):
                raise GroupNotFoundError(group)
            if d.error_code:
                raise AdminError(f"cannot describe group {group!r}: "
                                 f"{error_text(d.error_code, message)}")
            return {"group": group, "state": d.group_state, "protocol_type": d.protocol_type,
                    "assignment_strategy": d.protocol_data,
                    "coordinator": {"id": node_id, "host": address[0], "port": address[1]},
                    "members": [_member_doc(x, d.protocol_type) for x in d.members]}

        return await self._retrying(f"describing group {group!r}", attempt)

    async def committed_offsets(self, group):
        """{(topic, partition): offset} of every offset `group` has committed ({} for a
        group without offsets)."""
        cls = m.OffsetFetchRequest

        def build(version):
            if version >= 8:
                return cls(groups=[cls.OffsetFetchRequestGroup(group_id=group, topics=None)])
            if version < 2:
                raise AdminError("the coordinator answers OffsetFetch below v2 only, which "
                                 "cannot ask for every offset of a group")
            return cls(group_id=group, topics=None)

        async def attempt():
            node_id, _, r = await self._to_coordinator(group, cls, build,
                                                       _OFFSET_FETCH_BY_NAME_MAX)
            if (r.decoded_version or 0) >= 8:
                g = _entry(r.groups, group, "OffsetFetch")
                code, topics = g.error_code, g.topics
            else:
                code, topics = r.error_code, r.topics
            if code in _COORDINATOR_MOVED:
                raise self._moved(group, node_id, code)
            if code == _E.GROUP_ID_NOT_FOUND:
                return {}
            if code:
                raise AdminError(f"cannot fetch the offsets of group {group!r}: "
                                 f"{error_text(code)}")
            out = {}
            for t in topics:
                for p in t.partitions:
                    if p.error_code in _COORDINATOR_MOVED:
                        raise self._moved(group, node_id, p.error_code)
                    if p.error_code:
                        raise AdminError(f"cannot fetch the offset of group {group!r} for "
                                         f"{t.name}-{p.partition_index}: "
                                         f"{error_text(p.error_code)}")
                    if p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return out

        return await self._retrying(f"fetching the offsets of group {group!r}", attempt)

    # ------------------------------------------------------------------ topics and offsets

    async def topic_partitions(self, topics):
        """{topic: [partition, ...]} of `topics`; None for a topic that does not exist."""
        async def attempt():
            r = await self._metadata(sorted(set(topics)))
            out = {}
            for t in r.topics:
                if t.error_code == _E.UNKNOWN_TOPIC_OR_PARTITION:
                    out[t.name] = None
                elif t.error_code in (_E.LEADER_NOT_AVAILABLE,):
                    raise _Retry(f"topic {t.name!r}: {error_text(t.error_code)}")
                elif t.error_code:
                    raise AdminError(f"cannot describe topic {t.name!r}: "
                                     f"{error_text(t.error_code)}")
                else:
                    out[t.name] = sorted(p.partition_index for p in t.partitions)
            return out

        return await self._retrying("reading the topics' metadata", attempt)

    async def list_offsets(self, partitions, timestamp):
        """{(topic, partition): offset} at `timestamp` (`EARLIEST_TIMESTAMP`: the log start
        offset, `LATEST_TIMESTAMP`: the high watermark) of every partition in
        `partitions`, asked of their leaders. A partition that does not exist is an
        `AdminError`."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}

        async def attempt():
            r = await self._metadata(sorted({t for t, _ in wanted}))
            leaders = {}
            for t in r.topics:
                for p in t.partitions:
                    leaders[(t.name, p.partition_index)] = p.leader_id
            by_leader = {}
            for tp in wanted:
                if tp not in leaders:
                    raise AdminError(f"partition {tp[0]}-{tp[1]} does not exist")
                if leaders[tp] < 0 or leaders[tp] not in self._brokers:
                    raise _Retry(f"{tp[0]}-{tp[1]} has no leader that clients may use")
                by_leader.setdefault(leaders[tp], []).append(tp)
            out = {}
            for leader, tps in sorted(by_leader.items()):
                out.update(await self._list_offsets_of(leader, tps, timestamp))
            return out

        return await self._retrying("listing the partitions' offsets", attempt)

    async def _list_offsets_of(self, leader, tps, timestamp):
        cls = m.ListOffsetsRequest
        address = self._brokers[leader]
        by_topic = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)

        def build(version):
            body = cls(replica_id=-1, isolation_level=0, topics=[
                cls.ListOffsetsTopic(name=t, partitions=[
                    cls.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in parts]) for t, parts in sorted(by_topic.items())])
            if version >= 10:
                body.timeout_ms = self.timeout_ms
            return body

        try:
            r = await self._send(address, cls, build)
        except _NETWORK_ERRORS as exc:
            raise _Retry(f"leader {leader} ({address_text(address)}) did not answer "
                         f"ListOffsets: {exc}") from None
        version = r.decoded_version or 0
        out = {}
        for t in r.topics:
            for p in t.partitions:
                where = f"{t.name}-{p.partition_index}"
                if p.error_code in _LEADER_MOVED:
                    raise _Retry(f"leader {leader} answered {error_text(p.error_code)} for "
                                 f"{where}")
                if p.error_code:
                    raise AdminError(f"cannot list the offsets of {where}: "
                                     f"{error_text(p.error_code)}")
                if version == 0:
                    out[(t.name, p.partition_index)] = (p.old_style_offsets[0]
                                                        if p.old_style_offsets else -1)
                else:
                    out[(t.name, p.partition_index)] = p.offset
        missing = [tp for tp in tps if tp not in out]
        if missing:
            raise AdminError(f"leader {leader}'s ListOffsets answer leaves out "
                             f"{', '.join(f'{t}-{p}' for t, p in missing)}")
        return out

    async def describe_offsets(self, group):
        """`describe_group` plus "offsets": one row per partition the group has committed
        an offset for or assigns to a member, sorted: {"topic", "partition",
        "current_offset", "log_end_offset", "lag" (None where unknown), "member_id",
        "host", "client_id" (None when no member owns it)}. A topic deleted since its
        offsets were committed has no log end offset."""
        doc = await self.describe_group(group)
        committed = await self.committed_offsets(group)
        owned = owners(doc["members"])
        partitions = set(committed) | set(owned)
        existing = await self.topic_partitions({t for t, _ in partitions}) if partitions \
            else {}
        live = [tp for tp in partitions if tp[1] in (existing.get(tp[0]) or ())]
        ends = await self.list_offsets(live, LATEST_TIMESTAMP)
        rows = []
        for tp in sorted(partitions):
            current, end = committed.get(tp), ends.get(tp)
            member = owned.get(tp)
            rows.append({
                "topic": tp[0], "partition": tp[1], "current_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None else None,
                "member_id": member["member_id"] if member else None,
                "host": member["host"] if member else None,
                "client_id": member["client_id"] if member else None})
        doc["offsets"] = rows
        return doc

    # ------------------------------------------------------------------ reset, delete

    async def reset_plan(self, group, topics, strategy, value=None):
        """What a reset of `group`'s offsets would commit, without committing it:
        {"group", "state", "offsets": rows of `plan_offsets`, "warnings": [text]}.
        `topics` {topic: [partition, ...] or None (every partition)}, or None for every
        topic the group has committed offsets for. Refused (`AdminError`) unless the group
        is inactive (Empty, or Dead: no such group yet), as Kafka's tool refuses it."""
        try:
            doc = await self.describe_group(group)
        except GroupNotFoundError:
            doc = {"state": DEAD, "members": []}
        if doc["state"] not in INACTIVE_STATES:
            members = len(doc["members"])
            raise AdminError(
                f"assignments can only be reset if the group {group!r} is inactive, but "
                f"the current state is {doc['state']} ({members} member"
                f"{'' if members == 1 else 's'}): stop its consumers, then reset again")
        committed = await self.committed_offsets(group)
        if topics is None:
            topics = {}
            for topic, index in committed:
                topics.setdefault(topic, []).append(index)
            if not topics:
                raise AdminError(f"group {group!r} has no committed offsets: name the "
                                 "topics to reset with --topic")
        existing = await self.topic_partitions(list(topics))
        partitions = []
        for topic, wanted in sorted(topics.items()):
            have = existing.get(topic)
            if have is None:
                raise AdminError(f"topic {topic!r} does not exist")
            for index in (have if wanted is None else sorted(set(wanted))):
                if index not in have:
                    raise AdminError(f"topic {topic!r} has no partition {index} (it has "
                                     f"{len(have)}: 0-{len(have) - 1})")
                partitions.append((topic, index))
        earliest = await self.list_offsets(partitions, EARLIEST_TIMESTAMP)
        latest = await self.list_offsets(partitions, LATEST_TIMESTAMP)
        rows, warnings = plan_offsets(partitions, committed, earliest, latest, strategy,
                                      value)
        return {"group": group, "state": doc["state"], "offsets": rows, "warnings": warnings}

    async def commit_offsets(self, group, offsets):
        """Commit {(topic, partition): offset} for `group` as a client without membership
        (generation -1, no member id), as Kafka's tool resets offsets."""
        cls = m.OffsetCommitRequest
        by_topic = {}
        for (topic, index), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(cls.OffsetCommitRequestPartition(
                partition_index=index, committed_offset=offset, committed_metadata=""))

        def build(version):
            body = cls(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                       topics=[cls.OffsetCommitRequestTopic(name=t, partitions=parts)
                               for t, parts in by_topic.items()])
            if 2 <= version <= 4:
                body.retention_time_ms = -1
            return body

        async def attempt():
            node_id, _, r = await self._to_coordinator(group, cls, build,
                                                       _OFFSET_COMMIT_BY_NAME_MAX)
            failed = []
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code in _COORDINATOR_MOVED:
                        raise self._moved(group, node_id, p.error_code)
                    if p.error_code in (_E.UNKNOWN_MEMBER_ID, _E.ILLEGAL_GENERATION,
                                        _E.REBALANCE_IN_PROGRESS):
                        raise AdminError(f"group {group!r} has members now "
                                         f"({error_text(p.error_code)}): stop its "
                                         "consumers, then reset again")
                    if p.error_code:
                        failed.append(f"{t.name}-{p.partition_index}: "
                                      f"{error_text(p.error_code)}")
            if failed:
                raise AdminError(f"the offsets of group {group!r} were not all committed: "
                                 + "; ".join(failed))

        await self._retrying(f"committing the offsets of group {group!r}", attempt)

    async def delete_group(self, group):
        """Delete `group` and its committed offsets (DeleteGroups); only a group without
        members can be deleted."""
        cls = m.DeleteGroupsRequest

        async def attempt():
            node_id, _, r = await self._to_coordinator(
                group, cls, lambda version: cls(groups_names=[group]))
            result = _entry(r.results, group, "DeleteGroups")
            code, message = result.error_code, getattr(result, "error_message", None)
            if code in _COORDINATOR_MOVED:
                raise self._moved(group, node_id, code, message)
            if code == _E.GROUP_ID_NOT_FOUND:
                raise GroupNotFoundError(group)
            if code == _E.NON_EMPTY_GROUP:
                raise AdminError(f"cannot delete group {group!r}: it has active members "
                                 f"({error_text(code)}); stop its consumers first")
            if code:
                raise AdminError(f"cannot delete group {group!r}: "
                                 f"{error_text(code, message)}")

        await self._retrying(f"deleting group {group!r}", attempt)
