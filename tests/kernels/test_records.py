import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore.errors import CorruptRecordError
from tests.conftest import IMPLEMENTATIONS
from tests.kernels.records_util import reseal, snapshot

TS = 1_700_000_000_000

# kafka-facts §11.3
GOLDEN_DATA_BATCH = bytes.fromhex(
    "00000000000000000000003d0000000002e641a44b0000000000000000018bcfe568000000018bcfe56800"
    "ffffffffffffffffffffffffffff0000000116000000010a68656c6c6f00"
)
# kafka-facts §11.4: LeaderChange control batch, epoch 1, leader 1, voters [1], granting [1]
GOLDEN_LEADER_CHANGE = bytes.fromhex(
    "00000000000000000000004f00000001021154eaf90020000000000000018bcfe568000000018bcfe56800"
    "ffffffffffffffffffffffffffff000000013a0000000800000002260000000000010200000001000200000001000000"
)
LEADER_CHANGE_KEY = bytes.fromhex("00000002")
# Version 0, LeaderId 1, Voters [1], GrantingVoters [1], each struct closing its tags
LEADER_CHANGE_VALUE = bytes.fromhex("00000000000102000000010002000000010000")


@pytest.mark.smoke
def test_golden_data_batch(impl):
    encoded = impl.records.encode_batch([b"hello"], timestamp=TS, leader_epoch=0)
    assert encoded == GOLDEN_DATA_BATCH
    [batch] = impl.records.decode_batches(GOLDEN_DATA_BATCH)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic) == (0, 0, 2)
    assert (batch.crc, batch.attributes, batch.records_count, batch.size_bytes) == (0xE641A44B, 0, 1, 73)
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    [record] = batch.records
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == (0, TS, None, b"hello", ())


@pytest.mark.smoke
def test_golden_leader_change_control_batch(impl):
    encoded = impl.records.encode_batch(
        [LEADER_CHANGE_VALUE], keys=[LEADER_CHANGE_KEY], timestamp=TS, leader_epoch=1, control=True
    )
    assert encoded == GOLDEN_LEADER_CHANGE
    [batch] = impl.records.decode_batches(GOLDEN_LEADER_CHANGE)
    assert batch.is_control and not batch.is_transactional and batch.crc == 0x1154EAF9
    assert batch.records[0].key == LEADER_CHANGE_KEY


def test_header_fields_and_flags(impl):
    raw = impl.records.encode_batch(
        [b"a", None, b"c"],
        keys=[None, b"k", b""],
        timestamps=[TS + 5, TS, TS + 9],
        base_offset=1000,
        leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=11,
        transactional=True,
    )
    [b] = impl.records.decode_batches(raw)
    assert (b.base_offset, b.last_offset, b.next_offset, b.last_offset_delta) == (1000, 1002, 1003, 2)
    assert (b.base_timestamp, b.max_timestamp) == (TS + 5, TS + 9)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (42, 3, 11)
    assert b.is_transactional and not b.is_control and b.timestamp_type == 0
    assert [(r.offset, r.timestamp, r.key, r.value) for r in b.records] == [
        (1000, TS + 5, None, b"a"),
        (1001, TS, b"k", None),
        (1002, TS + 9, b"", b"c"),
    ]


def test_log_append_time_gives_every_record_the_max_timestamp(impl):
    raw = impl.records.encode_batch([b"x", b"y"], timestamps=[1, 2], log_append_time=True)
    raw = bytearray(raw)
    struct.pack_into(">q", raw, 35, TS)  # the broker stamps maxTimestamp...
    [b] = impl.records.decode_batches(reseal(raw))  # ...and recomputes the CRC
    assert b.timestamp_type == 1
    assert [r.timestamp for r in b.records] == [TS, TS]


def test_headers_round_trip(impl):
    headers = [[("a", b"1"), ("ü", None)], [], None]
    raw = impl.records.encode_batch([b"v1", b"v2", b"v3"], headers=headers)
    [b] = impl.records.decode_batches(raw)
    assert [r.headers for r in b.records] == [(("a", b"1"), ("ü", None)), (), ()]


def test_several_batches_back_to_back_with_positions(impl):
    first = impl.records.encode_batch([b"a"], base_offset=0)
    second = impl.records.encode_batch([b"b", b"c"], base_offset=1, compression="lz4")
    batches = impl.records.decode_batches(first + second)
    assert [b.position for b in batches] == [0, len(first)]
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c"]
    assert impl.records.validate_batches(first + second) == 2
    assert impl.records.decode_batches(b"") == [] and impl.records.validate_batches(b"") == 0


