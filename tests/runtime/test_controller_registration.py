"""`ControllerRegistration`: when a controller node asks the active controller to register
it, how it retries, and when it stops asking; and which endpoint DescribeCluster lists for
a controller (its registration over the configured voter address)."""

from kraftcore.metadata import records as R
from kraftcore.metadata.image import METADATA_VERSION, MetadataImage
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.runtime.controller_registration import (REGISTRATION_LEVEL, RETRY_BACKOFF_MS,
                                                       RETRY_BACKOFF_MS_MAX,
                                                       ControllerRegistration)
from kraftcore.runtime.node import Node
from kraftcore.types import Uuid

ME = Uuid(b"\x01" * 16)
LISTENERS = [("CONTROLLER", "127.0.0.1", 9093, 0)]


def image(level=REGISTRATION_LEVEL, controllers=None):
    return MetadataImage(features={METADATA_VERSION: level}, controllers=controllers or {})


def record(controller_id, incarnation, port=9093):
    return R.RegisterControllerRecord(
        controller_id=controller_id, incarnation_id=incarnation, zk_migration_ready=False,
        end_points=[R.RegisterControllerRecord.ControllerEndpoint(
            name="CONTROLLER", host="127.0.0.1", port=port, security_protocol=0)],
        features=[])


def ok():
    return m.ControllerRegistrationResponse(error_code=0)


def test_registers_once_the_metadata_version_has_the_record_and_a_leader_is_known():
    reg = ControllerRegistration(1, ME, LISTENERS)
    assert reg.poll(image(level=REGISTRATION_LEVEL - 1), True, 0) == (None, None)
    assert reg.poll(MetadataImage(), True, 0) == (None, None)  # no metadata.version yet
    assert reg.poll(image(), False, 0) == (None, RETRY_BACKOFF_MS)
    request, _ = reg.poll(image(), True, 0)
    assert (request.controller_id, request.incarnation_id, request.zk_migration_ready) == \
        (1, ME, False)
    assert [(li.name, li.host, li.port, li.security_protocol) for li in request.listeners] == \
        LISTENERS
    (feature,) = request.features
    assert feature.name == METADATA_VERSION and feature.min_supported_version == 1
    assert feature.max_supported_version >= REGISTRATION_LEVEL
    assert reg.poll(image(), True, 1) == (None, None)  # one in flight at a time


def test_a_success_waits_for_the_image_and_an_own_record_ends_the_asking():
    reg = ControllerRegistration(1, ME, LISTENERS)
    reg.poll(image(), True, 0)
    assert reg.on_response(ok(), None, 10) is None
    assert reg.poll(image(), True, 20) == (None, 10 + RETRY_BACKOFF_MS_MAX)
    assert reg.poll(image(controllers={1: record(1, ME)}), True, 10_000) == (None, None)
    assert reg.registered
    # Another incarnation's record (this node's previous process) is not ours.
    other = image(controllers={1: record(1, Uuid(b"\x02" * 16))})
    request, _ = reg.poll(other, True, 10_000)
    assert request is not None and not reg.registered


def test_failures_back_off_doubling_up_to_the_maximum():
    reg = ControllerRegistration(1, ME, LISTENERS)
    now, waits = 0, []
    for _ in range(8):
        request, _ = reg.poll(image(), True, now)
        assert request is not None
        error = m.ControllerRegistrationResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                                 error_message="not me")
        assert "NOT_CONTROLLER" in reg.on_response(error, None, now)
        _, at = reg.poll(image(), True, now)
        waits.append(at - now)
        now = at
    assert waits == [min(RETRY_BACKOFF_MS << i, RETRY_BACKOFF_MS_MAX) for i in range(8)]
    reg.poll(image(), True, now)
    assert "ConnectionError" in reg.on_response(None, ConnectionError("refused"), now)
    assert reg.attempts == 9


class _Config:
    controller_listener_name = "CONTROLLER"


class _Node:
    voters = {1: ("10.0.0.1", 9093), 2: ("10.0.0.2", 9093)}
    config = _Config()


def test_describe_cluster_prefers_a_registration_over_the_configured_address():
    registered = image(controllers={2: record(2, ME, port=9999), 7: record(7, ME, port=7777)})
    assert Node.controller_endpoints(_Node(), registered) == {
        1: ("10.0.0.1", 9093), 2: ("127.0.0.1", 9999), 7: ("127.0.0.1", 7777)}
    assert Node.controller_endpoints(_Node(), image()) == _Node.voters
