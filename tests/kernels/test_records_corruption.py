"""Corrupt input: every truncation point, every single-bit flip, crafted structural damage
with a valid CRC, and arbitrary bytes. Decoders must reject (CorruptRecordError), never
accept damage silently, never crash, and both implementations must decide alike."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError
from tests.conftest import IMPLEMENTATIONS
from tests.kernels.records_util import HEADER_FIELDS, reseal, snapshot, with_records

TS = 1_700_000_000_000
PY = IMPLEMENTATIONS["py"]  # the reference kernels build the inputs


def _sample(records, compression=None):
    return records.encode_batch(
        [b"value-%d" % i for i in range(5)],
        keys=[b"k%d" % i for i in range(5)],
        headers=[[("h", b"x")], None, [("ü", None)], None, None],
        timestamps=[TS + i for i in range(5)],
        base_offset=100,
        leader_epoch=3,
        compression=compression,
    )


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_every_truncation_point_is_rejected(impl, compression):
    raw = _sample(impl.records, compression)
    for cut in range(1, len(raw)):
        with pytest.raises(CorruptRecordError) as info:
            impl.records.decode_batches(raw[:cut])
        assert info.value.position == 0, cut
        with pytest.raises(CorruptRecordError):
            impl.records.validate_batches(raw[:cut])


def test_a_truncated_second_batch_reports_its_position(impl):
    first = _sample(impl.records)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        impl.records.decode_batches(first + first[:40])
    assert info.value.position == len(first)


# baseOffset (bytes 0-7) and partitionLeaderEpoch (12-15) are outside the CRC by Kafka's
# design, so a broker can restamp them; a flip there yields a different but well-formed
# batch unless the new value is impossible. Every other byte is covered by the CRC or is
# the batch length, magic or CRC itself.
UNCOVERED = set(range(0, 8)) | set(range(12, 16))


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_every_single_bit_flip_is_rejected_or_confined_to_uncovered_fields(impl, compression):
    raw = _sample(impl.records, compression)
    original = snapshot(impl.records.decode_batches(raw))[0]
    for byte in range(len(raw)):
        for bit in range(8):
            damaged = bytearray(raw)
            damaged[byte] ^= 1 << bit
            try:
                decoded = impl.records.decode_batches(bytes(damaged))
            except CorruptRecordError:
                continue
            assert byte in UNCOVERED, f"flip of byte {byte} bit {bit} was accepted"
            [(header, records)] = snapshot(decoded)
            changed = {HEADER_FIELDS[i] for i, (a, b) in enumerate(zip(header, original[0])) if a != b}
            if byte < 8:  # only the base offset (and so every record offset) moved
                assert changed == {"base_offset", "last_offset", "next_offset"}
                assert [r[1:] for r in records] == [r[1:] for r in original[1]]
            else:  # only the leader epoch moved
                assert changed == {"partition_leader_epoch"}
                assert records == original[1]


def _records(*fields):
    return b"".join(fields)


def _zz(v):
    return PY.varint.encode_varint(v)


def _record(body):
    return _zz(len(body)) + body


GOOD_BODY = b"\x00" + b"\x00" + b"\x00" + b"\x01" + _zz(1) + b"v" + b"\x00"  # key null, value "v"

STRUCTURAL = {
    "record length beyond the batch": _zz(100) + GOOD_BODY[:-1],
    "negative record length": _zz(-3) + GOOD_BODY,
    "record shorter than its fields": _zz(len(GOOD_BODY) - 1) + GOOD_BODY,
    "record longer than its fields": _zz(len(GOOD_BODY) + 1) + GOOD_BODY + b"\x00",
    "key length below -1": _record(b"\x00\x00\x00" + _zz(-2) + b"\x01\x00"),
    "value overruns the record": _record(b"\x00\x00\x00\x01" + _zz(9) + b"v\x00"),
    "negative headers count": _record(b"\x00\x00\x00\x01\x01" + _zz(-1)),
    "header key not UTF-8": _record(b"\x00\x00\x00\x01\x01" + _zz(1) + _zz(1) + b"\xff" + b"\x01"),
    "header key length negative": _record(b"\x00\x00\x00\x01\x01" + _zz(1) + _zz(-1) + b"\x01"),
    "overlong varint": _record(b"\x00" + b"\xff" * 11 + b"\x01\x01\x01\x00"),
    "bytes after the last record": _record(GOOD_BODY) + b"\x00",
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_structural_damage_under_a_valid_crc_is_rejected(impl, name):
    template = impl.records.encode_batch([b"v"])
    damaged = with_records(template, STRUCTURAL[name], count=1, last_offset_delta=0)
    with pytest.raises(CorruptRecordError):
        impl.records.decode_batches(damaged)
    with pytest.raises(CorruptRecordError):
        impl.records.validate_batches(damaged)


def test_header_field_damage_under_a_valid_crc_is_rejected(impl):
    good = impl.records.encode_batch([b"a", b"b"], base_offset=5)
    cases = {
        "magic 1": (16, ">b", 1),
        "batch length below the header": (8, ">i", 20),
        "negative records count": (57, ">i", -1),
        "count larger than the records": (57, ">i", 3),
        "last offset delta below the count": (23, ">i", 0),
        "negative base offset": (0, ">q", -5),
        "leader epoch below -1": (12, ">i", -2),
        "invalid codec id": (21, ">h", 7),
    }
    for name, (offset, fmt, value) in cases.items():
        damaged = bytearray(good)
        struct.pack_into(fmt, damaged, offset, value)
        with pytest.raises(CorruptRecordError):
            impl.records.decode_batches(reseal(damaged))
            pytest.fail(name)


def test_offset_deltas_out_of_order_are_rejected(impl):
    body0 = b"\x00\x00" + _zz(1) + b"\x01\x01\x00"  # offset delta 1
    body1 = b"\x00\x00" + _zz(0) + b"\x01\x01\x00"  # then 0
    damaged = with_records(impl.records.encode_batch([b"a", b"b"]), _record(body0) + _record(body1))
    with pytest.raises(CorruptRecordError, match="offset delta"):
        impl.records.decode_batches(damaged)


def test_a_lying_records_count_allocates_nothing_for_it(impl):
    damaged = bytearray(impl.records.encode_batch([b"a"]))
    struct.pack_into(">i", damaged, 57, 2**31 - 1)
    struct.pack_into(">i", damaged, 23, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        impl.records.decode_batches(reseal(damaged))


def test_a_damaged_lz4_frame_is_corrupt_not_a_crash(impl):
    raw = bytearray(_sample(impl.records, "lz4"))
    raw[70] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        impl.records.decode_batches(reseal(raw))
    truncated = with_records(bytes(raw[:61]), bytes(raw[61:-6]))
    with pytest.raises(CorruptRecordError):
        impl.records.decode_batches(truncated)


def _outcome(records, raw):
    try:
        return snapshot(records.decode_batches(raw))
    except CorruptRecordError:
        return "corrupt"
    except UnsupportedCompressionError:
        return "unsupported"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_and_implementations_agree(raw):
    outcomes = [_outcome(kernels.records, raw) for kernels in IMPLEMENTATIONS.values()]
    assert all(o == outcomes[0] for o in outcomes)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_records_under_a_resealed_crc_decode_alike(data):
    """Damage inside the record section with the CRC made valid again: only the structural
    checks stand between the bytes and the caller, and both implementations must agree."""
    reference = PY.records

    raw = bytearray(_sample(reference, data.draw(st.sampled_from([None, "lz4"]))))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    sealed = reseal(raw)
    outcomes = [_outcome(kernels.records, sealed) for kernels in IMPLEMENTATIONS.values()]
    assert all(o == outcomes[0] for o in outcomes)


def _verdict(fn, raw):
    """What a validating call says about `raw`: "ok", or the error's type, reason and
    position."""
    try:
        fn(raw)
    except (CorruptRecordError, UnsupportedCompressionError) as exc:
        return type(exc).__name__, str(exc), exc.position
    return "ok"


def _verdicts(raw):
    """validate_batches and decode_batches of every implementation on `raw`. Within an
    implementation both must say the same, to the message: the native validate runs a C
    loop that builds nothing and, when that loop refuses a batch, the record walk decode
    uses to say why. Across implementations the verdict must agree (the wording and, for
    some damage, the position reported differ). Returns {implementation: verdict}."""
    out = {}
    for name, kernels in IMPLEMENTATIONS.items():
        validated = _verdict(kernels.records.validate_batches, raw)
        assert validated == _verdict(kernels.records.decode_batches, raw), name
        out[name] = validated if validated == "ok" else validated[0]
    return out


def test_every_byte_replacement_in_the_records_is_judged_alike_by_validate_and_decode():
    """Each byte of the record section (records with keys, headers, a non-ASCII header key)
    replaced by values that make varints longer, shorter, negative or overlong, under a
    resealed CRC: validate and decode, native and pure, reach the same verdict with the same
    message and position."""
    reference = PY.records

    raw = bytearray(_sample(reference))
    for pos in range(61, len(raw)):
        original = raw[pos]
        for value in {0x00, 0x01, 0x02, 0x7F, 0x80, 0xC3, 0xFF, original ^ 0x01, original ^ 0x80}:
            raw[pos] = value
            sealed = reseal(raw)
            verdicts = _verdicts(sealed)
            assert len(set(verdicts.values())) == 1, (pos, value, verdicts)
        raw[pos] = original


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_records_under_a_resealed_crc_validate_like_they_decode(data):
    reference = PY.records

    count = data.draw(st.integers(1, 40))
    raw = bytearray(reference.encode_batch(
        [b"v" * data.draw(st.integers(0, 300)) for _ in range(count)],
        headers=[[("h", b"x"), ("é", None)] if i % 3 == 0 else None for i in range(count)],
        timestamps=[TS + i for i in range(count)]))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    sealed = reseal(raw)
    verdicts = _verdicts(sealed)
    assert len(set(verdicts.values())) == 1, verdicts
