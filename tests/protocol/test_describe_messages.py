"""DescribeConfigs (API 32) byte for byte, and kraftcore's tagged BrokerEpoch extension of
DescribeClusterResponse: present, absent, and read by a decoder that does not know it.

The byte vectors are written out by hand from Kafka's schema (kafka-facts has none for
these messages); test_messages_peer.py checks the same schemas against kafka-python."""

import pytest

from kraftcore.errors import EncodeError
from kraftcore.protocol import messages as M
from kraftcore.protocol.schema import Field as F, message

DC = M.DescribeConfigsRequest
DR = M.DescribeConfigsResponse


# ------------------------------------------------------------------------------ DescribeConfigs

def _request():
    return DC(resources=[DC.DescribeConfigsResource(resource_type=2, resource_name="t1",
                                                    configuration_keys=None)],
              include_synonyms=True)


@pytest.mark.smoke
def test_describe_configs_request_v4_bytes(impl):
    golden = bytes.fromhex(
        "02"        # Resources: compact array of 1
        "02"        # ResourceType TOPIC
        "037431"    # ResourceName "t1" (compact: length + 1)
        "00"        # ConfigurationKeys null
        "00"        # the resource's tagged fields
        "01"        # IncludeSynonyms
        "00"        # IncludeDocumentation
        "00")       # tagged fields
    prog = DC.program(4)
    assert impl.protocol.encode_struct(prog, _request()) == golden
    assert impl.protocol.decode_message(prog, golden) == _request()


def test_describe_configs_request_v1_bytes(impl):
    golden = bytes.fromhex("00000001" "02" "00027431" "ffffffff" "01")
    prog = DC.program(1)
    assert impl.protocol.encode_struct(prog, _request()) == golden
    assert impl.protocol.decode_message(prog, golden) == _request()


def test_describe_configs_request_flags_are_not_dropped(impl):
    """IncludeSynonyms (v1+) and IncludeDocumentation (v3+) are not ignorable."""
    with pytest.raises(EncodeError, match="include_synonyms"):
        impl.protocol.encode_struct(DC.program(0), _request())
    with pytest.raises(EncodeError, match="include_documentation"):
        impl.protocol.encode_struct(DC.program(2), DC(include_documentation=True))


def _response():
    return DR(throttle_time_ms=0, results=[DR.DescribeConfigsResult(
        error_code=0, error_message=None, resource_type=2, resource_name="t1",
        configs=[DR.DescribeConfigsResourceResult(
            name="min.insync.replicas", value="2", read_only=False, is_default=False,
            config_source=1, is_sensitive=False, config_type=3,
            synonyms=[DR.DescribeConfigsSynonym(name="min.insync.replicas", value="2",
                                                source=1)])])])


@pytest.mark.smoke
def test_describe_configs_response_v0_bytes(impl):
    name = b"min.insync.replicas".hex()
    golden = bytes.fromhex(
        "00000000"          # ThrottleTimeMs
        "00000001"          # Results: 1
        "0000" "ffff"       # ErrorCode, ErrorMessage null
        "02" "00027431"     # ResourceType, ResourceName "t1"
        "00000001"          # Configs: 1
        "0013" + name +     # Name
        "000132"            # Value "2"
        "00" "00" "00")     # ReadOnly, IsDefault, IsSensitive
    prog = DR.program(0)
    # v0 has neither ConfigSource, Synonyms nor ConfigType: all ignorable, dropped.
    assert impl.protocol.encode_struct(prog, _response()) == golden
    back = impl.protocol.decode_message(prog, golden).results[0].configs[0]
    assert (back.value, back.is_default, back.config_source, back.synonyms) == ("2", False,
                                                                               -1, [])


