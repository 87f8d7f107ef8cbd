"""Unit tests of the simulator's pieces that need no Raft core: the scheduler, the network,
the state machine and its snapshots, and the invariant checker on hand-made states."""

import random
import types

import pytest

from kraftcore import codec
from kraftcore.types import ElectionState
from kraftcore.raft.control import LeaderChangeMessage, encode_control_batch
from kraftcore.raft.types import CommittedBatch, RaftMessage, Ready
from kraftcore.types import SnapshotId
from kraftcore.sim.invariants import Checker, CommittedLog, SimViolation
from kraftcore.sim.network import Network, NetworkParams
from kraftcore.sim.scheduler import Rngs, Scheduler
from kraftcore.sim.state_machine import StateMachine, decode_snapshot, encode_snapshot
from kraftcore.raft.memory import MemoryStorage

# ---------------------------------------------------------------------- scheduler


def test_scheduler_runs_in_time_then_insertion_order():
    scheduler = Scheduler()
    seen = []
    scheduler.at(5, seen.append, "b")
    scheduler.at(1, seen.append, "a")
    scheduler.at(5, seen.append, "c")
    scheduler.after(5, seen.append, "d")
    assert scheduler.pending == 4 and scheduler.next_time_ms == 1
    assert scheduler.run_until(10) == 4
    assert seen == ["a", "b", "c", "d"]
    assert scheduler.now_ms == 10 and scheduler.events_run == 4


def test_scheduler_events_scheduled_by_events_and_stop():
    scheduler = Scheduler()
    seen = []

    def tick(n):
        seen.append((scheduler.now_ms, n))
        scheduler.after(3, tick, n + 1)

    scheduler.at(0, tick, 0)
    scheduler.run_until(9)
    assert seen == [(0, 0), (3, 1), (6, 2), (9, 3)]
    scheduler.run_until(100, stop=lambda: len(seen) == 6)
    assert seen[-1] == (15, 5) and scheduler.now_ms == 15


def test_scheduler_refuses_the_past():
    scheduler = Scheduler()
    scheduler.run_until(10)
    with pytest.raises(ValueError):
        scheduler.at(9, print)
    with pytest.raises(ValueError):
        scheduler.after(-1, print)
    assert scheduler.run_next() is False


def test_scheduler_after_event_hook_runs_per_event():
    scheduler = Scheduler()
    calls = []
    for t in (1, 2, 2):
        scheduler.at(t, lambda: None)
    scheduler.run_until(5, after_event=lambda: calls.append(scheduler.now_ms))
    assert calls == [1, 2, 2]


def test_rngs_are_deterministic_and_independent():
    a, b = Rngs(42), Rngs(42)
    draws_a = [a.child().random() for _ in range(3)]
    draws_b = [b.child().random() for _ in range(3)]
    assert draws_a == draws_b
    assert len(set(draws_a)) == 3
    assert Rngs(43).child().random() != draws_a[0]


# ---------------------------------------------------------------------- network


def _network(params=None, seed=1):
    scheduler = Scheduler()
    arrived = []
    events = []
    network = Network(scheduler, random.Random(seed), params or NetworkParams(), arrived.append,
                      lambda kind, message: events.append((kind, message.correlation_id)))
    for node_id in (1, 2, 3):
        network.node_up(node_id, 1)
    return scheduler, network, arrived, events


def _message(source, destination, correlation_id):
    return RaftMessage(source, destination, correlation_id, body=None)


def test_network_delivers_within_the_delay_bounds_and_reorders():
    scheduler, network, arrived, _ = _network(NetworkParams(delay_ms_min=1, delay_ms_max=10))
    times = {}
    network._deliver = lambda message: (arrived.append(message),
                                        times.__setitem__(message.correlation_id,
                                                          scheduler.now_ms))
    for i in range(200):
        network.send(_message(1, 2, i))
    scheduler.run_until(100)
    assert len(arrived) == 200
    assert all(1 <= t <= 10 for t in times.values())
    order = [m.correlation_id for m in arrived]
    assert order != sorted(order)  # random delays reorder
    assert network.delivered == 200 and network.dropped == 0


