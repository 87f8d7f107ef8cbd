"""BrokerLifecycle: registration, heartbeats, the lease, fencing and unfencing, controlled
shutdown, re-registration, request timeouts with backoff and NOT_CONTROLLER redirects
(kafka-facts §8.2, §8.3) — first against hand-written controller answers, then end to end
against a real `QuorumController` over the controller tests' FakeRaft."""

import pytest

from kraftcore.broker import metadata as broker_metadata
from kraftcore.broker.lifecycle import (FENCED, OFFLINE, ONLINE, STOPPING, BrokerLifecycle,
                                        BrokerState, HeartbeatRequest, RegisterRequest,
                                        submit_request)
from kraftcore.controller.replication import NewTopic
from kraftcore.errors import ConfigError, ControllerError, NotControllerError
from kraftcore.limits import BROKER_TRANSITIONS_KEPT_MAX
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import HeartbeatResult, RegistrationResult, Uuid
from tests.controller.harness import Harness

INCARNATION = Uuid.from_ints(0xB0, 1)
LISTENERS = (("PLAINTEXT", "localhost", 9092, 0),)
LOG_DIRS = (Uuid.from_ints(0xD1, 1),)


def make(**kwargs):
    args = dict(cluster_id="kraftcore-cluster", listeners=LISTENERS, log_dirs=LOG_DIRS)
    args.update(kwargs)
    return BrokerLifecycle(1, INCARNATION, **args)


def one(life, now):
    """poll() must return exactly one request now."""
    requests, _ = life.poll(now)
    assert len(requests) == 1, requests
    return requests[0]


def nothing(life, now):
    requests, deadline = life.poll(now)
    assert requests == [], requests
    return deadline


def hb(caught_up=True, fenced=False, shut_down=False):
    return HeartbeatResult(caught_up, fenced, shut_down)


def error(code, text="refused"):
    return ControllerError(code, text)


def registered(now=0, epoch=10, **kwargs):
    """A lifecycle that registered at `now` with `epoch`; returns it and `now`."""
    life = make(**kwargs)
    life.start(now)
    request = one(life, now)
    assert life.on_response(request, RegistrationResult(epoch), now)
    return life


def online(now=0, epoch=10, **kwargs):
    life = registered(now, epoch, **kwargs)
    request = one(life, now)
    assert life.on_response(request, hb(caught_up=True, fenced=False), now)
    assert life.state == ONLINE
    return life


# ============================================================================ unit


def test_before_start_nothing_happens_and_kafka_state_is_not_running():
    life = make()
    assert life.state == OFFLINE
    assert life.broker_state == BrokerState.NOT_RUNNING == 0
    assert life.poll(0) == ([], None)
    assert not life.is_online and not life.registered and not life.done
    life.start(0)
    with pytest.raises(RuntimeError):
        life.start(1)


def test_start_sends_one_registration_and_waits_for_its_answer():
    life = make(rack="r1", features={"metadata.version": (1, 21)})
    life.start(100)
    assert life.broker_state == BrokerState.STARTING
    request = one(life, 100)
    assert request == RegisterRequest(1, INCARNATION, "kraftcore-cluster", "r1", LISTENERS,
                                      {"metadata.version": (1, 21)}, LOG_DIRS)
    # One request in flight: nothing more until it is answered or times out.
    assert nothing(life, 150) == 100 + life.request_timeout_ms
    assert life.inflight is request
    assert life.state == OFFLINE


def test_registration_makes_the_broker_fenced_then_heartbeats_unfence_it():
    life = make()
    life.start(0)
    assert life.on_response(one(life, 0), RegistrationResult(42), 5)
    assert (life.state, life.broker_epoch, life.broker_state) == (FENCED, 42,
                                                                  BrokerState.STARTING)
    # The first heartbeat goes at once, with the metadata offset the broker has applied.
    life.set_metadata_offset(40)
    request = one(life, 5)
    assert request == HeartbeatRequest(1, 42, 40, False, False)
    life.on_response(request, hb(caught_up=False, fenced=True), 6)
    assert life.state == FENCED and not life.is_caught_up
    # The next heartbeat waits a heartbeat interval.
    assert nothing(life, 6 + 1999) == 6 + 2000
    life.set_metadata_offset(45)
    request = one(life, 2006)
    assert request.metadata_offset == 45
    life.on_response(request, hb(caught_up=True, fenced=True), 2007)
    assert life.state == FENCED and life.broker_state == BrokerState.RECOVERY
    request = one(life, 4007)
    life.on_response(request, hb(caught_up=True, fenced=False), 4008)
    assert life.state == ONLINE and life.is_online
    assert life.broker_state == BrokerState.RUNNING
    assert [(t.from_state, t.to_state) for t in life.transitions] == [
        (OFFLINE, FENCED), (FENCED, ONLINE)]
    assert life.transitions[0].now_ms == 5 and "epoch 42" in life.transitions[0].reason
    assert life.transitions[1].reason == "unfenced by the controller"


