"""Idempotent producers' state (`kraftcore.log.producer_state`): duplicates recognised with
their first offsets, sequence gaps and fenced epochs refused, Kafka's snapshot format
round-tripped, and a damaged snapshot ignored rather than trusted."""

import os

import pytest

from kraftcore import codec
from kraftcore.log.producer_state import (BATCHES_KEPT, InvalidProducerEpochError,
                                          OutOfOrderSequenceError, ProducerState,
                                          batch_headers, read_snapshot, write_snapshot)


def batch(base_offset, count, pid=7, epoch=0, seq=0):
    return bytes(codec.encode_batch([b"v"] * count, timestamp=1000, base_offset=base_offset,
                                    producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def test_headers_name_each_batch():
    data = batch(0, 3) + batch(3, 2, seq=3)
    assert [(h[0], h[1], h[2], h[3], h[4]) for h in batch_headers(data)] == [
        (0, 2, 7, 0, 0), (3, 4, 7, 0, 3)]


def test_a_retried_batch_is_a_duplicate_with_its_first_offset():
    state = ProducerState()
    state.update(batch_headers(batch(10, 3)))
    assert state.check(7, 0, 0, 3) == 10
    assert state.check(7, 0, 3, 2) is None  # the next one, in order


def test_the_last_five_batches_are_remembered():
    state = ProducerState()
    offset = 0
    for i in range(BATCHES_KEPT + 1):
        state.update(batch_headers(batch(offset, 1, seq=i)))
        offset += 1
    assert state.check(7, 0, 1, 1) == 1
    with pytest.raises(OutOfOrderSequenceError):
        state.check(7, 0, 0, 1)  # forgotten: now simply out of order


@pytest.mark.parametrize("epoch,seq,error", [
    (0, 5, OutOfOrderSequenceError),  # a gap after sequence 2
    (1, 3, OutOfOrderSequenceError),  # a new epoch must start at 0
    (1, 0, None),  # a bumped epoch starting at 0
    (0, 3, None),  # the next in order
])
def test_sequence_rules(epoch, seq, error):
    state = ProducerState()
    state.update(batch_headers(batch(0, 3)))
    if error is None:
        assert state.check(7, epoch, seq, 1) is None
    else:
        with pytest.raises(error):
            state.check(7, epoch, seq, 1)


def test_an_older_epoch_is_fenced_and_an_unknown_producer_accepted():
    state = ProducerState()
    state.update(batch_headers(batch(0, 1, epoch=2)))
    with pytest.raises(InvalidProducerEpochError):
        state.check(7, 1, 1, 1)
    assert state.check(99, 0, 42, 1) is None  # unknown (its state expired): taken


def test_snapshots_round_trip_and_a_damaged_one_is_ignored(tmp_path):
    state = ProducerState()
    state.update(batch_headers(batch(0, 3) + batch(3, 2, pid=8, epoch=4, seq=10)))
    write_snapshot(str(tmp_path), 5, state)
    offset, loaded = read_snapshot(str(tmp_path), 5)
    assert offset == 5 and len(loaded) == 2
    assert loaded.check(7, 0, 0, 3) == 0  # the last batch of each producer survives
    assert loaded.check(8, 4, 10, 2) == 3
    with pytest.raises(OutOfOrderSequenceError):
        loaded.check(8, 4, 13, 1)
    (name,) = os.listdir(tmp_path)
    assert name == "00000000000000000005.snapshot"
    path = tmp_path / name
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert read_snapshot(str(tmp_path), 5)[1].producers == {}
    # a snapshot above the log end (the log was truncated below it) is deleted
    write_snapshot(str(tmp_path), 9, state)
    assert read_snapshot(str(tmp_path), 6)[0] == 0
    assert "00000000000000000009.snapshot" not in os.listdir(tmp_path)