def test_lz4_batches_are_kafka_lz4_frames(impl):
    values = [b"value-%d" % (i % 7) * 10 for i in range(500)]
    raw = impl.records.encode_batch(values, compression="lz4")
    assert raw[21:23] == b"\x00\x03"
    assert raw[61:65] == bytes.fromhex("04224d18")  # LZ4 frame magic
    assert raw[65] == 0x60 and raw[66] == 0x40  # independent blocks, no checksums; 64 KiB blocks
    assert raw[-4:] == b"\x00\x00\x00\x00"  # end mark
    assert len(raw) < sum(map(len, values))
    assert [r.value for r in impl.records.decode_batches(raw)[0].records] == values


def test_records_outlive_the_input_buffer(impl):
    buf = bytearray(impl.records.encode_batch([b"kept"], keys=[b"k"]))
    [b] = impl.records.decode_batches(buf)
    record = b.records[0]
    del b, buf
    assert (record.key, record.value) == (b"k", b"kept")


def test_accepts_bytearray_and_memoryview_inputs(impl):
    raw = impl.records.encode_batch([bytearray(b"v"), memoryview(b"w")], keys=[memoryview(b"k"), None])
    for buf in (raw, bytearray(raw), memoryview(raw)):
        assert [r.value for r in impl.records.decode_batches(buf)[0].records] == [b"v", b"w"]


def test_generators_are_accepted_as_columns(impl):
    raw = impl.records.encode_batch(iter([b"a", b"b"]), keys=(k for k in [b"x", b"y"]))
    assert raw == impl.records.encode_batch([b"a", b"b"], keys=[b"x", b"y"])


def test_headers_as_lists_or_tuples_encode_alike(impl):
    """A header pair may be any 2-element sequence; the encoder keeps a snapshot of it."""
    as_tuples = impl.records.encode_batch([b"a", b"b"], headers=[[("k", b"v")], (("x", None),)])
    as_lists = impl.records.encode_batch([b"a", b"b"], headers=[[["k", b"v"]], [["x", None]]])
    assert as_tuples == as_lists
    (batch,) = impl.records.decode_batches(as_lists)
    assert [r.headers for r in batch.records] == [(("k", b"v"),), (("x", None),)]


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(values=[]), ValueError, "at least one record"),
        (dict(values=[b"a"], keys=[b"a", b"b"]), ValueError, "keys has 2 elements"),
        (dict(values=[b"a"], timestamps=[]), ValueError, "timestamps has 0"),
        (dict(values=["text"]), TypeError, "values\\[0\\] must be bytes-like"),
        (dict(values=[b"a"], keys=[1]), TypeError, "keys\\[0\\] must be bytes-like"),
        (dict(values=[b"a"], headers=[[(b"k", b"v")]]), TypeError, "keys must be str"),
        (dict(values=[b"a"], timestamps=["now"]), TypeError, "timestamps\\[0\\]"),
        (dict(values=[b"a"], timestamps=[2**63]), ValueError, "timestamps\\[0\\]"),
        (dict(values=[b"a", b"b"], timestamps=[0, -(2**63) - 1]), ValueError,
         "timestamps\\[1\\] out of range"),
        (dict(values=[b"a"], timestamps=[True]), TypeError, "timestamps\\[0\\] must be an int"),
        (dict(values=[b"a", b"b"], headers=[[], [("k", "text")]]), TypeError,
         "headers\\[1\\] value must be bytes-like"),
        (dict(values=[b"a"], headers=[7]), TypeError, "headers\\[0\\]"),
        (dict(values=[b"a"], headers=[[("k", b"v", b"w")]]), ValueError, "unpack"),
        (dict(values=[b"a", b"b"], timestamps=[-(2**63), 2**63 - 1]), ValueError, "too far"),
        (dict(values=[b"a"], base_offset=-1), ValueError, "base_offset"),
        (dict(values=[b"a", b"b"], base_offset=2**63 - 1), ValueError, "too many records"),
        (dict(values=[b"a"], leader_epoch=2**31), ValueError, "leader_epoch"),
        (dict(values=[b"a"], producer_epoch=2**15), ValueError, "producer_epoch"),
        (dict(values=[b"a"], base_sequence=True), TypeError, "base_sequence"),
        (dict(values=[b"a"], compression="brotli"), ValueError, "unknown compression"),
    ],
)
def test_bad_encode_arguments(impl, kwargs, error, match):
    kwargs = dict(kwargs)
    values = kwargs.pop("values")
    with pytest.raises(error, match=match):
        impl.records.encode_batch(values, **kwargs)


@pytest.mark.parametrize("codec,name", [(1, "gzip"), (2, "snappy"), (4, "zstd")])
def test_records_that_are_not_the_codecs_stream_are_corrupt(impl, codec, name):
    """A batch whose attributes name a codec its records are not compressed with."""
    raw = bytearray(impl.records.encode_batch([b"a"]))
    raw[22] = codec
    with pytest.raises(CorruptRecordError) as info:
        impl.records.decode_batches(reseal(raw))
    assert info.value.position == 0


