"""Scripted data-plane scenarios (`python -m kraftcore.sim.data_scenarios [a|b|c|d|e_off|e_on]`):
the simulator of `kraftcore.sim.data_plane` with its random faults off, driven step by step,
each ending with a readable transcript and the outcome it demonstrates
(kafka-broker-facts §C; the invariants of `kraftcore.sim.data_checks` hold throughout):

* **a** acks=all, replication factor 3, min.insync.replicas 2: the leader crashes (losing
  its unflushed writes) while a batch is replicated but not yet acknowledged; producers
  retry. Nothing acknowledged is lost; the retried batch is written twice without
  idempotence, once with it.
* **b** acks=1: records the leader acknowledged before any follower fetched them are lost
  when it dies; the old leader truncates them when it returns.
* **c** a follower paused (SIGSTOP) past replica.lag.time.max.ms is dropped from the ISR
  by the leader's AlterPartition, and added back once it has caught up.
* **d** min.insync.replicas 2 with two of three replicas down: acks=all is refused with
  NOT_ENOUGH_REPLICAS before anything is written; acks=1 records are appended but the high
  watermark stays, so consumers do not see them until the ISR has grown back.
* **e_off** / **e_on** the ISR has shrunk to the leader alone (min.insync.replicas 1) and
  the leader dies. Unclean election off: the partition has no leader and an empty ISR,
  even once the old leader is back. On: a replica outside the ISR leads, the records only
  the old leader had are lost (counted), and the old leader truncates when it returns.
"""

import dataclasses
import sys

from kraftcore import codec
from kraftcore.protocol import framing
from kraftcore.sim.data_plane import TOPIC, DataParams, DataPlaneSim
from kraftcore.sim.network import NetworkParams
from kraftcore.sim.state_machine import SimViolation

__all__ = ["SCENARIOS", "ScenarioResult", "run_scenario"]

BASE = dict(partitions=1, network=NetworkParams(delay_ms_min=1, delay_ms_max=5),
            crash_interval_ms=0, pause_interval_ms=0, partition_interval_ms=0)


class ScenarioError(Exception):
    """A scenario did not reach the state it waits for."""


@dataclasses.dataclass
class ScenarioResult:
    name: str
    title: str
    outcome: dict
    transcript: list
    violation: str = None

    def text(self):
        lines = [f"scenario {self.name}: {self.title}"]
        lines += [f"t={t} {text}" for t, text in self.transcript]
        lines.append("outcome: " + ", ".join(f"{k}={v}" for k, v in self.outcome.items()))
        if self.violation:
            lines.append(f"VIOLATION: {self.violation}")
        return "\n".join(lines)


# ============================================================================ helpers

def _record(sim, index=0):
    return sim.controller.image.topic(TOPIC).partitions[index]


def _leader(sim, index=0):
    return _record(sim, index).leader


def _partition(sim, broker_id, index=0):
    broker = sim.brokers[broker_id]
    if broker.replicas is None:
        return None
    return broker.replicas.by_name.get((TOPIC, index))


def _wait(sim, what, condition, max_ms):
    sim.run_for(max_ms, stop=condition)
    if not condition():
        raise ScenarioError(f"{what}: not reached within {max_ms} ms")
    sim.note(f"scenario: {what}")


def _full_isr(sim, index=0):
    record = _record(sim, index)
    if record.leader < 0 or len(record.isr) != len(record.replicas):
        return False
    partition = _partition(sim, record.leader, index)
    return partition is not None and partition.role == "leader" \
        and partition.leader_epoch == record.leader_epoch


def _values_of(msg):
    body = framing.decode_request(msg.payload[4:]).body
    data = body.topic_data[0].partition_data[0].records
    return [bytes(r.value) for b in codec.decode_batches(data) for r in b.records]


def _replicated_unacked(sim, producer_id, index=0):
    """(leader, values) of a parked acks=all produce of `producer_id` on the leader whose
    records every follower already holds, or None."""
    leader_id = _leader(sim, index)
    if leader_id < 0:
        return None
    leader = sim.brokers[leader_id]
    if not leader.up:
        return None
    for _, _, msg in leader.parked:
        if msg.api != 0 or msg.source != producer_id:
            continue
        values = _values_of(msg)
        everywhere = True
        for b in sim.brokers.values():
            if b.node_id == leader_id:
                continue
            partition = _partition(sim, b.node_id, index)
            if partition is None:
                everywhere = False
                break
            mirror = sim.checker.mirrors.get((b.node_id, b.incarnation, partition.topic_id,
                                              index))
            held = {v for _, v in mirror.entries} if mirror is not None else set()
            if not set(values) <= held:
                everywhere = False
                break
        if everywhere:
            return leader_id, values
    return None