def test_network_drops_and_duplicates_at_their_rates():
    params = NetworkParams(drop_probability=0.2, duplicate_probability=0.1)
    scheduler, network, arrived, events = _network(params)
    for i in range(5000):
        network.send(_message(1, 2, i))
    scheduler.run_until(100)
    assert 800 < network.dropped < 1200
    assert 300 < network.duplicated < 520
    assert len(arrived) == 5000 - network.dropped + network.duplicated
    assert sum(1 for kind, _ in events if kind == "dup") == network.duplicated


def test_network_partitions_symmetric_one_way_and_heal():
    scheduler, network, arrived, _ = _network()
    network.partition([[1], [2, 3]])
    for source, destination in ((1, 2), (2, 1), (1, 3), (2, 3), (3, 2)):
        network.send(_message(source, destination, 0))
    scheduler.run_until(20)
    assert sorted((m.source, m.destination) for m in arrived) == [(2, 3), (3, 2)]
    arrived.clear()
    network.heal()
    network.block(1, 2)
    network.send(_message(1, 2, 1))
    network.send(_message(2, 1, 2))
    scheduler.run_until(40)
    assert [(m.source, m.destination) for m in arrived] == [(2, 1)]


def test_network_partition_at_arrival_drops_messages_in_flight():
    scheduler, network, arrived, _ = _network(NetworkParams(delay_ms_min=5, delay_ms_max=5))
    network.send(_message(1, 2, 0))
    scheduler.run_until(2)
    network.partition([[1], [2]])
    scheduler.run_until(10)
    assert arrived == [] and network.dropped == 1


def test_network_loses_messages_to_down_or_restarted_nodes():
    scheduler, network, arrived, _ = _network(NetworkParams(delay_ms_min=5, delay_ms_max=5))
    network.send(_message(1, 2, 0))  # 2 restarts while this is in flight
    network.node_down(3)
    network.send(_message(1, 3, 1))  # 3 is down
    scheduler.run_until(1)
    network.node_down(2)
    network.node_up(2, 2)
    network.send(_message(1, 2, 2))  # sent to the new incarnation
    scheduler.run_until(20)
    assert [m.correlation_id for m in arrived] == [2]
    assert not network.is_up(3) and network.is_up(2)


def test_network_is_deterministic_per_seed():
    params = NetworkParams(drop_probability=0.1, duplicate_probability=0.1,
                           spike_probability=0.1, spike_ms_max=50)

    def run(seed):
        scheduler, network, arrived, _ = _network(params, seed)
        for i in range(300):
            network.send(_message(1 + i % 3, 1 + (i + 1) % 3, i))
        scheduler.run_until(1000)
        return [m.correlation_id for m in arrived]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_network_params_are_checked_and_calm():
    with pytest.raises(ValueError):
        NetworkParams(delay_ms_min=5, delay_ms_max=4)
    with pytest.raises(ValueError):
        NetworkParams(drop_probability=1.5)
    calm = NetworkParams(drop_probability=0.5, duplicate_probability=0.5,
                         spike_probability=0.5, spike_ms_max=9).calm()
    assert (calm.drop_probability, calm.duplicate_probability, calm.spike_probability) == (0, 0, 0)


# ---------------------------------------------------------------------- state machine


def _data_batch(base, values, epoch=1):
    data = codec.encode_batch(values, timestamp=0, base_offset=base, leader_epoch=epoch)
    return CommittedBatch(base, base + len(values) - 1, epoch, False, data)


def _control_batch(base, epoch=1):
    data = encode_control_batch(
        [LeaderChangeMessage(version=0, leader_id=1, voters=[], granting_voters=[])],
        base_offset=base, leader_epoch=epoch, timestamp=0)
    return CommittedBatch(base, base, epoch, True, data)


