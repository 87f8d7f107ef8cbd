"""Helpers of the tests of `kraftcore.apis` (and of the clients that talk to it): facades over
a one-voter `LocalQuorum`, the way a node gives them to the handlers; `call`, a request
through the wire to a role's handler and back; and request builders."""

import asyncio
import random

from kraftcore.apis.controller import handle_controller_request
from kraftcore.apis.reads import CONFIG_SOURCE_DEFAULT
from kraftcore.errors import NotControllerError
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import framing, messages as m
from kraftcore.types import FileRegion, Uuid


CLUSTER_ID = "kraftcore-cluster"  # ControllerConfig's default
MAX_LEVEL = max(METADATA_VERSION_LEVELS.values())
CONTROLLERS = {1: ("127.0.0.1", 19093), 2: ("127.0.0.1", 29093), 3: ("127.0.0.1", 39093)}


# ------------------------------------------------------------------------------ facades

class LocalFacade:
    """The facade over a LocalQuorum: `submit` runs the controller until idle, so the
    returned future is already done."""

    authorizer_enabled = True  # the node has StandardAuthorizer (the ACL APIs are served)

    def __init__(self, quorum, controllers=CONTROLLERS):
        self.quorum = quorum
        self.node_id = quorum.node_id
        self.cluster_id = quorum.controller.config.cluster_id
        self._controllers = dict(controllers)
        self.submitted = []

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        future = getattr(self.quorum.controller, method)(*args, **kwargs)
        self.quorum.run()
        return asyncio.wrap_future(future)

    @property
    def image(self):
        return self.quorum.controller.image

    def controller_id(self):
        return self.node_id if self.quorum.controller.active else self.quorum.core.leader_id

    def controllers(self):
        return dict(self._controllers)


class StandbyFacade:
    """A standby controller: reads its (given) image; every operation fails with
    NOT_CONTROLLER naming node `active`, raised at once or through the future."""

    authorizer_enabled = True

    def __init__(self, image, node_id=2, active=1, raise_at_once=False):
        self.image = image
        self.node_id = node_id
        self.cluster_id = CLUSTER_ID
        self.active = active
        self.raise_at_once = raise_at_once
        self.submitted = []

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        error = NotControllerError(self.node_id, self.active)
        if self.raise_at_once:
            raise error
        future = asyncio.get_running_loop().create_future()
        future.set_exception(error)
        return future

    def controller_id(self):
        return self.active

    def controllers(self):
        return dict(CONTROLLERS)


class FailingFacade(StandbyFacade):
    """Every operation raises `error` (or never completes, when `error` is None)."""

    def __init__(self, image, error):
        super().__init__(image)
        self.error = error

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        if self.error is None:
            return asyncio.get_running_loop().create_future()  # never done
        raise self.error


# ------------------------------------------------------------------------------ helpers

def call(facade, body, version, correlation_id=7, handle=handle_controller_request):
    """`body` sent at `version` the whole way: encoded and decoded as a request, answered
    by `handle` (a role's handler), the answer encoded and decoded as a response (what a
    client receives)."""
    frame = framing.encode_request(body, version, correlation_id, client_id="test")
    request = framing.decode_request(frame[4:])
    response = asyncio.run(handle(facade, request))
    return through_wire(response, body.api_key, version, correlation_id)


def through_wire(response, api_key, version, correlation_id=7):
    """`response` as a client receives it: encoded (file regions read, as sendfile would
    send them, and closed) and decoded."""
    assert type(response) is framing._apis().api(api_key).response
    out = framing.encode_response(response, version, correlation_id)
    if isinstance(out, list):
        out = b"".join(_region_bytes(part) for part in out)
    cid, decoded = framing.decode_response(out[4:], api_key, version)
    assert cid == correlation_id
    return decoded


def _region_bytes(part):
    if not isinstance(part, FileRegion):
        return part
    try:
        return part.read()
    finally:
        part.close()


def versions(cls):
    low, high = cls.valid_versions
    return range(low, high + 1)


def incarnation(broker_id):
    return Uuid.random(random.Random(broker_id))


def registration(broker_id, version=4, *, cluster_id=CLUSTER_ID, features=None,
                 log_dirs=(), **extra):
    cls = m.BrokerRegistrationRequest
    if features is None:
        features = [cls.Feature(name=METADATA_VERSION, min_supported_version=1,
                                max_supported_version=MAX_LEVEL)]
    return cls(broker_id=broker_id, cluster_id=cluster_id,
               incarnation_id=incarnation(broker_id),
               listeners=[cls.Listener(name="PLAINTEXT", host="127.0.0.1",
                                       port=9090 + broker_id, security_protocol=0)],
               features=features, rack=None, log_dirs=list(log_dirs) if version >= 2 else [],
               **extra)


def heartbeat(broker_id, epoch, *, want_fence=False, want_shut_down=False, offset=10**9):
    return m.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch,
                                    current_metadata_offset=offset, want_fence=want_fence,
                                    want_shut_down=want_shut_down)


def add_broker(facade, broker_id):
    """Register and unfence `broker_id` through the RPCs; returns its epoch."""
    response = call(facade, registration(broker_id), 4)
    assert response.error_code == 0
    beat = call(facade, heartbeat(broker_id, response.broker_epoch), 1)
    assert (beat.error_code, beat.is_fenced, beat.is_caught_up) == (0, False, True)
    return response.broker_epoch


def create_topics(*topics, timeout_ms=60000, validate_only=False):
    cls = m.CreateTopicsRequest
    entries = []
    for t in topics:
        name, partitions, rf = t[:3]
        assignments = t[3] if len(t) > 3 else {}
        configs = t[4] if len(t) > 4 else {}
        entries.append(cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf,
            assignments=[cls.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                         for i, b in assignments.items()],
            configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()]))
    return cls(topics=entries, timeout_ms=timeout_ms, validate_only=validate_only)


def codes(items, name_attr="name"):
    return {getattr(i, name_attr): i.error_code for i in items}


def alter_configs(*resources, validate_only=False):
    cls = m.IncrementalAlterConfigsRequest
    return cls(resources=[cls.AlterConfigsResource(
        resource_type=rtype, resource_name=rname,
        configs=[cls.AlterableConfig(name=k, config_operation=op, value=v)
                 for k, op, v in configs])
        for rtype, rname, configs in resources], validate_only=validate_only)


def describe_configs(*resources, synonyms=False):
    cls = m.DescribeConfigsRequest
    return cls(resources=[cls.DescribeConfigsResource(resource_type=rtype, resource_name=rname,
                                                      configuration_keys=keys)
                          for rtype, rname, keys in resources], include_synonyms=synonyms)


def configs_of(result, version):
    """{name: (value, source)} of one DescribeConfigs result (v0: source from IsDefault)."""
    out = {}
    for c in result.configs:
        if version == 0:
            source = CONFIG_SOURCE_DEFAULT if c.is_default else "set"
        else:
            source = c.config_source
        out[c.name] = (c.value, source)
    return out


MIN_ISR, UNCLEAN = "min.insync.replicas", "unclean.leader.election.enable"


def metadata(version, names=None, ids=None):
    cls = m.MetadataRequest
    if names is None and ids is None:
        topics = [] if version == 0 else None
    else:
        topics = [cls.MetadataRequestTopic(name=n) for n in names or ()]
        topics += [cls.MetadataRequestTopic(name=None, topic_id=i) for i in ids or ()]
    body = cls(topics=topics)
    if version >= 4:
        body.allow_auto_topic_creation = False
    return body