def test_controller_fencing_an_online_broker_and_unfencing_it_again():
    life = online()
    request = one(life, 2000)
    life.on_response(request, hb(fenced=True), 2000)
    assert life.state == FENCED and life.transitions[-1].reason == "fenced by the controller"
    request = one(life, 4000)
    assert request.want_fence is False  # it keeps asking to be unfenced
    life.on_response(request, hb(fenced=False), 4000)
    assert life.state == ONLINE


def test_lease_loss_fences_the_broker_which_keeps_heartbeating_until_unfenced():
    life = online(now=0)  # lease from the heartbeat sent at 0
    assert life.lease_deadline_ms() == 9000
    # From now on nothing is answered (the controller is unreachable): the heartbeat at
    # 2000 times out at 4000, retries back off (100, 200, 400 ms) and time out in turn.
    sent = []
    now = 2000
    while now < 9000:
        requests, deadline = life.poll(now)
        sent += [(now, r) for r in requests]
        assert life.state == ONLINE
        assert deadline <= 9000  # the lease deadline is always among the deadlines
        now = deadline
    assert [t for t, _ in sent] == [2000, 4100, 6300, 8700]
    assert all(type(r) is HeartbeatRequest and not r.want_fence for _, r in sent)
    requests, deadline = life.poll(9000)
    assert requests == [] and deadline == 8700 + 2000  # the retry still in flight
    assert life.state == FENCED and life.broker_state == BrokerState.RECOVERY
    assert life.transitions[-1].reason.startswith("lease lost")
    assert life.transitions[-1].now_ms == 9000
    assert life.registered and life.broker_epoch == 10  # the registration is kept
    # It keeps heartbeating, asking to be unfenced, and the controller answers again.
    assert nothing(life, deadline) == deadline + 800
    request = one(life, deadline + 800)
    assert type(request) is HeartbeatRequest and request.want_fence is False
    life.on_response(request, hb(fenced=False), deadline + 801)
    assert life.state == ONLINE
    assert life.transitions[-1].reason == "unfenced by the controller"
    assert life.lease_deadline_ms() == deadline + 800 + 9000


def test_the_lease_runs_from_when_the_heartbeat_was_sent_not_answered():
    life = online(now=0)
    request = one(life, 2000)
    life.on_response(request, hb(), 3500)  # a slow answer
    assert life.lease_deadline_ms() == 2000 + 9000
    # The next heartbeat goes at 5500 and is never answered; retries are never answered.
    now = 5500
    while now < 11000:
        life.poll(now)
        assert life.state == ONLINE
        now += 100
    life.poll(11000)
    assert life.state == FENCED


def test_an_unfencing_answer_slower_than_the_session_does_not_bring_the_broker_online():
    life = online(now=0, request_timeout_ms=20_000)
    request = one(life, 2000)
    nothing(life, 11_000)
    assert life.state == FENCED  # lease lost at 11 000
    life.on_response(request, hb(fenced=False), 11_500)  # sent at 2000: proves nothing
    assert life.state == FENCED


def test_stale_broker_epoch_makes_an_online_broker_register_again_with_its_incarnation():
    life = online(epoch=10)
    request = one(life, 2000)
    life.on_response(request, error(ErrorCode.STALE_BROKER_EPOCH), 2001)
    assert life.state == FENCED and not life.registered and life.broker_epoch is None
    assert "STALE_BROKER_EPOCH" in life.transitions[-1].reason
    assert nothing(life, 2001) == 2001 + life.retry_backoff_ms
    request = one(life, 2101)
    assert type(request) is RegisterRequest and request.incarnation_id == INCARNATION
    life.on_response(request, RegistrationResult(77), 2102)
    assert life.state == FENCED and life.broker_epoch == 77
    request = one(life, 2102)
    assert request.broker_epoch == 77
    life.on_response(request, hb(fenced=False), 2103)
    assert life.state == ONLINE