def _duplicates_by_producer(sim, index=0):
    out = {}
    committed = sim.checker.committed.get((sim.topic_id, index), [])
    counts = {}
    for _, value in committed:
        counts[value] = counts.get(value, 0) + 1
    for value, n in counts.items():
        producer = int(value.split(b"-", 1)[0])
        out[producer] = out.get(producer, 0) + (n - 1)
    return out


def _lost_acks(sim, acked, index=0):
    committed = sim.checker.committed.get((sim.topic_id, index), [])
    lost = []
    for value, (key, offset) in acked.items():
        if key[1] != index:
            continue
        if offset >= len(committed) or committed[offset][1] != value:
            lost.append(value)
    return lost


def _new_sim(**overrides):
    params = DataParams(**{**BASE, **overrides})
    sim = DataPlaneSim(params, keep_transcript=True)
    sim.setup()
    return sim


def _drain(sim, max_ms=3000):
    for producer in sim.producers:
        producer.stopped = True

    def idle():
        return all(s["values"] is None for p in sim.producers for s in p.state.values())

    _wait(sim, "every producer's last batch is acknowledged", idle, max_ms)


# ============================================================================ scenarios

def scenario_a(sim_holder):
    """acks=all, RF 3, min ISR 2: the leader crashes mid-stream."""
    sim = sim_holder.sim = _new_sim(seed=11, producers=((-1, True), (-1, False)))
    idempotent, plain = sim.producers[0].node_id, sim.producers[1].node_id
    sim.start_clients()
    sim.run_for(200)
    crashes = 0
    for round_, producer_id in enumerate((plain, idempotent, plain, idempotent)):
        found = []

        def replicated():
            hit = _replicated_unacked(sim, producer_id)
            if hit is not None:
                found[:] = [hit]
            return hit is not None

        kind = "idempotent" if producer_id == idempotent else "non-idempotent"
        _wait(sim, f"the leader holds an unacknowledged batch of the {kind} producer "
              "that every follower already fetched", replicated, 3000)
        leader_id, values = found[0]
        sim.note(f"scenario: crash leader {leader_id} (losing unflushed writes) before it "
                 f"answers {[v.decode() for v in values]}")
        sim.brokers[leader_id].crash(lose_unflushed=True)
        crashes += 1
        sim.scheduler.after(300, sim.brokers[leader_id].start)
        _wait(sim, "a new leader, and every replica back in the ISR", lambda: _full_isr(sim),
              5000)
    _drain(sim)
    dups = _duplicates_by_producer(sim)
    lost = _lost_acks(sim, sim.acked_values)
    return {"leader_crashes": crashes, "acked_all": sim.acks_by_mode[-1],
            "lost_acked": len(lost), "duplicates_idempotent": dups.get(idempotent, 0),
            "duplicates_non_idempotent": dups.get(plain, 0)}


def _pause_followers(sim):
    """SIGSTOP every broker but the partition's leader: (leader id, [paused ids])."""
    leader_id = _leader(sim)
    followers = [b for b in sim.brokers if b != leader_id]
    for b in followers:
        sim.brokers[b].pause()
    return leader_id, followers


def scenario_b(sim_holder):
    """acks=1: an acknowledged but unreplicated record is lost with its leader."""
    sim = sim_holder.sim = _new_sim(seed=12, producers=((1, False),))
    sim.start_clients()
    sim.run_for(200)
    leader_id, followers = _pause_followers(sim)
    sim.note(f"scenario: followers {followers} paused (SIGSTOP); leader {leader_id} goes on "
             "acknowledging acks=1 writes alone")
    end_before = _partition(sim, leader_id).log_end_offset
    sim.run_for(80)
    unreplicated = {v: loc for v, loc in sim.acked_1.items() if loc[1] >= end_before}
    sim.note(f"scenario: {len(unreplicated)} records acknowledged at offsets >= {end_before}"
             f" (the leader's log end when the followers stopped); crash leader {leader_id} "
             "(its writes survive on disk) and resume the followers")
    sim.brokers[leader_id].crash(lose_unflushed=False)
    for b in followers:
        sim.brokers[b].resume()
    sim.scheduler.after(200, sim.brokers[leader_id].start)
    _wait(sim, "a new leader, and the old leader back in the ISR", lambda: _full_isr(sim)
          and _leader(sim) != leader_id, 5000)
    _drain(sim)
    lost = _lost_acks(sim, unreplicated)
    return {"acked_1_unreplicated": len(unreplicated), "lost_acks_1": len(lost),
            "lost_acks_1_total": len(_lost_acks(sim, sim.acked_1)),
            "new_leader": _leader(sim)}


