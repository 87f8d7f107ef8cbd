"""What a broker answers itself (`kraftcore.apis.broker`): Metadata from the broker's own
image, answered as the controller answers it from the same image but naming the broker as
the controller (KIP-590); admin requests forwarded to the active controller; anything
else refused as a whole, without touching the broker. The data-plane handlers are
`test_broker_data.py`'s."""

import pytest

from kraftcore.apis.broker import BROKER_API_KEYS, FORWARDED_API_KEYS, handle_broker_request
from kraftcore.apis.controller import CONTROLLER_API_KEYS, handle_controller_request
from kraftcore.protocol import framing
from kraftcore.protocol import messages as m
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import call, create_topics, heartbeat, metadata, versions


class BrokerFacade:
    """What a broker node gives its handlers: its image and the active controller its
    observer knows (here: the quorum's, image and all)."""

    authorizer_enabled = True

    def __init__(self, facade):
        self.node_id = 4
        self.cluster_id = facade.cluster_id
        self.image = facade.image
        self.replicas = None
        self._controller = facade
        self.forwarded = []

    def controller_id(self):
        return self.node_id

    async def forward(self, api_key, version, body):
        self.forwarded.append(api_key)
        request = framing.decode_request(framing.encode_request(body, version, 1, "broker")[4:])
        return await handle_controller_request(self._controller, request)


def answer(facade, body, version):
    return call(facade, body, version, handle=handle_broker_request)


@pytest.mark.parametrize("version", versions(m.MetadataRequest))
def test_metadata_from_the_brokers_image_as_the_controller_answers_it(cluster, version):
    facade, epochs = cluster
    call(facade, create_topics(("a", 2, 2), ("b", -1, -1, {0: [3]})), 7)
    assert call(facade, heartbeat(3, epochs[3], want_fence=True), 1).is_fenced
    broker = BrokerFacade(facade)
    for body in (metadata(version), metadata(version, names=["b", "missing"])):
        ours = answer(broker, body, version)
        theirs = call(facade, body, version)
        if version >= 1:  # the broker names itself as the controller, a live broker
            assert (ours.controller_id, theirs.controller_id) == (4, 1)
            theirs.controller_id = 4
        assert ours == theirs
        assert [b.node_id for b in ours.brokers] == [1, 2]
    assert [t.name for t in answer(broker, metadata(version), version).topics] == ["a", "b"]


def test_admin_requests_are_forwarded_to_the_active_controller(cluster):
    facade, _ = cluster
    broker = BrokerFacade(facade)
    response = answer(broker, create_topics(("x", 1, 1)), 7)
    assert [(t.name, t.error_code) for t in response.topics] == [("x", 0)]
    assert broker.forwarded == [19]
    assert facade.image.topic("x") is not None


def test_a_request_the_broker_does_not_serve_is_refused_as_a_whole(cluster):
    facade, epochs = cluster
    broker = BrokerFacade(facade)
    response = answer(broker, heartbeat(3, epochs[3], want_fence=True), 1)
    assert response.error_code == E.INVALID_REQUEST
    assert not facade.image.brokers[3].fenced


def test_the_broker_serves_apis_the_library_knows():
    assert BROKER_API_KEYS and BROKER_API_KEYS <= set(API_BY_KEY)
    assert 3 in BROKER_API_KEYS and 3 in CONTROLLER_API_KEYS
    assert FORWARDED_API_KEYS <= CONTROLLER_API_KEYS & BROKER_API_KEYS
    assert {0, 1, 2, 23} <= BROKER_API_KEYS


def test_answers_name_the_brokers_on_the_listener_the_request_came_in_on(facade):
    from tests.apis.helpers import registration

    cls = m.BrokerRegistrationRequest
    for broker_id in (1, 2):
        body = registration(broker_id)
        body.listeners = [
            cls.Listener(name="PLAINTEXT", host="127.0.0.1", port=9090 + broker_id,
                         security_protocol=0),
            cls.Listener(name="SASL_SSL", host="broker.example", port=9190 + broker_id,
                         security_protocol=3)]
        epoch = call(facade, body, 4).broker_epoch
        call(facade, heartbeat(broker_id, epoch), 1)
    call(facade, create_topics(("a", 1, 2)), 7)
    broker = BrokerFacade(facade)
    plain = answer(broker, metadata(12), 12)
    assert [(b.host, b.port) for b in plain.brokers] == [("127.0.0.1", 9091),
                                                         ("127.0.0.1", 9092)]
    broker.listener_name = "SASL_SSL"
    secured = answer(broker, metadata(12), 12)
    assert [(b.host, b.port) for b in secured.brokers] == [("broker.example", 9191),
                                                           ("broker.example", 9192)]
    cluster = answer(broker, m.DescribeClusterRequest(), 1)
    assert [b.port for b in cluster.brokers] == [9191, 9192]
    broker.listener_name = "ELSEWHERE"  # brokers without that listener are left out
    assert answer(broker, metadata(12), 12).brokers == []