def test_snapshot_round_trip_and_padding():
    data = encode_snapshot(10, 7, 0xDEADBEEF, epoch=3, timestamp=99, padding_bytes=500)
    assert len(data) > 500
    assert decode_snapshot(data) == (10, 7, 0xDEADBEEF)
    batches = codec.decode_batches(data)
    assert [b.is_control for b in batches] == [True, False, True]
    assert all(b.partition_leader_epoch == 3 for b in batches)


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_footer", "foreign"])
def test_snapshot_decode_refuses_damage(damage):
    data = encode_snapshot(10, 7, 1, epoch=3, timestamp=99)
    if damage == "truncate":
        bad = data[:-5]
    elif damage == "flip":
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 0xFF
        bad = bytes(bad)
    elif damage == "no_footer":
        batches = codec.decode_batches(data)
        bad = data[:batches[2].position]
    else:
        bad = codec.encode_batch([b"x"], timestamp=0) * 3
    with pytest.raises(SimViolation):
        decode_snapshot(bad)


def test_state_machine_applies_in_order_and_snapshots():
    a, b = StateMachine(), StateMachine()
    batches = [_control_batch(0), _data_batch(1, [b"a", b"b"]), _data_batch(3, [b"c"])]
    applied = [a.apply(batch) for batch in batches]
    assert applied == [[], [(1, b"a"), (2, b"b")], [(3, b"c")]]
    assert (a.next_offset, a.count) == (4, 3)
    data = a.snapshot(epoch=1, timestamp=0)
    b.load_snapshot(SnapshotId(4, 1), data)
    assert (b.next_offset, b.count, b.digest) == (a.next_offset, a.count, a.digest)
    b.apply(_data_batch(4, [b"d"]))
    a.apply(_data_batch(4, [b"d"]))
    assert b.digest == a.digest


def test_state_machine_refuses_gaps_overlaps_and_wrong_snapshots():
    sm = StateMachine()
    with pytest.raises(SimViolation, match="expects offset 0"):
        sm.apply(_data_batch(1, [b"a"]))
    sm.apply(_data_batch(0, [b"a", b"b"]))
    with pytest.raises(SimViolation):
        sm.apply(_data_batch(1, [b"b"]))
    with pytest.raises(SimViolation, match="holds the state at offset 2"):
        sm.load_snapshot(SnapshotId(5, 1), sm.snapshot(epoch=1, timestamp=0))


def test_state_machine_digest_depends_on_values_and_order():
    def digest(values):
        sm = StateMachine()
        sm.apply(_data_batch(0, values))
        return sm.digest

    assert digest([b"a", b"b"]) == digest([b"a", b"b"])
    assert digest([b"a", b"b"]) != digest([b"b", b"a"])
    assert digest([b"a", b"b"]) != digest([b"a", b"c"])


# ---------------------------------------------------------------------- invariants


class _Node:
    """A hand-made node for the checker: a storage, an optional fake core."""

    def __init__(self, node_id, is_voter=True):
        self.node_id = node_id
        self.is_voter = is_voter
        self.storage = MemoryStorage()
        self.election_state = None
        self.core = None

    @property
    def up(self):
        return self.core is not None

    def now_ms(self):
        return 0

    def set(self, role, epoch, leader_id=None, high_watermark=None):
        self.core = types.SimpleNamespace(role=role, epoch=epoch, leader_id=leader_id,
                                          high_watermark=high_watermark,
                                          log_end_offset=self.storage.log_end_offset)


def _cluster(voters=3, observers=0):
    nodes = {i: _Node(i) for i in range(1, voters + 1)}
    for i in range(voters + 1, voters + observers + 1):
        nodes[i] = _Node(i, is_voter=False)
    return nodes, Checker(nodes)


def test_checker_single_leader_over_memory_and_persisted_states():
    nodes, checker = _cluster()
    nodes[1].set("leader", 2, leader_id=1)
    checker.check_node(nodes[1])
    nodes[2].set("follower", 2, leader_id=1)
    checker.check_node(nodes[2])
    checker.on_persisted_election(nodes[3], ElectionState(epoch=2, leader_id=1))
    with pytest.raises(SimViolation, match="single leader: epoch 2"):
        checker.on_persisted_election(nodes[3], ElectionState(epoch=2, leader_id=3))
    nodes[3].set("leader", 2, leader_id=3)
    with pytest.raises(SimViolation, match="single leader"):
        checker.check_node(nodes[3])


