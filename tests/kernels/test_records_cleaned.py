"""`encode_batch` as the log cleaner calls it: records that keep offsets with gaps between
them (`offset_deltas`), the original batch's last offset delta (`last_offset_delta`), and
KIP-534's delete horizon (`delete_horizon_ms`: attribute bit 6, the base timestamp, the
records' timestamp deltas taken from it). Both kernels agree byte for byte, and what they
write decodes to the offsets and timestamps given."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore.layout import DELETE_HORIZON_MASK
from tests.conftest import IMPLEMENTATIONS

TS = 1_700_000_000_000


def test_records_keep_the_offsets_given_and_the_batch_its_last_offset(impl):
    raw = impl.records.encode_batch(
        [b"a", None, b"c"], keys=[b"k1", b"k2", b"k3"], timestamps=[TS, TS + 7, TS - 3],
        base_offset=100, leader_epoch=4, producer_id=9, producer_epoch=1, base_sequence=50,
        offset_deltas=[1, 4, 6], last_offset_delta=9)
    [batch] = impl.records.decode_batches(raw)
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 109, 3)
    assert (batch.base_sequence, batch.producer_id, batch.partition_leader_epoch) == (50, 9, 4)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == [
        (101, TS, b"k1", b"a"), (104, TS + 7, b"k2", None), (106, TS - 3, b"k3", b"c")]
    assert not batch.has_delete_horizon and batch.base_timestamp == TS


@pytest.mark.parametrize("timestamps", [None, [TS, TS + 5]])
def test_a_delete_horizon_is_the_base_timestamp_and_record_times_survive(impl, timestamps):
    horizon = TS + 86_400_000
    raw = impl.records.encode_batch([b"v", None], keys=[b"a", b"b"], timestamps=timestamps,
                                    timestamp=TS, delete_horizon_ms=horizon)
    [batch] = impl.records.decode_batches(raw)
    assert batch.has_delete_horizon and batch.attributes & DELETE_HORIZON_MASK
    assert batch.base_timestamp == horizon
    assert [r.timestamp for r in batch.records] == (timestamps or [TS, TS])
    assert batch.max_timestamp == max(timestamps or [TS])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(offset_deltas=[0]), ValueError, "offset_deltas has 1 elements for 2"),
    (dict(offset_deltas=[3, 3]), ValueError, "must increase"),
    (dict(offset_deltas=[-1, 2]), ValueError, "offset_deltas\\[0\\]"),
    (dict(offset_deltas=[0, 2**31]), ValueError, "offset_deltas\\[1\\]"),
    (dict(offset_deltas=[0, True]), TypeError, "offset_deltas\\[1\\]"),
    (dict(offset_deltas=[0, 5], last_offset_delta=4), ValueError, "last_offset_delta"),
    (dict(last_offset_delta=0), ValueError, "last_offset_delta"),
    (dict(delete_horizon_ms=-1), ValueError, "delete_horizon_ms"),
    (dict(delete_horizon_ms=2**62, timestamps=[-(2**62) - 10, 0]), ValueError,
     "too far from delete_horizon_ms"),
])
def test_bad_cleaner_arguments_are_refused_alike(impl, kwargs, error, match):
    with pytest.raises(error, match=match):
        impl.records.encode_batch([b"a", b"b"], **kwargs)


_records = st.lists(st.tuples(st.binary(max_size=8) | st.none(), st.binary(max_size=8) | st.none(),
                              st.integers(0, 2**40)), min_size=1, max_size=12)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="needs both kernels")
@settings(max_examples=150, deadline=None)
@given(records=_records, gaps=st.lists(st.integers(1, 1000), min_size=12, max_size=12),
       extra=st.integers(0, 50), horizon=st.none() | st.integers(0, 2**41),
       codec=st.sampled_from([None, "gzip", "lz4", "zstd", "snappy"]))
def test_both_kernels_write_the_same_bytes(records, gaps, extra, horizon, codec):
    deltas, at = [], -1
    for gap in gaps[:len(records)]:
        at += gap
        deltas.append(at)
    kwargs = dict(keys=[r[0] for r in records], timestamps=[r[2] for r in records],
                  base_offset=7, offset_deltas=deltas, last_offset_delta=deltas[-1] + extra,
                  delete_horizon_ms=horizon, compression=codec)
    out = {name: kernels.records.encode_batch([r[1] for r in records], **kwargs)
           for name, kernels in IMPLEMENTATIONS.items()}
    assert out["c"] == out["py"]
    [batch] = IMPLEMENTATIONS["c"].records.decode_batches(out["py"])
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == [
        (7 + d, r[2], r[0], r[1]) for d, r in zip(deltas, records)]
    assert batch.last_offset == 7 + deltas[-1] + extra