def test_broker_id_not_registered_on_a_fenced_broker_registers_again():
    life = registered(epoch=10)
    request = one(life, 0)
    life.on_response(request, error(ErrorCode.BROKER_ID_NOT_REGISTERED), 1)
    assert life.state == FENCED and life.broker_epoch is None
    assert type(one(life, 1 + life.retry_backoff_ms)) is RegisterRequest


def test_controlled_shutdown_online_to_stopping_to_offline():
    life = online()
    life.begin_shutdown(500)
    assert life.state == STOPPING
    assert life.broker_state == BrokerState.PENDING_CONTROLLED_SHUTDOWN == 6
    request = one(life, 500)  # goes at once, not at the heartbeat interval
    assert request == HeartbeatRequest(1, 10, -1, False, True)
    # The controller is still moving leaderships away.
    life.on_response(request, hb(fenced=False, shut_down=False), 501)
    assert life.state == STOPPING
    assert nothing(life, 2000) == 2501
    request = one(life, 2501)
    assert request.want_shutdown
    life.on_response(request, hb(fenced=True, shut_down=True), 2502)
    assert life.state == OFFLINE and life.done
    assert life.broker_state == BrokerState.SHUTTING_DOWN == 7
    assert life.poll(10_000) == ([], None)
    assert [(t.from_state, t.to_state) for t in life.transitions][-2:] == [
        (ONLINE, STOPPING), (STOPPING, OFFLINE)]
    begun = life.transitions[-2]
    assert begun.now_ms == 500 and begun.reason == "controlled shutdown requested"


def test_shutdown_requested_while_a_plain_heartbeat_is_in_flight():
    life = online()
    request = one(life, 2000)
    assert not request.want_shutdown
    life.begin_shutdown(2001)
    assert nothing(life, 2001) == 2000 + life.request_timeout_ms
    life.on_response(request, hb(), 2002)
    request = one(life, 2002)  # at once: the shutdown request still has to go out
    assert request.want_shutdown


def test_a_fenced_broker_can_shut_down_too():
    life = registered()
    life.begin_shutdown(0)
    assert life.state == STOPPING
    request = one(life, 0)
    assert request.want_shutdown
    life.on_response(request, hb(caught_up=False, fenced=True, shut_down=True), 1)
    assert life.done and life.state == OFFLINE


def test_shutdown_before_registration_goes_offline_at_once():
    life = make()
    life.start(0)
    request = one(life, 0)
    life.begin_shutdown(3)
    assert life.done and life.state == OFFLINE
    assert life.poll(4) == ([], None)
    assert life.on_response(request, RegistrationResult(5), 5) is False  # ignored
    assert life.broker_epoch is None


def test_begin_shutdown_twice_is_harmless_and_lease_loss_does_not_leave_stopping():
    life = online()
    life.begin_shutdown(100)
    life.begin_shutdown(200)
    assert [t.to_state for t in life.transitions].count(STOPPING) == 1
    for now in range(100, 20_000, 250):
        life.poll(now)  # nothing is ever answered
    assert life.state == STOPPING


def test_registration_lost_during_controlled_shutdown_ends_it():
    life = online()
    life.begin_shutdown(0)
    request = one(life, 0)
    life.on_response(request, error(ErrorCode.STALE_BROKER_EPOCH), 1)
    assert life.done and life.state == OFFLINE
    assert "STALE_BROKER_EPOCH" in life.transitions[-1].reason


def test_should_shut_down_is_ignored_unless_stopping():
    life = online()
    life.on_response(one(life, 2000), hb(shut_down=True), 2000)
    assert life.state == ONLINE and not life.done


