import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftcore.errors import CorruptRecordError

pytestmark = pytest.mark.smoke

# kafka-facts §11.2
UNSIGNED = [
    (0, "00"), (1, "01"), (63, "3f"), (64, "40"), (8191, "ff3f"), (8192, "8040"),
    (1048575, "ffff3f"), (1048576, "808040"), (2**31 - 1, "ffffffff07"),
    (-(2**31), "8080808008"), (-1, "ffffffff0f"), (-64, "c0ffffff0f"),
]
SIGNED = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
    (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"),
    (134217728, "8080808001"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
]


@pytest.mark.parametrize("value,hexed", UNSIGNED)
def test_unsigned_varint_vectors(impl, value, hexed):
    assert impl.varint.encode_uvarint(value).hex() == hexed
    assert impl.varint.decode_uvarint(bytes.fromhex(hexed)) == (value & 0xFFFFFFFF, len(hexed) // 2)


@pytest.mark.parametrize("value,hexed", SIGNED)
def test_signed_varint_and_varlong_vectors(impl, value, hexed):
    raw = bytes.fromhex(hexed)
    assert impl.varint.encode_varint(value).hex() == hexed
    assert impl.varint.encode_varlong(value).hex() == hexed
    assert impl.varint.decode_varint(raw) == (value, len(raw))
    assert impl.varint.decode_varlong(raw) == (value, len(raw))


def test_varlong_extremes(impl):
    v = impl.varint
    assert v.encode_varlong(2**63 - 1).hex() == "feffffffffffffffff01"
    assert v.encode_varlong(-(2**63)).hex() == "ffffffffffffffffff01"
    assert v.decode_varlong(bytes.fromhex("ffffffffffffffffff01")) == (-(2**63), 10)
    assert v.encode_uvarlong(2**64 - 1).hex() == "ffffffffffffffffff01"


def test_decode_at_a_position(impl):
    assert impl.varint.decode_varint(b"\xaa\xbb\xd8\x04\x99", 2) == (300, 4)


@pytest.mark.parametrize(
    "func,raw",
    [
        ("decode_uvarint", b""),
        ("decode_uvarint", b"\x80"),
        ("decode_varint", b"\xff\xff"),
        ("decode_varlong", b"\x80" * 9),
    ],
)
def test_truncated_varints_are_corrupt(impl, func, raw):
    with pytest.raises(CorruptRecordError, match="truncated"):
        getattr(impl.varint, func)(raw)


@pytest.mark.parametrize(
    "func,raw",
    [
        ("decode_uvarint", b"\xff\xff\xff\xff\x1f"),  # bits beyond 32
        ("decode_uvarint", b"\x80\x80\x80\x80\x80\x01"),  # continuation on the 5th byte
        ("decode_varint", b"\xff\xff\xff\xff\xff\x00"),
        ("decode_varlong", b"\xff" * 9 + b"\x02"),  # bits beyond 64
        ("decode_uvarlong", b"\x80" * 10 + b"\x00"),
    ],
)
def test_overlong_varints_are_corrupt(impl, func, raw):
    with pytest.raises(CorruptRecordError):
        getattr(impl.varint, func)(raw)


@pytest.mark.parametrize(
    "func,value",
    [
        ("encode_varint", 2**31),
        ("encode_varint", -(2**31) - 1),
        ("encode_varlong", 2**63),
        ("encode_uvarint", 2**32),
        ("encode_uvarlong", -(2**63) - 1),
    ],
)
def test_encoding_out_of_range_is_a_value_error(impl, func, value):
    with pytest.raises(ValueError, match="range"):
        getattr(impl.varint, func)(value)


@pytest.mark.parametrize("width,kind", [(32, "varint"), (64, "varlong")])
@given(data=st.data())
def test_zigzag_round_trip_and_implementations_agree(width, kind, data):
    from tests.conftest import IMPLEMENTATIONS

    value = data.draw(st.integers(-(2 ** (width - 1)), 2 ** (width - 1) - 1))
    encoded = {getattr(kernels.varint, "encode_" + kind)(value)
               for kernels in IMPLEMENTATIONS.values()}
    assert len(encoded) == 1
    [raw] = encoded
    for kernels in IMPLEMENTATIONS.values():
        assert getattr(kernels.varint, "decode_" + kind)(raw) == (value, len(raw))


@given(st.binary(max_size=12), st.integers(0, 12))
def test_arbitrary_bytes_decode_the_same_or_fail_the_same(raw, pos):
    from tests.conftest import IMPLEMENTATIONS

    for func in ("decode_uvarint", "decode_varint", "decode_uvarlong", "decode_varlong"):
        outcomes = set()
        for kernels in IMPLEMENTATIONS.values():
            try:
                outcomes.add(getattr(kernels.varint, func)(raw, pos))
            except CorruptRecordError:
                outcomes.add("corrupt")
        assert len(outcomes) == 1, (func, raw, outcomes)
