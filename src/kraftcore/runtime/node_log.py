"""The lines a node writes to its log about what happens to the quorum and the metadata, so
that a person reading `node.log` can follow a failover:

* every Raft role change, with its cause as far as the change shows it ("follower ->
  prospective in epoch 3: no fetch answer from leader 1 within the fetch timeout");
* every election, once a leader is known again, with how long the node was without one
  and why it began ("node 3 leads epoch 4 (was node 1 in epoch 3); 2143 ms without a
  leader, since: no fetch answer from leader 1 ...");
* the metadata changes the active controller commits (`kraftcore.metadata.describe`):
  brokers registered, fenced and unfenced, topics and partitions created and deleted,
  partition leader and ISR changes at INFO; config changes at DEBUG (a client may set
  thousands a second). The standby controllers log the same at DEBUG.

Snapshots and truncations of the metadata log are logged where they happen
(`kraftcore.runtime.raft_driver`, `kraftcore.runtime.raft_storage`), a broker's lifecycle
transitions and partition roles by `kraftcore.runtime.node`.
"""

import logging

from kraftcore.metadata import records as R
from kraftcore.metadata.describe import ChangeDescriber

__all__ = ["RaftEventLog", "log_metadata_changes", "METADATA_LINES_PER_CALL_MAX"]

log = logging.getLogger("kraftcore.raft")
metadata_log = logging.getLogger("kraftcore.metadata")

# At most this many change lines per committed stretch (a topic of 10 000 partitions is
# one line per partition otherwise); the rest are counted in one line.
METADATA_LINES_PER_CALL_MAX = 50
_WITHOUT_LEADER = ("unattached", "voted", "prospective", "candidate")


def _cause(before, after):
    """Why the role changed, from the states on each side of the change."""
    old_role, old_epoch, old_leader = before
    role, epoch, leader, voted = after
    if role in ("prospective", "candidate"):
        if old_role == "follower":
            return f"no fetch answer from leader {old_leader} within the fetch timeout"
        if old_role == "prospective":
            return "a majority granted the pre-vote"
        if old_role == "candidate":
            return f"the election in epoch {old_epoch} ended without a winner"
        if old_role == "resigned":
            return "the resigned leader's successor did not take over in time"
        return "no leader within the election timeout"
    if role == "leader":
        return "a majority voted for it"
    if role == "follower":
        if old_role == "prospective" and epoch == old_epoch:
            return f"the pre-vote failed; node {leader} still leads"
        return f"node {leader} leads epoch {epoch}"
    if role == "voted":
        return f"voted for node {voted} in epoch {epoch}"
    if role == "resigned":
        return "it resigned (shutting down)"
    if old_role == "prospective" and epoch == old_epoch:
        return "the pre-vote failed"
    if old_role == "resigned":
        return f"its resignation ended; epoch {epoch} begins"
    if old_role == "leader":
        return f"it lost the leadership: epoch {epoch} began elsewhere"
    if old_role == "follower" and epoch == old_epoch:
        return (f"no fetch answer from leader {old_leader} within the fetch timeout; "
                "looking for the leader")
    return f"a vote request or a message of epoch {epoch} arrived"


class RaftEventLog:
    """Reads the Raft core's role changes (`QuorumState.transitions`) after each Ready
    and logs them (see the module docstring)."""

    def __init__(self, node_id, quorum, now_ms):
        self.node_id = node_id
        self.quorum = quorum
        state = quorum.state
        # when the node last knew no leader, and why: None while it knows one
        self.leaderless_since = None if state.leader_id is not None else now_ms
        self.leaderless_cause = "the node started" if state.leader_id is None else None
        self.last_leader = (state.leader_id, state.epoch)
        self.elections = []  # (ms without a leader, epoch) of each election seen

    def observe(self, now_ms):
        transitions = self.quorum.transitions
        while transitions:
            old_role, old_epoch, old_leader, role, epoch, leader, voted = \
                transitions.popleft()
            cause = _cause((old_role, old_epoch, old_leader), (role, epoch, leader, voted))
            log.info("node %s: %s -> %s in epoch %s: %s", self.node_id, old_role, role,
                     epoch, cause)
            if leader is None or role in _WITHOUT_LEADER or role == "resigned":
                if self.leaderless_since is None:
                    self.leaderless_since, self.leaderless_cause = now_ms, cause
            elif (leader, epoch) != self.last_leader:
                self._leader_known(leader, epoch, now_ms)
            else:  # back to the same leader (a failed pre-vote): no election took place
                self.leaderless_since = self.leaderless_cause = None

    def _leader_known(self, leader, epoch, now_ms):
        previous, previous_epoch = self.last_leader
        was = (f"was node {previous} in epoch {previous_epoch}" if previous is not None
               else "no leader before")
        if self.leaderless_since is None:
            log.info("node %s: leader change: node %s leads epoch %s (%s)", self.node_id,
                     leader, epoch, was)
        else:
            took = now_ms - self.leaderless_since
            self.elections.append((took, epoch))
            log.info("node %s: leader change: node %s leads epoch %s (%s); %s ms without "
                     "a leader, since: %s", self.node_id, leader, epoch, was, took,
                     self.leaderless_cause)
        self.last_leader = (leader, epoch)
        self.leaderless_since = self.leaderless_cause = None


def log_metadata_changes(node_id, image, records, *, active):
    """Log the committed `records` that followed `image` (see the module docstring)."""
    level = logging.INFO if active else logging.DEBUG
    if not metadata_log.isEnabledFor(level):
        return
    describer = ChangeDescriber(image)
    configs_told = metadata_log.isEnabledFor(logging.DEBUG)
    told = 0
    for record in records:
        if type(record) is R.ConfigRecord:
            if not configs_told:
                continue  # a config change says nothing later records build on
            record_level = logging.DEBUG
        else:
            record_level = level
        line = describer.describe(record)  # every other record: later ones build on it
        if line is None or not metadata_log.isEnabledFor(record_level):
            continue
        told += 1
        if told <= METADATA_LINES_PER_CALL_MAX:
            metadata_log.log(record_level, "node %s: committed: %s", node_id, line)
    if told > METADATA_LINES_PER_CALL_MAX:
        metadata_log.log(level, "node %s: committed: ... and %s more changes", node_id,
                         told - METADATA_LINES_PER_CALL_MAX)