def test_request_timeouts_retry_with_exponential_backoff_up_to_the_cap():
    life = make(request_timeout_ms=1000, retry_backoff_ms=100, retry_backoff_ms_max=700)
    life.start(0)
    now = 0
    sends = []
    for _ in range(6):
        request = one(life, now)
        sends.append(now)
        assert type(request) is RegisterRequest
        timeout = nothing(life, now)
        assert timeout == now + 1000
        retry = nothing(life, timeout)  # the request timed out: back off
        now = retry
    gaps = [b - a - 1000 for a, b in zip(sends, sends[1:])]
    assert gaps == [100, 200, 400, 700, 700]
    assert life.requests_timed_out == 6 and life.state == OFFLINE
    # A late answer to a request given up is ignored; the retry in flight is what counts.
    stale = request
    fresh = one(life, now)
    assert life.on_response(stale, RegistrationResult(3), now) is False
    assert life.on_response(fresh, RegistrationResult(4), now + 1)
    assert life.broker_epoch == 4
    # Success resets the backoff.
    request = one(life, now + 1)
    life.on_response(request, RuntimeError("connection reset"), now + 2)
    assert nothing(life, now + 2) == now + 2 + 100


def test_not_controller_with_a_known_controller_retries_at_once_then_backs_off():
    life = online()
    request = one(life, 2000)
    life.on_response(request, NotControllerError(1, 3, "moved"), 2001)
    assert life.controller_id == 3
    retry = one(life, 2001)  # re-routed by the driver to node 3, sent at once
    assert retry == request
    life.on_response(retry, NotControllerError(3, 2, "moved again"), 2002)
    assert life.controller_id == 2
    assert nothing(life, 2002) == 2002 + 200  # second failure in a row: backoff
    retry = one(life, 2202)
    life.on_response(retry, NotControllerError(2, None, "no leader"), 2203)
    assert life.controller_id is None
    assert nothing(life, 2203) == 2203 + 400
    retry = one(life, 2603)
    life.on_response(retry, hb(), 2604)
    assert life.state == ONLINE and nothing(life, 2604) == 4604


def test_not_controller_without_a_controller_backs_off():
    life = make()
    life.start(0)
    life.on_response(one(life, 0), NotControllerError(1, None), 0)
    assert nothing(life, 0) == 100


def test_duplicate_registration_is_retried_with_backoff():
    life = make()
    life.start(0)
    life.on_response(one(life, 0), error(ErrorCode.DUPLICATE_BROKER_REGISTRATION), 10)
    assert not life.done and life.state == OFFLINE
    assert nothing(life, 10) == 110
    assert type(one(life, 110)) is RegisterRequest


@pytest.mark.parametrize("code", [ErrorCode.INCONSISTENT_CLUSTER_ID,
                                  ErrorCode.UNSUPPORTED_VERSION,
                                  ErrorCode.INVALID_REGISTRATION])
def test_registration_errors_a_retry_cannot_fix_stop_the_broker(code):
    life = make()
    life.start(0)
    exc = error(code, "cluster mismatch")
    life.on_response(one(life, 0), exc, 1)
    assert life.done and life.state == OFFLINE and life.error is exc
    assert life.poll(5) == ([], None)
    assert ErrorCode(code).name in life.transitions[-1].reason


def test_want_fence_until_ready_to_unfence():
    life = registered(ready_to_unfence=False)
    request = one(life, 0)
    assert request.want_fence is True
    life.on_response(request, hb(fenced=True), 0)
    life.set_ready_to_unfence()
    assert one(life, 2000).want_fence is False


def test_metadata_offset_only_moves_forward():
    life = make()
    life.set_metadata_offset(5)
    life.set_metadata_offset(5)
    with pytest.raises(ValueError):
        life.set_metadata_offset(4)


def test_stop_goes_offline_at_once():
    life = online()
    life.stop(50, "shutdown timed out")
    assert life.done and life.state == OFFLINE
    assert life.transitions[-1] == (50, ONLINE, OFFLINE, "shutdown timed out")


def test_a_bad_registration_answer_is_refused():
    life = make()
    life.start(0)
    with pytest.raises(ValueError):
        life.on_response(one(life, 0), RegistrationResult(-1), 0)


@pytest.mark.parametrize("kwargs", [
    dict(heartbeat_interval_ms=9000, session_timeout_ms=9000),
    dict(request_timeout_ms=0),
    dict(retry_backoff_ms=500, retry_backoff_ms_max=100),
    dict(heartbeat_interval_ms=2000.5),
])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        make(**kwargs)


