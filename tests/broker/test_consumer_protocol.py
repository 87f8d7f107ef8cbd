"""A consumer group member's assignment bytes (`group_records.decode_assignment`, Kafka's
ConsumerProtocolAssignment): the bytes kafka-python's consumers hand the coordinator decode
to the same partitions; damaged bytes — every truncation, counts and lengths that lie,
random bytes — are a `ProtocolError` with a position, never another exception."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore.broker.group_records import ConsumerAssignment, decode_assignment
from kraftcore.errors import ProtocolError


def string(text):
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def assignment(version, topics, user_data=None):
    out = struct.pack(">hi", version, len(topics))
    for topic, parts in topics:
        out += string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + (struct.pack(">i", -1) if user_data is None
                  else struct.pack(">i", len(user_data)) + user_data)


GOOD = assignment(1, [("orders", [0, 3]), ("payments", [1])], b"ud")


def test_the_layout_of_every_version():
    assert decode_assignment(GOOD) == ConsumerAssignment(
        1, [("orders", [0, 3]), ("payments", [1])], b"ud")
    assert decode_assignment(assignment(0, [])) == ConsumerAssignment(0, [], None)
    assert decode_assignment(assignment(3, [("t", [])], b"")) == ConsumerAssignment(
        3, [("t", [])], b"")


def test_what_kafka_python_writes():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    for version in range(4):
        data = ConsumerProtocolAssignment(version, [("orders", [2, 0]), ("pay", [5])],
                                          b"x").encode()
        assert decode_assignment(data) == ConsumerAssignment(
            version, [("orders", [2, 0]), ("pay", [5])], b"x")


def test_a_later_versions_fields_are_skipped():
    """Kafka's consumer reads a newer version with the newest schema it knows."""
    assert decode_assignment(assignment(9, [("t", [1])]) + b"\x01\x02") == \
        ConsumerAssignment(9, [("t", [1])], None)


def test_every_truncation_is_a_protocol_error():
    for end in range(len(GOOD)):
        with pytest.raises(ProtocolError) as caught:
            decode_assignment(GOOD[:end])
        assert caught.value.position is not None and caught.value.position <= end


@pytest.mark.parametrize("data, words", [
    (b"", "ends inside its version"),
    (struct.pack(">hi", -1, 0) + struct.pack(">i", -1), "version -1"),
    (struct.pack(">hi", 0, -1), "topic count -1"),
    (struct.pack(">hi", 0, 1 << 30) + b"\0" * 8, "topic count 1073741824 does not fit"),
    (struct.pack(">hih", 0, 1, -1) + b"\0" * 8, "null topic name"),
    (struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + struct.pack(">ii", 0, -1), "not UTF-8"),
    (struct.pack(">hi", 0, 1) + string("t") + struct.pack(">i", 1000), "partition count"),
    (assignment(0, [])[:-4] + struct.pack(">i", -2), "user data has length -2"),
    (assignment(0, [])[:-4] + struct.pack(">i", 5) + b"ab", "ends inside its user data"),
])
def test_lies_are_named(data, words):
    with pytest.raises(ProtocolError, match=words):
        decode_assignment(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_protocol_error(data):
    try:
        decoded = decode_assignment(data)
    except ProtocolError:
        return
    assert isinstance(decoded, ConsumerAssignment)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.integers(1, 255))
def test_a_flipped_byte_decodes_or_raises_protocol_error(at, flip):
    data = bytearray(GOOD)
    data[at] ^= flip
    try:
        decode_assignment(bytes(data))
    except ProtocolError:
        pass