def scenario_c(sim_holder):
    """A paused follower leaves the ISR after replica.lag.time.max.ms and comes back."""
    sim = sim_holder.sim = _new_sim(seed=13, producers=((-1, True),), session_timeout_ms=3000)
    lag = sim.params.replica_lag_time_max_ms
    sim.start_clients()
    sim.run_for(200)
    leader_id = _leader(sim)
    follower = max(b for b in sim.brokers if b != leader_id)
    caught_up_ms = _partition(sim, leader_id).followers[follower].last_caught_up_ms
    paused_at = sim.scheduler.now_ms
    sim.brokers[follower].pause()
    sim.note(f"scenario: follower {follower} paused; the leader last saw it caught up at "
             f"t={caught_up_ms}")
    acked_before = sim.acks_by_mode[-1]
    _wait(sim, f"the ISR without broker {follower}",
          lambda: follower not in _record(sim).isr, 3000)
    shrunk_at = sim.scheduler.now_ms
    sim.run_for(300)
    acked_paused = sim.acks_by_mode[-1] - acked_before
    sim.brokers[follower].resume()
    sim.note(f"scenario: follower {follower} resumes")
    resumed_at = sim.scheduler.now_ms
    _wait(sim, f"broker {follower} back in the ISR", lambda: follower in _record(sim).isr,
          3000)
    grown_at = sim.scheduler.now_ms
    leader = _partition(sim, _leader(sim))
    back = _partition(sim, follower)
    _drain(sim)
    return {"lag_ms": lag, "paused_at": paused_at, "last_caught_up_ms": caught_up_ms,
            "shrunk_at": shrunk_at, "shrink_after_caught_up_ms": shrunk_at - caught_up_ms,
            "acked_all_while_shrunk": acked_paused, "resumed_at": resumed_at,
            "grown_at": grown_at, "follower_end_at_expand": back.log_end_offset,
            "leader_hw_at_expand": leader.high_watermark}


def scenario_d(sim_holder):
    """min ISR 2 with two of three replicas down."""
    sim = sim_holder.sim = _new_sim(seed=14, producers=((-1, True), (1, False)))
    all_id, one_id = sim.producers[0].node_id, sim.producers[1].node_id
    sim.start_clients()
    sim.run_for(200)
    leader_id = _leader(sim)
    followers = [b for b in sim.brokers if b != leader_id]
    for b in followers:
        sim.brokers[b].crash(lose_unflushed=False)
    _wait(sim, f"the ISR is the leader {leader_id} alone",
          lambda: list(_record(sim).isr) == [leader_id], 3000)
    leader = _partition(sim, leader_id)
    hw, end = leader.high_watermark, leader.log_end_offset
    errors_before = sim.producers[0].errors["NOT_ENOUGH_REPLICAS"]
    acked_1_before = set(sim.acked_1)
    sim.run_for(400)
    refused = sim.producers[0].errors["NOT_ENOUGH_REPLICAS"] - errors_before
    invisible = {v: loc for v, loc in sim.acked_1.items() if v not in acked_1_before}
    hw_frozen = leader.high_watermark == hw
    end_grew = leader.log_end_offset - end
    consumer = sim.consumers[0]
    consumer_below_hw = consumer.position <= leader.high_watermark
    sim.note(f"scenario: {refused} acks=all NOT_ENOUGH_REPLICAS, {len(invisible)} acks=1 "
             f"records appended at offsets >= {end} (log end {leader.log_end_offset}) while "
             f"the high watermark stays at {leader.high_watermark}; the consumer is at "
             f"{consumer.position}")
    for b in followers:
        sim.brokers[b].start()
    _wait(sim, "every replica back in the ISR", lambda: _full_isr(sim), 5000)
    last = max(loc[1] for loc in invisible.values()) if invisible else -1
    _wait(sim, f"the consumer has read past offset {last}",
          lambda: consumer.position > last, 3000)
    _drain(sim)
    return {"not_enough_replicas": refused, "acks_1_while_isr_1": len(invisible),
            "hw_frozen": hw_frozen, "log_end_grew_by": end_grew,
            "consumer_saw_none_while_frozen": consumer_below_hw,
            "visible_after_recovery": consumer.position > last,
            "acked_all_producer": all_id, "acks_1_producer": one_id}


