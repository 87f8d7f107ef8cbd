"""The requests a broker sends to the active controller, and how it reads the answers
(kafka-facts §8.2, §8.3): the wire side of `BrokerLifecycle` and of a partition leader's
ISR changes. The controller's side of the same RPCs is `kraftcore.apis.controller`.

A broker that talks to the active controller over the network feeds `BrokerLifecycle` the
results it would get from a local controller (`submit_request`):

* `registration_request(RegisterRequest)` -> BrokerRegistrationRequest, and
  `registration_result(response)` -> `RegistrationResult`;
* `heartbeat_request(HeartbeatRequest)` -> BrokerHeartbeatRequest, and
  `heartbeat_result(response)` -> `HeartbeatResult`.

A result reader raises the answer's error as the controller would have raised it:
`NotControllerError` for NOT_CONTROLLER (naming no controller: the response names none),
`ControllerError(code)` otherwise.

`alter_partition_request(image, broker_id, broker_epoch, changes)` is the AlterPartition a
partition leader sends for the ISR changes its `ReplicaManager` decided (shrink, expand).

Pure functions of their arguments: no clock, socket or state.
"""

from kraftcore.errors import ControllerError, NotControllerError
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.types import HeartbeatResult, RegistrationResult

__all__ = ["registration_request", "registration_result", "heartbeat_request",
           "heartbeat_result", "alter_partition_request", "alter_partition_result",
           "ALTER_PARTITION_VERSION"]

# The AlterPartition version an ISR change is sent at: v3 names each ISR member's broker
# epoch (KIP-903), so a replica that re-registered in between is not let back by mistake.
ALTER_PARTITION_VERSION = 3


def registration_request(lifecycle_request, *, previous_broker_epoch=-1):
    """The BrokerRegistrationRequest for a `BrokerLifecycle` `RegisterRequest`.

    A request whose `features` is None (no check wanted) advertises every metadata.version
    kraftcore knows: on the wire an empty feature list means "3.0-IV1 only" (Kafka's rule),
    which a cluster above that level would refuse."""
    r = lifecycle_request
    if r.cluster_id is None:
        raise ValueError("a broker registration needs the cluster id (meta.properties "
                         "cluster.id); format the broker's log directories first")
    cls = m.BrokerRegistrationRequest
    features = r.features
    if features is None:
        features = {METADATA_VERSION: (1, max(METADATA_VERSION_LEVELS.values()))}
    return cls(
        broker_id=r.broker_id, cluster_id=r.cluster_id, incarnation_id=r.incarnation_id,
        listeners=[cls.Listener(name=name, host=host, port=port, security_protocol=protocol)
                   for name, host, port, protocol in r.listeners],
        features=[cls.Feature(name=name, min_supported_version=low, max_supported_version=high)
                  for name, (low, high) in sorted(features.items())],
        rack=r.rack, log_dirs=list(r.log_dirs), previous_broker_epoch=previous_broker_epoch)


def heartbeat_request(lifecycle_request):
    """The BrokerHeartbeatRequest for a `BrokerLifecycle` `HeartbeatRequest`."""
    r = lifecycle_request
    return m.BrokerHeartbeatRequest(
        broker_id=r.broker_id, broker_epoch=r.broker_epoch,
        current_metadata_offset=r.metadata_offset, want_fence=bool(r.want_fence),
        want_shut_down=bool(r.want_shutdown))


def _raise_for(code, what, node_id):
    where = "the controller" if node_id is None else f"controller {node_id}"
    if code == ErrorCode.NOT_CONTROLLER:
        exc = NotControllerError(-1 if node_id is None else node_id, None)
        exc.args = (f"{where} answered the {what} with NOT_CONTROLLER (41): it is not the "
                    "active controller; find the active controller and retry there",)
        raise exc
    raise ControllerError(code, f"{where} refused the {what}: {error_name(code)} ({code})")


def registration_result(response, *, node_id=None):
    """`RegistrationResult` from a BrokerRegistrationResponse, or raise its error:
    `NotControllerError` (without a controller id: the response names none) for
    NOT_CONTROLLER, `ControllerError(code)` otherwise. `node_id`: who answered, for the
    message."""
    if response.error_code != 0:
        _raise_for(response.error_code, "broker registration", node_id)
    return RegistrationResult(response.broker_epoch)


def heartbeat_result(response, *, node_id=None):
    """`HeartbeatResult` from a BrokerHeartbeatResponse, or raise its error (as
    `registration_result`)."""
    if response.error_code != 0:
        _raise_for(response.error_code, "broker heartbeat", node_id)
    return HeartbeatResult(bool(response.is_caught_up), bool(response.is_fenced),
                           bool(response.should_shut_down))


def alter_partition_request(image, broker_id, broker_epoch, changes):
    """The AlterPartitionRequest (at `ALTER_PARTITION_VERSION`) with which broker
    `broker_id`, as the leader, asks for the ISRs of `changes` ([(partition, new ISR)],
    partitions as `kraftcore.broker.partition.Partition`): each with the leader and
    partition epochs it is based on, and each ISR member with its broker epoch from
    `image` (KIP-903). None when `changes` is empty."""
    cls = m.AlterPartitionRequest
    by_topic = {}
    for partition, isr in changes:
        by_topic.setdefault(partition.topic_id, []).append(cls.PartitionData(
            partition_index=partition.index, leader_epoch=partition.leader_epoch,
            new_isr_with_epochs=[cls.BrokerState(
                broker_id=b, broker_epoch=image.brokers[b].broker_epoch
                if b in image.brokers else -1) for b in isr],
            partition_epoch=partition.partition_epoch))
    if not by_topic:
        return None
    return cls(broker_id=broker_id, broker_epoch=broker_epoch, topics=[
        cls.TopicData(topic_id=topic_id, partitions=parts)
        for topic_id, parts in by_topic.items()])


# Refusals after which the controller has surely not made the change (Kafka's leader resets
# to its committed ISR on these; on any other error, or no answer, it may have).
_NOT_MADE = frozenset((ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED))


def alter_partition_result(changes, response):
    """End each ISR change of `changes` ([(partition, new ISR)], the request's) with what
    `response` (an AlterPartitionResponse, or None when none came) says of it
    (`Partition.end_isr_change`). Returns [(partition, outcome)], the outcome a word for
    the log: the new ISR, the error's name, "timed out" or "no answer"."""
    answers = {}
    if response is not None and not response.error_code:
        for t in response.topics:
            for p in t.partitions:
                answers[(t.topic_id, p.partition_index)] = p
    out = []
    for partition, _ in changes:
        p = answers.get((partition.topic_id, partition.index))
        if p is not None and p.error_code == 0:
            partition.end_isr_change(p.leader_epoch, p.partition_epoch, p.isr)
            outcome = f"ISR {list(p.isr)}"
        else:
            partition.end_isr_change(reset=p is not None and p.error_code in _NOT_MADE)
            outcome = ("timed out" if response is None
                       else error_name(response.error_code) if response.error_code
                       else "no answer" if p is None else error_name(p.error_code))
        out.append((partition, outcome))
    return out