def test_transitions_are_bounded():
    life = online()
    now = 2000
    for i in range(BROKER_TRANSITIONS_KEPT_MAX + 10):
        life.on_response(one(life, now), hb(fenced=i % 2 == 0), now)
        now += 2000
    assert len(life.transitions) == BROKER_TRANSITIONS_KEPT_MAX


def test_kafka_broker_state_numbers():
    assert {s.name: int(s) for s in BrokerState} == {
        "NOT_RUNNING": 0, "STARTING": 1, "RECOVERY": 2, "RUNNING": 3,
        "PENDING_CONTROLLED_SHUTDOWN": 6, "SHUTTING_DOWN": 7, "UNKNOWN": 127}


def test_submit_request_refuses_other_values():
    with pytest.raises(TypeError):
        submit_request(object(), ("not", "a", "request"))


# ============================================================================ end to end


class Cluster:
    """Brokers with a lifecycle and a metadata follower each, a real QuorumController over
    the FakeRaft of the controller tests, and time in ticks. Each tick: every broker polls
    and its requests go to the controller (unless its link is cut: then they are lost and
    time out), the controller runs and everything proposed commits, every broker's metadata
    follower applies the new committed batches (the metadata path is never cut here), and
    the answers go back."""

    TICK_MS = 100

    def __init__(self, broker_ids=(1, 2)):
        self.h = Harness()
        self.brokers = {}
        for b in broker_ids:
            life = BrokerLifecycle(b, Uuid.from_ints(0xB0, b), cluster_id="kraftcore-cluster",
                                   listeners=(("PLAINTEXT", "localhost", 9090 + b, 0),),
                                   log_dirs=(Uuid.from_ints(0xD1, b),))
            self.brokers[b] = (life, broker_metadata.BrokerMetadata())
        self.fed = 0
        self.pending = []  # (broker id, request, future)
        self.cut = set()  # brokers whose requests to the controller are lost
        self.checks = []  # functions called after every tick
        for life, _ in self.brokers.values():
            life.start(self.h.now)
        self.feed()

    def life(self, b):
        return self.brokers[b][0]

    def meta(self, b):
        return self.brokers[b][1]

    @property
    def image(self):
        return self.h.image

    def feed(self):
        raft = self.h.raft
        batches = raft.batches[self.fed:raft.committed]
        self.fed = raft.committed
        for life, meta in self.brokers.values():
            meta.on_commits(batches)
            life.set_metadata_offset(meta.metadata_offset)

    def tick(self):
        h = self.h
        for b, (life, _) in self.brokers.items():
            requests, _ = life.poll(h.now)
            for request in requests:
                if b not in self.cut:
                    self.pending.append((b, request, submit_request(h.controller, request)))
        h.commit()
        self.feed()
        still = []
        for b, request, future in self.pending:
            if not future.done():
                still.append((b, request, future))
                continue
            exc = future.exception(timeout=0)
            self.life(b).on_response(request, exc if exc is not None else future.result(),
                                     h.now)
        self.pending = still
        for check in self.checks:
            check()
        h.now += self.TICK_MS

    def run_until(self, predicate, limit_ms=60_000):
        end = self.h.now + limit_ms
        while not predicate():
            if self.h.now > end:
                raise AssertionError(f"not reached within {limit_ms} ms: "
                                     f"{[self.life(b) for b in self.brokers]}")
            self.tick()

    def run_for(self, ms):
        end = self.h.now + ms
        while self.h.now < end:
            self.tick()

    def all_online(self):
        return all(life.is_online for life, _ in self.brokers.values())


def test_end_to_end_register_catch_up_unfence_against_a_quorum_controller():
    c = Cluster()
    c.run_until(c.all_online)
    image = c.image
    for b in (1, 2):
        life = c.life(b)
        assert image.brokers[b].broker_epoch == life.broker_epoch
        assert not image.brokers[b].fenced
        # Unfenced only after its metadata passed its own registration record.
        assert life.metadata_offset >= life.broker_epoch
        assert [t.to_state for t in life.transitions] == [FENCED, ONLINE]
        assert life.requests_failed == 0
    assert [r.broker_id for r in broker_metadata.visible_brokers(c.meta(1).image)] == [1, 2]
    assert c.meta(1).image.same_state(c.meta(2).image)


