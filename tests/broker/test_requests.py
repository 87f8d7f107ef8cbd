"""The requests a broker sends to the active controller and how it reads the answers
(`kraftcore.broker.requests`), against the controller's handlers
(`kraftcore.apis.controller`) over a real `QuorumController`: the registration and the
heartbeat a `BrokerLifecycle` sends, and a partition leader's ISR expansion."""

import pytest

from kraftcore.broker.lifecycle import (FENCED, ONLINE, BrokerLifecycle, HeartbeatRequest,
                                        RegisterRequest)
from kraftcore.broker.requests import (ALTER_PARTITION_VERSION, heartbeat_request,
                                       heartbeat_result, alter_partition_request,
                                       registration_request, registration_result)
from kraftcore.controller.local import LocalQuorum
from kraftcore.errors import ControllerError, NotControllerError
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.protocol import messages as m
from kraftcore.types import HeartbeatResult, RegistrationResult

from tests.apis.helpers import (CLUSTER_ID, MAX_LEVEL, LocalFacade, add_broker, call,
                                create_topics, heartbeat, incarnation)


@pytest.fixture
def facade():
    return LocalFacade(LocalQuorum())


def test_registration_and_heartbeat_helpers_round_trip(facade):
    request = RegisterRequest(broker_id=6, incarnation_id=incarnation(6), cluster_id=CLUSTER_ID,
                              rack="r1", listeners=(("PLAINTEXT", "127.0.0.1", 9096, 0),),
                              features=None, log_dirs=(incarnation(60),))
    body = registration_request(request)
    assert [(f.name, f.min_supported_version, f.max_supported_version)
            for f in body.features] == [(METADATA_VERSION, 1, MAX_LEVEL)]
    result = registration_result(call(facade, body, 4))
    assert result == RegistrationResult(facade.image.brokers[6].broker_epoch)
    assert facade.image.brokers[6].rack == "r1"
    beat = HeartbeatRequest(broker_id=6, broker_epoch=result.broker_epoch,
                            metadata_offset=10**6, want_fence=False, want_shutdown=False)
    assert heartbeat_result(call(facade, heartbeat_request(beat), 1)) == \
        HeartbeatResult(is_caught_up=True, is_fenced=False, should_shut_down=False)


def test_result_helpers_raise_the_controller_errors():
    with pytest.raises(ControllerError) as info:
        registration_result(m.BrokerRegistrationResponse(error_code=104))
    assert info.value.code == 104 and "INCONSISTENT_CLUSTER_ID" in str(info.value)
    with pytest.raises(NotControllerError) as info:
        heartbeat_result(m.BrokerHeartbeatResponse(error_code=41), node_id=3)
    assert info.value.code == 41 and info.value.controller_id is None
    assert "controller 3" in str(info.value)
    with pytest.raises(ControllerError) as info:
        heartbeat_result(m.BrokerHeartbeatResponse(error_code=77))
    assert info.value.code == 77
    with pytest.raises(ValueError):
        registration_request(RegisterRequest(1, incarnation(1), None, None, (), None, ()))


def test_broker_lifecycle_over_the_rpcs(facade):
    """A BrokerLifecycle driven only through the wire messages and the helpers reaches
    ONLINE, as it does against a local controller."""
    lifecycle = BrokerLifecycle(7, incarnation(7), cluster_id=CLUSTER_ID,
                                listeners=(("PLAINTEXT", "127.0.0.1", 9097, 0),))
    lifecycle.set_metadata_offset(10**6)
    now = 0
    lifecycle.start(now)
    for _ in range(10):
        requests, _ = lifecycle.poll(now)
        for request in requests:
            if isinstance(request, RegisterRequest):
                response = call(facade, registration_request(request), 4)
                try:
                    result = registration_result(response)
                except ControllerError as exc:
                    result = exc
            else:
                response = call(facade, heartbeat_request(request), 1)
                try:
                    result = heartbeat_result(response)
                except ControllerError as exc:
                    result = exc
            assert lifecycle.on_response(request, result, now)
        if lifecycle.state == ONLINE:
            break
        now += 100
    assert lifecycle.state == ONLINE
    assert lifecycle.broker_epoch == facade.image.brokers[7].broker_epoch
    assert not facade.image.brokers[7].fenced
    assert FENCED in {t.to_state for t in lifecycle.transitions}


class _Led:
    """What `alter_partition_request` reads of a led partition."""

    def __init__(self, topic_id, record):
        self.topic_id, self.index = topic_id, record.partition_id
        self.leader_epoch, self.partition_epoch = record.leader_epoch, record.partition_epoch


def test_alter_partition_request_asks_for_the_leaders_isr_changes(facade):
    epochs = {b: add_broker(facade, b) for b in (1, 2, 3)}
    call(facade, create_topics(("t", -1, -1, {0: [1, 2], 1: [1, 3], 2: [2, 1]})), 7)
    for b in (2, 3):  # fenced (out of every ISR), then 2 comes back; 3 stays fenced
        assert call(facade, heartbeat(b, epochs[b], want_fence=True), 1).is_fenced
    assert not call(facade, heartbeat(2, epochs[2]), 1).is_fenced
    topic = facade.image.topic("t")
    assert [topic.partitions[i].isr for i in range(3)] == [[1], [1], [1]]
    assert alter_partition_request(facade.image, 1, epochs[1], []) is None
    led = {i: _Led(topic.topic_id, topic.partitions[i]) for i in range(3)}
    body = alter_partition_request(facade.image, 1, epochs[1],
                                   [(led[0], [1, 2]), (led[2], [1, 2])])
    (data,) = body.topics
    assert (body.broker_id, body.broker_epoch, data.topic_id) == (1, epochs[1], topic.topic_id)
    assert sorted((p.partition_index, p.leader_epoch, p.partition_epoch,
                   [(s.broker_id, s.broker_epoch) for s in p.new_isr_with_epochs])
                  for p in data.partitions) == [
        (0, topic.partitions[0].leader_epoch, topic.partitions[0].partition_epoch,
         [(1, epochs[1]), (2, epochs[2])]),
        (2, topic.partitions[2].leader_epoch, topic.partitions[2].partition_epoch,
         [(1, epochs[1]), (2, epochs[2])])]
    answer = call(facade, body, ALTER_PARTITION_VERSION)
    assert {p.partition_index: p.error_code for t in answer.topics for p in t.partitions} == {
        0: 0, 2: 0}
    assert [facade.image.topic("t").partitions[i].isr for i in range(3)] == [[1, 2], [1], [1, 2]]