def test_describe_configs_response_v4_bytes(impl):
    name = b"min.insync.replicas".hex()
    golden = bytes.fromhex(
        "00000000" "02"     # ThrottleTimeMs, Results: compact array of 1
        "0000" "00"         # ErrorCode, ErrorMessage null
        "02" "037431"       # ResourceType, ResourceName "t1"
        "02"                # Configs: 1
        "14" + name +       # Name
        "0232"              # Value "2"
        "00"                # ReadOnly (IsDefault is v0 only)
        "01"                # ConfigSource TOPIC_CONFIG
        "00"                # IsSensitive
        "02" "14" + name + "0232" "01" "00"   # Synonyms: [(name, "2", TOPIC_CONFIG)]
        "03"                # ConfigType INT
        "00"                # Documentation null
        "00" "00" "00")     # tagged fields: config, result, response
    prog = DR.program(4)
    assert impl.protocol.encode_struct(prog, _response()) == golden
    assert impl.protocol.decode_message(prog, golden) == _response()


def test_describe_configs_is_default_exists_only_in_v0(impl):
    obj = DR(results=[DR.DescribeConfigsResult(configs=[DR.DescribeConfigsResourceResult(
        is_default=True)])])
    with pytest.raises(EncodeError, match="is_default"):
        impl.protocol.encode_struct(DR.program(1), obj)


# ------------------------------------------------------------------------------ BrokerEpoch

DCR = M.DescribeClusterResponse


def _cluster(epoch):
    return DCR(cluster_id="c", controller_id=1, brokers=[DCR.DescribeClusterBroker(
        broker_id=1, host="h", port=9092, broker_epoch=epoch)])


# The same schema without kraftcore's field: what a client built from Kafka's schema reads.
KafkaDescribeClusterResponse = message(
    "KafkaDescribeClusterResponse", kind="response", valid="0-2", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
        F("EndpointType", "int8", "1+", default=1),
        F("ClusterId", "string"),
        F("ControllerId", "int32", default=-1),
        F("Brokers", "[]DescribeClusterBroker", fields=[
            F("BrokerId", "int32"),
            F("Host", "string"),
            F("Port", "int32"),
            F("Rack", "string", nullable="0+", default=None),
            F("IsFenced", "bool", "2+"),
        ]),
        F("ClusterAuthorizedOperations", "int32", default=-2147483648),
    ])


@pytest.mark.parametrize("version", range(3))
def test_broker_epoch_is_tagged_and_optional(impl, version):
    prog = DCR.program(version)
    plain = impl.protocol.encode_struct(prog, _cluster(-1))
    tagged = impl.protocol.encode_struct(prog, _cluster(42))
    # The tag costs 1 (count) + 2 (tag 10000 as a varint) + 1 (size) + 8 bytes.
    field = bytes.fromhex("01" "904e" "08" "000000000000002a")
    assert len(tagged) == len(plain) + len(field) - 1
    assert field in tagged
    assert impl.protocol.decode_message(prog, tagged).brokers[0].broker_epoch == 42
    assert impl.protocol.decode_message(prog, plain).brokers[0].broker_epoch == -1
    # Without the tag the bytes are exactly Kafka's.
    kafka = KafkaDescribeClusterResponse.program(version)
    assert impl.protocol.encode_struct(kafka, impl.protocol.decode_message(kafka, plain)) == \
        plain


@pytest.mark.parametrize("version", range(3))
def test_a_decoder_without_the_field_keeps_it_as_an_unknown_tag(impl, version):
    kafka = KafkaDescribeClusterResponse.program(version)
    data = impl.protocol.encode_struct(DCR.program(version), _cluster(42))
    back = impl.protocol.decode_message(kafka, data)
    (broker,) = back.brokers
    assert (broker.broker_id, broker.host, broker.port) == (1, "h", 9092)
    assert [(tag, bytes(value)) for tag, value in broker._unknown_tags] == [
        (M.BROKER_EPOCH_TAG, (42).to_bytes(8, "big"))]
    # ... and writes it back unchanged.
    assert impl.protocol.encode_struct(kafka, back) == data