def test_an_empty_batch_left_by_compaction_decodes(impl):
    raw = bytearray(impl.records.encode_batch([b"a"], base_offset=10))
    del raw[61:]
    struct.pack_into(">i", raw, 8, 49)
    struct.pack_into(">i", raw, 23, 4)  # lastOffsetDelta survives compaction
    struct.pack_into(">i", raw, 57, 0)
    [b] = impl.records.decode_batches(reseal(raw))
    assert (b.records, b.records_count, b.next_offset) == ([], 0, 15)


@pytest.mark.parametrize("compression", [None, "lz4"])
@pytest.mark.parametrize("values,expected", [
    ([b"\x00\x0c\x00"] * 300, b"\x00\x0c\x00"),
    ([b"same"], b"same"),
    ([b"", b""], b""),
    ([b"ab", b"ab", b"ac"], None),   # differs in the last byte of the last record
    ([b"ab", b"a"], None),           # a prefix is not the same value
    ([b"ab", None], None),
    ([None, None], None),            # null values are not a shared value
])
def test_same_value_is_the_value_every_record_carries(impl, compression, values, expected):
    raw = impl.records.encode_batch(values, keys=[b"k%d" % i for i in range(len(values))],
                                    compression=compression)
    [b] = impl.records.decode_batches(raw)
    assert b.same_value() == expected  # keys are not compared
    assert type(b.same_value()) is (bytes if expected is not None else type(None))


def test_same_value_of_a_batch_with_no_records_is_none(impl):
    raw = bytearray(impl.records.encode_batch([b"a"], base_offset=10))
    del raw[61:]
    struct.pack_into(">i", raw, 8, 49)
    struct.pack_into(">i", raw, 57, 0)
    [b] = impl.records.decode_batches(reseal(raw))
    assert b.same_value() is None


# ---------------------------------------------------------------- property-based matrix

byteish = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=8), byteish), max_size=3)
)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 30))
    values = draw(st.lists(byteish, min_size=n, max_size=n))
    kwargs = dict(
        base_offset=draw(st.integers(0, 2**40)),
        leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        compression=draw(st.sampled_from([None, "lz4"])),
        producer_id=draw(st.integers(-1, 2**63 - 1)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        transactional=draw(st.booleans()),
        control=draw(st.booleans()),
    )
    if draw(st.booleans()):
        kwargs["keys"] = draw(st.lists(byteish, min_size=n, max_size=n))
    if draw(st.booleans()):
        kwargs["headers"] = draw(st.lists(header_lists, min_size=n, max_size=n))
    if draw(st.booleans()):
        kwargs["timestamps"] = draw(st.lists(st.integers(-(2**40), 2**41), min_size=n, max_size=n))
    else:
        kwargs["timestamp"] = draw(st.integers(-1, 2**41))
    return values, kwargs


@settings(max_examples=150, deadline=None)
@given(batches())
def test_every_implementation_writes_the_same_bytes_and_reads_the_others(case):
    values, kwargs = case
    encoded = {name: kernels.records.encode_batch(values, **kwargs)
               for name, kernels in IMPLEMENTATIONS.items()}
    assert len(set(encoded.values())) == 1, "implementations disagree on bytes"
    raw = next(iter(encoded.values()))
    decoded = {name: snapshot(kernels.records.decode_batches(raw))
               for name, kernels in IMPLEMENTATIONS.items()}
    first = next(iter(decoded.values()))
    assert all(d == first for d in decoded.values())
    [(header, records)] = first
    assert [r[0] for r in records] == [kwargs["base_offset"] + i for i in range(len(values))]
    assert [r[3] for r in records] == values
    keys = kwargs.get("keys") or [None] * len(values)
    assert [r[2] for r in records] == keys
    headers = kwargs.get("headers") or [None] * len(values)
    assert [r[4] for r in records] == [tuple(h) if h else () for h in headers]
    if "timestamps" in kwargs:
        assert [r[1] for r in records] == kwargs["timestamps"]
    shared = values[0] if values[0] is not None and values.count(values[0]) == len(values) \
        else None
    for kernels in IMPLEMENTATIONS.values():
        assert kernels.records.validate_batches(raw) == 1
        assert kernels.records.decode_batches(raw)[0].same_value() == shared


def test_large_lz4_batches_decompress_in_pieces(impl):
    values = [b"a" * 1000] * 5000  # ~5 MB of records in a ~40 KB frame: several pieces
    raw = impl.records.encode_batch(values, compression="lz4")
    assert len(raw) < 100_000
    [b] = impl.records.decode_batches(raw)
    assert b.records_count == 5000 and b.records[-1].value == values[-1]


def test_decompression_beyond_the_limit_is_refused(impl, monkeypatch):
    from kraftcore import limits

    raw = impl.records.encode_batch([b"z" * 10_000], compression="lz4")
    monkeypatch.setattr(limits, "DECOMPRESSED_BATCH_BYTES_MAX", 4096)
    with pytest.raises(CorruptRecordError, match="more than 4096 bytes"):
        impl.records.decode_batches(raw)