def test_checker_epochs_never_go_back():
    nodes, checker = _cluster()
    checker.on_persisted_election(nodes[1], ElectionState(epoch=3))
    with pytest.raises(SimViolation, match="monotonic epoch"):
        checker.on_persisted_election(nodes[1], ElectionState(epoch=2))
    nodes[1].set("unattached", 2)
    with pytest.raises(SimViolation, match="below its persisted epoch"):
        checker.check_node(nodes[1])
    nodes[2].set("unattached", 5)
    checker.check_node(nodes[2])
    nodes[2].set("unattached", 4)
    with pytest.raises(SimViolation, match="monotonic epoch"):
        checker.check_node(nodes[2])
    checker.on_crash(nodes[2])  # a restart may come back lower than memory was
    checker.check_node(nodes[2])


def test_checker_no_epoch_above_the_last_one_is_persisted():
    from kraftcore.limits import RAFT_EPOCH_MAX

    nodes, checker = _cluster()
    checker.on_persisted_election(nodes[1], ElectionState(epoch=RAFT_EPOCH_MAX))
    with pytest.raises(SimViolation, match="above the last epoch"):
        checker.on_persisted_election(nodes[2], ElectionState(epoch=RAFT_EPOCH_MAX + 1))


def test_checker_one_vote_per_epoch_and_observers_never_vote():
    nodes, checker = _cluster(observers=1)
    checker.on_persisted_election(nodes[1], ElectionState(epoch=1, voted_id=2))
    checker.on_persisted_election(nodes[1], ElectionState(epoch=1, voted_id=2, leader_id=2))
    with pytest.raises(SimViolation, match="one vote per epoch"):
        checker.on_persisted_election(nodes[1], ElectionState(epoch=1, voted_id=3))
    with pytest.raises(SimViolation, match="observers never vote"):
        checker.on_persisted_election(nodes[4], ElectionState(epoch=1, voted_id=2))
    with pytest.raises(SimViolation, match="not a voter"):
        checker.on_persisted_election(nodes[2], ElectionState(epoch=1, voted_id=4))
    vote = type("VoteRequest", (), {})()
    with pytest.raises(SimViolation, match="observers never vote"):
        checker.on_send(nodes[4], RaftMessage(4, 1, 0, vote))
    checker.on_send(nodes[1], RaftMessage(1, 2, 0, vote))
    nodes[4].set("candidate", 3)
    with pytest.raises(SimViolation, match="observers never vote"):
        checker.check_node(nodes[4])


def test_checker_high_watermark_monotonic_and_below_log_end():
    nodes, checker = _cluster()
    node = nodes[1]
    node.storage.append_as_leader(codec.encode_batch([b"a", b"b"], timestamp=0), 1)
    node.set("follower", 1, leader_id=2, high_watermark=2)
    checker.check_node(node)
    node.set("follower", 1, leader_id=2, high_watermark=None)
    checker.check_node(node)
    node.set("follower", 1, leader_id=2, high_watermark=1)
    with pytest.raises(SimViolation, match="monotonic high watermark"):
        checker.check_node(node)
    node.set("follower", 1, leader_id=2, high_watermark=3)
    with pytest.raises(SimViolation, match="past its log end offset"):
        checker.check_node(node)


def _append(node, values, epoch, flush=True):
    node.storage.append_as_leader(codec.encode_batch(values, timestamp=0), epoch)
    if flush:
        node.storage.flush()


def test_checker_majority_counts_voters_durably_never_observers():
    nodes, checker = _cluster(voters=3, observers=2)
    for node_id in (1, 4, 5):
        _append(nodes[node_id], [b"a"], 1)
    _append(nodes[2], [b"a"], 1, flush=False)
    nodes[1].set("leader", 1, leader_id=1, high_watermark=1)
    ready = Ready(1, high_watermark=1)
    with pytest.raises(SimViolation, match="majority reached high watermark"):
        checker.on_ready(nodes[1], ready)
    nodes[2].storage.flush()
    checker.on_ready(nodes[1], Ready(2, high_watermark=1))
    with pytest.raises(SimViolation, match="Ready 2 after Ready 2"):
        checker.on_ready(nodes[1], Ready(2))