def test_end_to_end_lease_loss_fences_before_the_controller_does_and_recovers():
    c = Cluster()
    c.run_until(c.all_online)
    c.h.call("create_topics", [NewTopic("t", 4, 2)])
    c.feed()

    def broker_fenced_first():
        # Whenever the controller's committed image shows broker 2 fenced, broker 2 itself
        # already stopped counting itself online.
        if c.image.brokers[2].fenced:
            assert c.life(2).state != ONLINE

    c.checks.append(broker_fenced_first)
    c.cut.add(2)
    c.run_until(lambda: c.image.brokers[2].fenced)
    life = c.life(2)
    assert life.state == FENCED and life.transitions[-1].reason.startswith("lease lost")
    assert c.h.controller.cluster.fenced_by_timeout == 1
    assert [r.broker_id for r in broker_metadata.visible_brokers(c.meta(1).image)] == [1]
    for topic in c.image.topics.values():
        for p in topic.partitions.values():
            assert p.leader == 1 and p.isr == [1]
    c.checks.clear()
    c.cut.clear()
    c.run_until(lambda: life.is_online)
    assert not c.image.brokers[2].fenced
    assert life.registrations == 1  # the same registration all along
    assert [r.broker_id for r in broker_metadata.visible_brokers(c.meta(1).image)] == [1, 2]


def test_end_to_end_controlled_shutdown_moves_leadership_away_first():
    c = Cluster()
    c.run_until(c.all_online)
    c.h.call("create_topics", [NewTopic("t", 4, 2)])
    c.feed()
    led = [p for t in c.image.topics.values() for p in t.partitions.values() if p.leader == 1]
    assert led  # broker 1 leads something, so the shutdown must hand it over
    one_life = c.life(1)
    seen = []
    c.checks.append(lambda: seen.append(
        (one_life.state, c.image.brokers[1].in_controlled_shutdown)))
    one_life.begin_shutdown(c.h.now)
    c.run_until(lambda: one_life.done)
    assert one_life.state == OFFLINE
    assert [t.to_state for t in one_life.transitions][-2:] == [STOPPING, OFFLINE]
    assert (STOPPING, True) in seen  # the controller held it in controlled shutdown
    assert c.image.brokers[1].fenced
    for topic in c.image.topics.values():
        for p in topic.partitions.values():
            assert p.leader == 2 and 1 not in p.isr
    assert [r.broker_id for r in broker_metadata.visible_brokers(c.meta(2).image)] == [2]
    assert c.life(2).is_online


def test_end_to_end_unregistered_broker_registers_again():
    c = Cluster()
    c.run_until(c.all_online)
    old_epoch = c.life(2).broker_epoch
    c.h.call("unregister_broker", 2)
    c.feed()
    life = c.life(2)
    c.run_until(lambda: life.registrations == 2 and life.is_online)
    assert life.broker_epoch > old_epoch
    assert [t.to_state for t in life.transitions] == [FENCED, ONLINE, FENCED, ONLINE]
    assert "BROKER_ID_NOT_REGISTERED" in life.transitions[2].reason
    assert c.image.brokers[2].broker_epoch == life.broker_epoch
    assert c.image.brokers[2].incarnation_id == life.incarnation_id


def test_end_to_end_controller_failover_answers_not_controller_then_recovers():
    c = Cluster()
    c.run_until(c.all_online)
    h = c.h
    h.raft.lose_leadership(2)
    h.controller.on_leader_change()
    h.run()
    c.run_for(2500)  # heartbeats now fail with NOT_CONTROLLER naming node 2
    life = c.life(1)
    assert life.controller_id == 2 and life.requests_failed >= 1
    assert life.state == ONLINE  # the lease has not run out yet
    h.raft.win_leadership()
    h.controller.on_leader_change()
    h.commit()
    failed = life.requests_failed
    c.run_for(3000)
    assert life.requests_failed == failed  # answered again
    assert c.all_online()
    assert life.registrations == 1  # the registration survived the failover
    assert life.lease_deadline_ms() > h.now + 5000
    assert not c.image.brokers[1].fenced
