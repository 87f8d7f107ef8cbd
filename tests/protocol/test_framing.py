"""Headers, size framing, the frame decoder and ApiVersions' special rules (kafka-facts
§6.1, golden frames of §11.7)."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore.errors import ProtocolError, UnsupportedVersionError
from kraftcore.protocol import apis, framing
from kraftcore.protocol.framing import (FrameDecoder, RequestHeader, ResponseHeader,
                                        decode_request, decode_response, encode_request,
                                        encode_response)
from kraftcore.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                         FetchRequest, MetadataRequest, VoteRequest)

pytestmark = pytest.mark.smoke

H = bytes.fromhex

API_VERSIONS_V3_REQUEST = H(
    "00000022" "0012" "0003" "00000001" "0003" "636c69" "00"
    "0d" "6b61666b612d707974686f6e" "06" "322e332e32" "00")
API_VERSIONS_V3_RESPONSE = H("00000013" "00000001" "0000" "02" "0012" "0000" "0004" "00" "00000000" "00")
API_VERSIONS_UNSUPPORTED = H("00000010" "00000001" "0023" "00000001" "0012" "0000" "0004")


def test_golden_api_versions_request_v3():
    body = ApiVersionsRequest(client_software_name="kafka-python", client_software_version="2.3.2")
    assert encode_request(body, 3, correlation_id=1, client_id="cli") == API_VERSIONS_V3_REQUEST
    request = decode_request(API_VERSIONS_V3_REQUEST[4:])
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (
        18, 3, 1, "cli")
    assert request.body == body and request.body.decoded_version == 3
    assert request.header.decoded_version == 2


def test_golden_api_versions_response_v3_uses_header_v0():
    body = ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    assert encode_response(body, 3, correlation_id=1) == API_VERSIONS_V3_RESPONSE
    correlation_id, back = decode_response(API_VERSIONS_V3_RESPONSE[4:], 18, 3)
    assert correlation_id == 1 and back == body


def test_golden_unsupported_api_versions_answer():
    assert framing.unsupported_api_versions_response(1) == API_VERSIONS_UNSUPPORTED
    # a request for ApiVersions v9: the body is not parsed, the correlation id is echoed
    frame = struct.pack(">hhi", 18, 9, 77) + b"\xff\xfe garbage"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 9, 77)
    answer = framing.unsupported_api_versions_response(info.value.correlation_id)
    correlation_id, body = decode_response(answer[4:], 18, 0)
    assert correlation_id == 77 and body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_header_versions_follow_flexibility():
    assert framing.request_header_version(VoteRequest, 0) == 2       # Vote is flexible from 0
    assert framing.request_header_version(FetchRequest, 11) == 1
    assert framing.request_header_version(FetchRequest, 12) == 2
    fetch_response = apis.api(1).response
    assert framing.response_header_version(fetch_response, 11) == 0
    assert framing.response_header_version(fetch_response, 12) == 1
    assert framing.response_header_version(ApiVersionsResponse, 4) == 0


def test_request_header_v2_keeps_a_classic_client_id():
    v1 = RequestHeader(request_api_key=1, request_api_version=4, correlation_id=5, client_id="ab")
    assert v1.encode(1) == H("0001" "0004" "00000005" "0002" "6162")
    assert v1.encode(2) == H("0001" "0004" "00000005" "0002" "6162" "00")
    assert RequestHeader(client_id=None).encode(1).endswith(b"\xff\xff")
    assert ResponseHeader(correlation_id=9).encode(1) == H("00000009" "00")


@pytest.mark.parametrize("api", sorted(apis.API_BY_KEY.values()), ids=lambda a: a.name)
def test_every_api_frames_round_trip_at_every_version(api):
    low, high = api.valid_versions
    for version in range(low, high + 1):
        request = api.request()
        frame = encode_request(request, version, correlation_id=version + 1, client_id="c")
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        decoded = decode_request(frame[4:])
        assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (
            api.key, version, version + 1)
        assert decoded.body == request
        response = api.response()
        frame = encode_response(response, version, correlation_id=7)
        assert decode_response(frame[4:], api.key, version) == (7, response)


def test_unknown_api_key_and_version():
    with pytest.raises(UnsupportedVersionError, match="API key") as info:
        decode_request(struct.pack(">hhi", 999, 0, 3))
    assert info.value.correlation_id == 3
    with pytest.raises(UnsupportedVersionError):
        decode_request(struct.pack(">hhi", 52, 99, 3))
    with pytest.raises(UnsupportedVersionError):
        encode_request(VoteRequest(), 99, correlation_id=1)
    with pytest.raises(ProtocolError, match="header needs 8 bytes"):
        decode_request(b"\x00\x12\x00")
    with pytest.raises(TypeError, match="not a request"):
        encode_request(ApiVersionsResponse(), 0, correlation_id=1)


def test_truncated_request_frames_are_protocol_errors():
    for cut in range(8, len(API_VERSIONS_V3_REQUEST) - 4):
        with pytest.raises(ProtocolError) as info:
            decode_request(API_VERSIONS_V3_REQUEST[4:4 + cut])
        assert info.value.position is not None
    # bytes after a request body are skipped and counted, as Kafka does
    request = decode_request(API_VERSIONS_V3_REQUEST[4:] + b"\x00")
    assert request.trailing_bytes == 1 and request.body.client_software_name == "kafka-python"
    assert decode_request(API_VERSIONS_V3_REQUEST[4:]).trailing_bytes == 0


def test_metadata_v13_request_with_three_trailing_bytes_decodes():
    """librdkafka's all-topics Metadata v13 request carries 3 bytes after its body; Kafka
    answers it, so kraftcore must too."""
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    frame = encode_request(body, 13, correlation_id=9, client_id="rdkafka")[4:]
    request = decode_request(frame + b"\x00\x00\x00")
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (
        3, 13, 9, "rdkafka")
    assert request.body == body and request.body.topics is None
    assert request.trailing_bytes == 3
    assert request.body.decoded_version == 13


def test_responses_stay_strict_about_trailing_bytes():
    frame = API_VERSIONS_V3_RESPONSE[4:] + b"\x00"
    with pytest.raises(ProtocolError, match="1 unexpected bytes"):
        decode_response(frame, 18, 3)


# ------------------------------------------------------------------------------ decoder


def _frames(payloads):
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=50), max_size=6), st.data())
def test_decoder_returns_whole_frames_however_the_bytes_arrive(payloads, data):
    stream = _frames(payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    got = []
    start = 0
    for cut in cuts + [len(stream)]:
        got += decoder.feed(stream[start:cut])
        start = cut
    assert got == payloads
    assert decoder.buffered_bytes == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([10, 65535, 65536, 200_000]), min_size=1, max_size=4),
       st.data())
def test_large_frames_are_handed_over_and_the_stream_goes_on(sizes, data):
    """A large frame that is all the decoder holds comes out as a view of its buffer (not
    a copy); the frames after it, and the stream positions in errors, are unchanged."""
    payloads = [bytes([i]) * n for i, n in enumerate(sizes)]
    stream = _frames(payloads)
    step = data.draw(st.sampled_from([1000, 65536, 262144, len(stream)]))
    decoder = FrameDecoder(frame_bytes_max=1 << 20)
    got = []
    for start in range(0, len(stream), step):
        got += decoder.feed(stream[start:start + step])
    assert [bytes(f) for f in got] == payloads
    assert decoder.buffered_bytes == 0
    with pytest.raises(ProtocolError) as info:
        decoder.feed(struct.pack(">i", -1))
    assert info.value.position == len(stream)


def test_decoder_waits_for_partial_frames():
    decoder = FrameDecoder()
    stream = _frames([b"abc", b"defg"])
    assert decoder.feed(stream[:2]) == []
    assert decoder.feed(stream[2:6]) == []
    assert decoder.buffered_bytes == 6
    assert decoder.feed(stream[6:9]) == [b"abc"]
    assert decoder.buffered_bytes == 2
    assert decoder.feed(stream[9:]) == [b"defg"]


@pytest.mark.parametrize("size", [-1, -(1 << 31), 1025])
def test_decoder_rejects_bad_sizes_and_stays_failed(size):
    decoder = FrameDecoder(frame_bytes_max=1024)
    assert decoder.feed(_frames([b"ok"])) == [b"ok"]
    with pytest.raises(ProtocolError, match=r"frame size .* outside \[0, 1024\]") as info:
        decoder.feed(struct.pack(">i", size) + b"x")
    assert info.value.position == 6  # the stream offset of the bad size prefix
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


def test_decoder_limits_are_checked():
    with pytest.raises(ValueError):
        FrameDecoder(frame_bytes_max=0)
    assert FrameDecoder().frame_bytes_max == 100 * 1024 * 1024
    assert FrameDecoder().feed(_frames([b""])) == [b""]


def test_a_failed_decoder_raises_fresh_errors():
    decoder = FrameDecoder(frame_bytes_max=8)
    with pytest.raises(ProtocolError) as first:
        decoder.feed(struct.pack(">i", 9))
    with pytest.raises(ProtocolError) as again:
        decoder.feed(b"x")
    assert again.value is not first.value and str(again.value) == str(first.value)
