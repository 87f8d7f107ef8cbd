"""`kraftcore.runtime.node_log`: the Raft role changes and elections a node logs (with
cause and duration), and the committed metadata changes (levels, and the cap per call)."""

import collections
import logging

from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_BROKER, EMPTY_IMAGE
from kraftcore.runtime.node_log import (METADATA_LINES_PER_CALL_MAX, RaftEventLog,
                                        log_metadata_changes)
from kraftcore.types import Uuid


class _State:
    def __init__(self, name, epoch, leader_id):
        self.name, self.epoch, self.leader_id = name, epoch, leader_id


class _Quorum:
    def __init__(self, state):
        self.state = state
        self.transitions = collections.deque()

    def go(self, role, epoch, leader=None, voted=None):
        old = self.state
        self.transitions.append((old.name, old.epoch, old.leader_id, role, epoch, leader, voted))
        self.state = _State(role, epoch, leader)


def messages(caplog):
    return [r.getMessage() for r in caplog.records]


def test_a_failover_reads_as_causes_then_one_election_with_its_duration(caplog):
    caplog.set_level(logging.INFO, "kraftcore.raft")
    quorum = _Quorum(_State("follower", 3, 1))
    events = RaftEventLog(2, quorum, now_ms=0)
    quorum.go("prospective", 3, leader=1)  # a prospective remembers the leader it lost
    events.observe(1000)
    quorum.go("candidate", 4)
    quorum.go("leader", 4, leader=2)
    events.observe(1250)
    assert messages(caplog) == [
        "node 2: follower -> prospective in epoch 3: no fetch answer from leader 1 within "
        "the fetch timeout",
        "node 2: prospective -> candidate in epoch 4: a majority granted the pre-vote",
        "node 2: candidate -> leader in epoch 4: a majority voted for it",
        "node 2: leader change: node 2 leads epoch 4 (was node 1 in epoch 3); 250 ms "
        "without a leader, since: no fetch answer from leader 1 within the fetch timeout",
    ]
    assert events.elections == [(250, 4)]


def test_a_failed_pre_vote_back_to_the_same_leader_is_no_election(caplog):
    caplog.set_level(logging.INFO, "kraftcore.raft")
    quorum = _Quorum(_State("follower", 3, 1))
    events = RaftEventLog(2, quorum, now_ms=0)
    quorum.go("prospective", 3, leader=1)
    quorum.go("follower", 3, leader=1)
    events.observe(10)
    assert messages(caplog)[-1] == \
        "node 2: prospective -> follower in epoch 3: the pre-vote failed; node 1 still leads"
    assert events.elections == [] and events.leaderless_since is None


def test_votes_higher_epochs_and_a_resignation_say_so(caplog):
    caplog.set_level(logging.INFO, "kraftcore.raft")
    quorum = _Quorum(_State("unattached", 0, None))
    events = RaftEventLog(3, quorum, now_ms=0)
    quorum.go("unattached", 1)
    quorum.go("voted", 1, voted=1)
    quorum.go("follower", 1, leader=1)
    events.observe(700)
    quorum.go("unattached", 1)  # an observer-like loss of its leader in the same epoch
    quorum.go("follower", 2, leader=2)
    events.observe(900)
    assert messages(caplog) == [
        "node 3: unattached -> unattached in epoch 1: a vote request or a message of epoch 1 "
        "arrived",
        "node 3: unattached -> voted in epoch 1: voted for node 1 in epoch 1",
        "node 3: voted -> follower in epoch 1: node 1 leads epoch 1",
        "node 3: leader change: node 1 leads epoch 1 (no leader before); 700 ms without a "
        "leader, since: the node started",
        "node 3: follower -> unattached in epoch 1: no fetch answer from leader 1 within the "
        "fetch timeout; looking for the leader",
        "node 3: unattached -> follower in epoch 2: node 2 leads epoch 2",
        "node 3: leader change: node 2 leads epoch 2 (was node 1 in epoch 1); 0 ms without a "
        "leader, since: no fetch answer from leader 1 within the fetch timeout; looking for "
        "the leader",
    ]
    caplog.clear()
    quorum = _Quorum(_State("leader", 5, 3))
    events = RaftEventLog(3, quorum, now_ms=0)
    quorum.go("resigned", 5, leader=3)
    quorum.go("unattached", 6)
    events.observe(5)
    assert messages(caplog) == [
        "node 3: leader -> resigned in epoch 5: it resigned (shutting down)",
        "node 3: resigned -> unattached in epoch 6: its resignation ended; epoch 6 begins",
    ]


def _broker(i):
    return R.RegisterBrokerRecord(broker_id=i, incarnation_id=Uuid.from_ints(1, i),
                                  broker_epoch=i, end_points=[], features=[], rack=None,
                                  fenced=True)


def test_metadata_changes_at_info_on_the_active_controller_configs_at_debug(caplog):
    config = R.ConfigRecord(resource_type=CONFIG_BROKER, resource_name="", name="x", value="1")
    caplog.set_level(logging.INFO, "kraftcore.metadata")
    log_metadata_changes(1, EMPTY_IMAGE, [_broker(4), config, R.NoOpRecord()], active=True)
    assert messages(caplog) == ["node 1: committed: broker 4 registered: epoch 4, fenced, "
                                "no endpoints"]
    caplog.clear()
    log_metadata_changes(2, EMPTY_IMAGE, [_broker(4)], active=False)  # a standby
    assert messages(caplog) == []
    caplog.set_level(logging.DEBUG, "kraftcore.metadata")
    log_metadata_changes(2, EMPTY_IMAGE, [_broker(4), config], active=False)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "node 2: committed: broker 4 registered: epoch 4, fenced, no endpoints"),
        (logging.DEBUG, "node 2: committed: config x=1 on cluster default (broker)")]


def test_a_flood_of_changes_is_capped_and_counted(caplog):
    caplog.set_level(logging.INFO, "kraftcore.metadata")
    n = METADATA_LINES_PER_CALL_MAX + 7
    log_metadata_changes(1, EMPTY_IMAGE, [_broker(i) for i in range(n)], active=True)
    lines = messages(caplog)
    assert len(lines) == METADATA_LINES_PER_CALL_MAX + 1
    assert lines[-1] == "node 1: committed: ... and 7 more changes"
