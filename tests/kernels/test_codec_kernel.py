"""The generic protocol codec kernel: every field type in classic and flexible form, tagged
fields (known, unknown, preserved), versions, defaults, bad values and malformed bytes, on
both implementations, which must agree byte for byte."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore import codec
from kraftcore.errors import EncodeError, ProtocolError, UnsupportedVersionError
from kraftcore.protocol.schema import Field as F, message, parse_versions
from kraftcore.types import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from tests.protocol.strategies import message_at

pytestmark = pytest.mark.smoke

# The protocol kernel of each implementation (module level, so hypothesis tests can use it).
KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}

# A schema that exercises every kind, classic in v0-1 and flexible from v2.
Sample = message("Sample", kind="data", valid="0-3", flexible="2+", fields=[
    F("Flag", "bool"),
    F("Small", "int8", default=-1),
    F("Short", "int16"),
    F("Int", "int32", default=-1),
    F("Long", "int64"),
    F("Port", "uint16"),
    F("Unsigned", "uint32", versions="1+"),
    F("Ratio", "float64"),
    F("Id", "uuid"),
    F("Name", "string"),
    F("MaybeName", "string", nullable="0+", default=None),
    F("Blob", "bytes"),
    F("MaybeBlob", "bytes", nullable="1+", versions="1+", default=None),
    F("Records", "records", nullable="0+"),
    F("Ints", "[]int32"),
    F("Ids", "[]uuid", versions="1+"),
    F("Names", "[]string", nullable="2+", default=None, versions="2+"),
    F("Entries", "[]Entry", fields=[
        F("Key", "string"),
        F("Value", "int64", default=7),
        F("Note", "string", versions="3+", nullable="3+", default=None, tag=0),
    ]),
    F("Single", "Point", versions="1+", fields=[F("X", "int32", default=-1), F("Y", "int32")]),
    F("Dropped", "int32", versions="0-1", default=0, ignorable=True),
    F("Kept", "int32", versions="0-1", default=0),
    F("Hint", "int32", versions="2+", tag=3, default=-1),
    F("Leader", "Point", versions="2+", tag=1),
    F("MaybeInts", "[]int32", versions="2+", nullable="2+", tag=0, default=None),
])


def _full(version):
    values = dict(flag=True, small=-5, short=300, int=-70000, long=1 << 40, port=65535,
                  ratio=2.5, id=METADATA_TOPIC_ID, name="héllo", maybe_name=None, blob=b"\x00\xff",
                  records=b"batch", ints=[1, -2, 3],
                  entries=[Sample.Entry(key="a", value=1), Sample.Entry(key="b")])
    if version >= 1:
        values.update(unsigned=4000000000, maybe_blob=b"x", ids=[Uuid(bytes(range(16)))],
                      single=Sample.Point(x=1, y=2))
    if version <= 1:
        values.update(kept=9)
    if version >= 2:
        values.update(names=["n"], hint=5, leader=Sample.Point(x=3, y=4), maybe_ints=[9])
    return Sample(**values)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_round_trip_every_kind(impl, version):
    prog = Sample.program(version)
    value = _full(version)
    data = impl.protocol.encode_struct(prog, value)
    back = impl.protocol.decode_message(prog, data)
    assert bytes(back.records) == b"batch"
    back.records = value.records
    assert back == value


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 3).flatmap(lambda v: st.tuples(st.just(v), message_at(Sample, v))))
def test_implementations_agree_on_generated_values(case):
    version, value = case
    prog = Sample.program(version)
    encoded = {name: k.encode_struct(prog, value) for name, k in KERNELS.items()}
    assert len(set(encoded.values())) == 1
    data = encoded["py"]
    for k in KERNELS.values():
        back = k.decode_message(prog, data)
        # records decode as zero-copy views: compare their bytes
        assert (back.records is None) == (value.records is None)
        back.records = value.records
        assert back == value
        assert k.encode_struct(prog, back) == data


def test_classic_and_compact_encodings(impl):
    # v0 strings are int16-length, v2 strings are uvarint(N+1); v2 structs end with tags
    v0 = impl.protocol.encode_struct(Sample.program(0), Sample(name="ab"))
    v2 = impl.protocol.encode_struct(Sample.program(2), Sample(name="ab"))
    assert b"\x00\x02ab" in v0
    assert b"\x03ab" in v2 and b"\x00\x02ab" not in v2


def test_nulls_per_version(impl):
    P = impl.protocol
    # MaybeBlob is nullable from v1 and a null array is -1 in classic form, 0 in compact
    assert P.decode_message(Sample.program(1), P.encode_struct(Sample.program(1), Sample())).maybe_blob is None
    with pytest.raises(EncodeError, match="not nullable"):
        P.encode_struct(Sample.program(0), Sample(name=None))
    with pytest.raises(EncodeError, match="not nullable"):
        P.encode_struct(Sample.program(0), Sample(ints=None))


def test_tagged_fields_are_left_out_at_default_and_kept_in_tag_order(impl):
    P = impl.protocol
    prog = Sample.program(2)
    plain = P.encode_struct(prog, Sample())
    assert plain.endswith(b"\x00")  # empty top-level tag section
    tagged = P.encode_struct(prog, Sample(hint=5, maybe_ints=[1], leader=Sample.Point(x=1)))
    tail = tagged[len(plain) - 1:]
    # count 3, then tags 0, 1, 3 in increasing order
    assert tail[0] == 3
    assert tail[1:3] == bytes([0, 1 + 4])          # tag 0: a compact count byte + an int32
    assert tail[8:10] == bytes([1, 4 + 4 + 1])     # tag 1: a Point (two int32s + its tags)
    assert tail[19:21] == bytes([3, 4])            # tag 3: an int32
    back = P.decode_message(prog, tagged)
    assert (back.hint, back.maybe_ints, back.leader.x) == (5, [1], 1)


def test_unknown_tags_survive_a_round_trip(impl):
    P = impl.protocol
    prog = Sample.program(2)
    value = Sample(hint=5)
    value._unknown_tags = [(2, b"\x01\x02"), (9, b"")]
    data = P.encode_struct(prog, value)
    back = P.decode_message(prog, data)
    assert back._unknown_tags == [(2, b"\x01\x02"), (9, b"")]
    assert P.encode_struct(prog, back) == data


def test_a_version_that_lacks_a_field(impl):
    P = impl.protocol
    # non-ignorable: a non-default value is an error; the default is fine
    with pytest.raises(EncodeError, match="cannot be written"):
        P.encode_struct(Sample.program(2), Sample(kept=1))
    P.encode_struct(Sample.program(2), Sample(kept=0))
    # ignorable: dropped silently
    P.encode_struct(Sample.program(2), Sample(dropped=3))
    # decoding a version that lacks a field gives its default
    assert P.decode_message(Sample.program(0), P.encode_struct(Sample.program(0), Sample())).unsigned == 0
    assert P.decode_message(Sample.program(0), P.encode_struct(Sample.program(0), Sample())).single == Sample.Point()


@pytest.mark.parametrize("field, value, message_part", [
    ("small", 128, "out of range"),
    ("short", -32769, "out of range"),
    ("port", -1, "out of range"),
    ("unsigned", 1 << 32, "out of range"),
    ("long", 1 << 63, "out of range"),
    ("int", "1", "must be an int"),
    ("int", True, "must be an int"),
    ("flag", "yes", "must be a bool"),
    ("ratio", "x", "must be a float"),
    ("id", b"short", "16-byte Uuid"),
    ("name", b"bytes", "must be a str"),
    ("name", "\ud800", "UTF-8"),
    ("blob", "text", "bytes-like"),
    ("ints", "123", "must be a list"),
    ("ints", [1, None], "null element"),
    ("ints", [1 << 31], "out of range"),
    ("entries", [object()], "elements must be Entry"),
    ("single", 3, "must be a Point"),
])
def test_bad_values_raise_encode_error_naming_the_field(impl, field, value, message_part):
    with pytest.raises(EncodeError, match=message_part) as info:
        impl.protocol.encode_struct(Sample.program(1), Sample(**{field: value}))
    assert f"Sample.{field}" in str(info.value) or field == "entries" or field == "single"


def test_classic_string_length_limit(impl):
    with pytest.raises(EncodeError, match="32767"):
        impl.protocol.encode_struct(Sample.program(0), Sample(name="x" * 40000))
    # compact strings have no int16 limit
    data = impl.protocol.encode_struct(Sample.program(2), Sample(name="x" * 40000))
    assert impl.protocol.decode_message(Sample.program(2), data).name == "x" * 40000


@pytest.mark.parametrize("version", [0, 2, 3])
def test_every_truncation_is_a_protocol_error(impls, version):
    prog = Sample.program(version)
    data = impls["py"].protocol.encode_struct(prog, _full(version))
    for cut in range(len(data)):
        outcomes = set()
        for i in impls.values():
            with pytest.raises(ProtocolError) as info:
                i.protocol.decode_message(prog, data[:cut])
            assert info.value.position is not None and 0 <= info.value.position <= cut
            outcomes.add((str(info.value)))
        assert len(outcomes) == 1, outcomes


def test_trailing_bytes_are_an_error(impl):
    prog = Sample.program(2)
    data = impl.protocol.encode_struct(prog, Sample())
    with pytest.raises(ProtocolError, match="1 unexpected bytes") as info:
        impl.protocol.decode_message(prog, data + b"\x00")
    assert info.value.position == len(data)
    # decode_struct stops where the struct ends and says where
    obj, end = impl.protocol.decode_struct(prog, data + b"\x00")
    assert end == len(data)


Tiny = message("Tiny", valid="0-1", flexible="1+", fields=[
    F("Name", "string", nullable="0+"),
    F("Ints", "[]int32"),
    F("Entries", "[]Entry", fields=[F("A", "int8")]),
    F("Hint", "int32", versions="1+", tag=0),
])


@pytest.mark.parametrize("version, data, what", [
    (0, b"\xff\xfe", "negative length"),                       # string length -2
    (0, b"\x00\x05ab", "truncated"),                            # length beyond the input
    (0, b"\xff\xff\xff\xff\xff\xfe", "claims -2 elements"),    # null name, ints count -2
    (0, b"\xff\xff\x7f\xff\xff\xff", "claims"),                 # array count 2^31-1
    (0, b"\xff\xff\x00\x00\x00\x00\x00\x01\x00\x00", "claims"),  # 1 entry: needs 1 byte, has 0...
    (1, b"\x00\x01\x01\x80\x80\x80\x80\x10", "bad varint"),     # 5-byte varint overflowing 32 bits
    (1, b"\x00\x01\x01\x80", "truncated varint"),
    (1, b"\x02\xc3\x28\x01\x01\x00", "UTF-8"),                  # invalid UTF-8
    (1, b"\x00\x01\x01\x01\x00\x05\x00", "truncated tagged field 0"),
    (1, b"\x00\x01\x01\x01\x00\x05\x00\x00\x00\x01\x00", "has 5 bytes but its value takes 4"),
])
def test_malformed_bytes_name_the_problem(impls, version, data, what):
    prog = Tiny.program(version)
    messages = set()
    for i in impls.values():
        with pytest.raises(ProtocolError, match=what) as info:
            i.protocol.decode_message(prog, data)
        assert info.value.position is not None
        messages.add(str(info.value))
    assert len(messages) == 1, messages


def test_a_null_in_a_non_nullable_field(impl):
    NotNull = message("NotNull", valid="0", flexible="none", fields=[F("Name", "string")])
    with pytest.raises(ProtocolError, match="not nullable"):
        impl.protocol.decode_message(NotNull.program(0), b"\xff\xff")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 3))
def test_arbitrary_bytes_never_crash_and_implementations_agree(raw, version):
    prog = Sample.program(version)
    results = []
    for k in KERNELS.values():
        try:
            obj = k.decode_message(prog, raw)
            results.append(("ok", k.encode_struct(prog, obj)))
        except ProtocolError as exc:
            results.append(("error", str(exc)))
    assert len(set(results)) == 1, results


def test_records_decode_without_copying(impl):
    prog = Sample.program(2)
    payload = bytes(range(256)) * 64
    data = bytearray(impl.protocol.encode_struct(prog, Sample(records=payload)))
    view = impl.protocol.decode_message(prog, data).records
    assert isinstance(view, memoryview) and bytes(view) == payload
    with pytest.raises(BufferError):
        data.append(0)  # the decoded view still points into `data`


def test_schema_rules():
    assert parse_versions("0+") == (0, None)
    assert parse_versions("1-3") == (1, 3)
    assert parse_versions("2") == (2, 2)
    with pytest.raises(UnsupportedVersionError, match="versions 0-3"):
        Sample().encode(4)
    with pytest.raises(TypeError, match="no field"):
        Sample(nope=1)
    with pytest.raises(ValueError, match="used before"):
        message("Broken", fields=[F("A", "[]Thing")])
    s = _full(3)
    assert s.replace(name="z").name == "z" and s.name == "héllo"
    assert Sample.decode(s.encode(3), 3).decoded_version == 3
    doc = s.to_json(0)
    assert doc["name"] == "héllo" and doc["id"] == "AAAAAAAAAAAAAAAAAAAAAQ" and "unsigned" not in doc
    assert doc["entries"] == [{"key": "a", "value": 1}, {"key": "b", "value": 7}]
    assert s.to_json()["entries"][0] == {"key": "a", "value": 1, "note": None}


def test_uuid_text_form():
    assert str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert Uuid.from_str("AAAAAAAAAAAAAAAAAAAAAQ") == METADATA_TOPIC_ID
    assert Uuid.from_ints(0, 1) == METADATA_TOPIC_ID
    for bad in ("", "AAAA", "A" * 25, "!!!!!!!!!!!!!!!!!!!!!!", 5):
        with pytest.raises(ValueError):
            Uuid.from_str(bad)
    import random

    rng = random.Random(1)
    ids = {Uuid.random(rng) for _ in range(100)}
    assert ZERO_UUID not in ids and METADATA_TOPIC_ID not in ids and len(ids) == 100
    assert not any(str(u).startswith("-") for u in ids)
    assert struct.unpack(">QQ", METADATA_TOPIC_ID) == (0, 1)


def test_kept_unknown_tags_must_be_tag_and_bytes_pairs(impl):
    prog = Sample.program(2)
    value = Sample()
    value._unknown_tags = [(9, bytearray(b"xy")), (7, memoryview(b"z"))]
    data = impl.protocol.encode_struct(prog, value)
    assert data.endswith(bytes.fromhex("02" "07" "01" "7a" "09" "02" "7879"))
    big = Sample()
    big._unknown_tags = [(9, bytearray(200_000))]
    assert impl.protocol.decode_message(prog, impl.protocol.encode_struct(prog, big))._unknown_tags == [
        (9, bytes(200_000))]
    for bad, what in (([(9, "abc")], "must hold bytes"), ([(-1, b"")], "bad tag"),
                      ([(True, b"")], "bad tag"), ([9], "not a \\(tag, bytes\\) pair")):
        value._unknown_tags = bad
        with pytest.raises(EncodeError, match=what):
            impl.protocol.encode_struct(prog, value)


def test_a_float64_out_of_range(impl):
    with pytest.raises(EncodeError, match="float64's range"):
        impl.protocol.encode_struct(Sample.program(0), Sample(ratio=10 ** 400))


def test_a_null_element_is_reported_where_it_is_met():
    # [null, then a string claiming 126 bytes]: both kernels stop at the null element
    Names = message("Names", valid="0", flexible="0+", fields=[
        F("Names", "[]string", nullable="0+", default=None)])
    errors = set()
    for kernel in KERNELS.values():
        with pytest.raises(ProtocolError, match="holds a null element") as info:
            kernel.decode_message(Names.program(0), bytes.fromhex("03007f"))
        errors.add(str(info.value))
    assert len(errors) == 1


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_json_round_trip(version):
    import json

    value = _full(version)
    doc = json.loads(json.dumps(value.to_json(version)))
    assert Sample.from_json(doc, version) == value
    with pytest.raises(ValueError, match="Sample.int must be an integer"):
        Sample.from_json({"int": "x"}, version)
    with pytest.raises(ValueError, match="Sample.small = 300 is out of the int8 range"):
        Sample.from_json({"small": 300}, version)
    with pytest.raises(ValueError, match="Sample.blob must be base64"):
        Sample.from_json({"blob": "%%"}, version)