def _unclean(sim_holder, unclean):
    sim = sim_holder.sim = _new_sim(seed=15, producers=((-1, True),), min_isr=1,
                                    unclean=unclean, session_timeout_ms=2000)
    sim.start_clients()
    sim.run_for(200)
    leader_id, followers = _pause_followers(sim)
    sim.note(f"scenario: followers {followers} paused; leader {leader_id} will shrink the ISR "
             "to itself (min.insync.replicas 1 lets it go on committing)")
    _wait(sim, f"the ISR is [{leader_id}]", lambda: list(_record(sim).isr) == [leader_id],
          3000)
    sim.run_for(200)
    leader = _partition(sim, leader_id)
    committed_alone = leader.high_watermark
    sim.note(f"scenario: leader {leader_id} alone has committed up to offset "
             f"{committed_alone}; crash it (its writes survive) and resume the followers")
    sim.brokers[leader_id].crash(lose_unflushed=False)
    for b in followers:
        sim.brokers[b].resume()
    outcome = {}
    if not unclean:
        _wait(sim, "the partition has no leader and an empty ISR",
              lambda: _leader(sim) < 0 and not _record(sim).isr, 4000)
        sim.brokers[leader_id].start()
        _wait(sim, f"broker {leader_id} registered again and unfenced",
              lambda: not sim.brokers[leader_id].fenced, 4000)
        acked = sim.acks_by_mode[-1]
        sim.run_for(1000)
        record = _record(sim)
        outcome.update(offline=record.leader < 0, isr=list(record.isr),
                       acked_while_offline=sim.acks_by_mode[-1] - acked)
    else:
        _wait(sim, "a replica outside the ISR leads",
              lambda: _leader(sim) in followers, 4000)
        new_leader = _leader(sim)
        sim.scheduler.after(100, sim.brokers[leader_id].start)
        _wait(sim, f"the old leader {leader_id} is back in the ISR",
              lambda: leader_id in _record(sim).isr and _full_isr(sim), 5000)
        _drain(sim)
        outcome.update(new_leader=new_leader, recovering=_record(sim).leader_recovery_state)
    checker = sim.checker
    outcome.update(committed_by_leader_alone=committed_alone,
                   lost_committed_records=checker.lost_records,
                   lost_acked_all=checker.lost_acked,
                   consumer_resets=sum(c.resets for c in sim.consumers))
    return outcome


def scenario_e_off(sim_holder):
    """Unclean election off: offline with an empty ISR."""
    return _unclean(sim_holder, False)


def scenario_e_on(sim_holder):
    """Unclean election on: a replica outside the ISR leads; the loss is counted."""
    return _unclean(sim_holder, True)


SCENARIOS = {
    "a": (scenario_a, "acks=all, RF 3, min ISR 2: the leader crashes mid-stream"),
    "b": (scenario_b, "acks=1: an acknowledged, unreplicated record is lost with its leader"),
    "c": (scenario_c, "a paused follower leaves the ISR after replica.lag.time.max.ms and "
                      "comes back"),
    "d": (scenario_d, "min ISR 2, two of three replicas down: NOT_ENOUGH_REPLICAS, and "
                      "acks=1 records invisible until the ISR recovers"),
    "e_off": (scenario_e_off, "unclean election off: the leader of a one-member ISR dies, "
                              "the partition goes offline"),
    "e_on": (scenario_e_on, "unclean election on: a replica outside the ISR leads, the old "
                            "leader truncates, the loss is counted"),
}


def run_scenario(name):
    """Run scenario `name`; returns its `ScenarioResult` (a violation or an unreached step
    is reported in `violation`, never raised)."""
    function, title = SCENARIOS[name]
    holder = type("Holder", (), {"sim": None})()
    outcome, violation = {}, None
    try:
        outcome = function(holder)
        if holder.sim is not None:
            holder.sim.final_check()
    except (SimViolation, ScenarioError) as exc:
        violation = f"{type(exc).__name__}: {exc}"
    finally:
        sim = holder.sim
        transcript = list(sim.transcript) if sim is not None else []
        if sim is not None:
            sim.close()
    return ScenarioResult(name, title, outcome, transcript, violation)


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:]) or list(SCENARIOS)
    failed = False
    for name in names:
        result = run_scenario(name)
        print(result.text())
        print()
        failed |= result.violation is not None
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