def test_committed_log_detects_mismatches_and_overlaps():
    log = CommittedLog()
    log.record(0, 2, 1, b"x", "a")
    log.record(0, 2, 1, b"x", "b")
    log.record(5, 6, 2, b"z", "a")  # a gap is allowed
    with pytest.raises(SimViolation, match="different bytes"):
        log.record(0, 2, 1, b"y", "c")
    with pytest.raises(SimViolation, match="epoch"):
        log.record(0, 2, 2, b"x", "c")
    with pytest.raises(SimViolation, match="inside"):
        log.record(1, 2, 1, b"x", "c")
    with pytest.raises(SimViolation, match="overlapping"):
        log.record(3, 5, 1, b"x", "c")
    log.record(3, 4, 1, b"w", "c")
    assert log.end_offset == 7 and len(log) == 3
    assert log.epoch_at(4) == 1 and log.epoch_at(6) == 2 and log.epoch_at(7) is None


def test_checker_commits_digests_and_values():
    nodes, checker = _cluster()
    checker.proposed = {b"a", b"b", b"c"}
    sm1, sm2 = StateMachine(), StateMachine()
    batch = _data_batch(0, [b"a", b"b"])
    checker.on_commit(nodes[1], batch, sm1.apply(batch), sm1)
    checker.on_commit(nodes[2], batch, sm2.apply(batch), sm2)
    other = _data_batch(0, [b"a", b"c"])
    sm3 = StateMachine()
    with pytest.raises(SimViolation, match="log matching"):
        checker.on_commit(nodes[3], other, sm3.apply(other), sm3)
    stray = _data_batch(2, [b"q"])
    with pytest.raises(SimViolation, match="nobody proposed"):
        checker.on_commit(nodes[1], stray, sm1.apply(stray), sm1)
    moved = _data_batch(3, [b"a"])
    sm4 = StateMachine()
    sm4.next_offset = 3
    with pytest.raises(SimViolation, match="committed at offset 0"):
        checker.on_commit(nodes[2], moved, sm4.apply(moved), sm4)


def test_checker_leader_must_hold_everything_committed():
    nodes, checker = _cluster()
    batch = _data_batch(0, [b"a", b"b"])
    checker.on_commit(nodes[1], batch, [], StateMachine())
    checker.high_watermark_max = 2
    nodes[2].set("leader", 2, leader_id=2)
    with pytest.raises(SimViolation, match="committed data lost"):
        checker.check_node(nodes[2])
    nodes[3].storage.append_as_follower(batch.data)
    nodes[3].set("leader", 3, leader_id=3)
    checker.check_node(nodes[3])
    # A different batch in the same place is a log-matching failure.
    _append(nodes[1], [b"a", b"z"], 1)
    nodes[1].set("leader", 4, leader_id=1)
    with pytest.raises(SimViolation, match="log matching"):
        checker.check_node(nodes[1])


def test_checker_snapshots_at_log_start_hold_the_committed_state():
    nodes, checker = _cluster()
    node = nodes[1]
    sm = StateMachine()
    batch = _data_batch(0, [b"a", b"b"])
    node.storage.append_as_follower(batch.data)
    checker.on_commit(node, batch, sm.apply(batch), sm)
    node.storage.write_snapshot(SnapshotId(2, 1), sm.snapshot(epoch=1, timestamp=0))
    checker.check_snapshots(node)
    node.storage.advance_log_start_offset(SnapshotId(2, 1))
    checker.check_snapshots(node)
    wrong = encode_snapshot(2, 2, sm.digest ^ 1, epoch=1, timestamp=0)
    node.storage.write_snapshot(SnapshotId(2, 2), wrong)
    with pytest.raises(SimViolation, match="state machines had"):
        checker.check_snapshots(node)
