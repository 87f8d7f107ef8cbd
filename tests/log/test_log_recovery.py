"""Recovery of a log whose tail was torn or damaged: a cut at every byte of the last batch
recovers to the batch before it; bit flips in the tail are detected and cut; nothing after
the cut is visible, and the log accepts appends again."""

import os
import random
import shutil

import pytest

from kraftcore import codec
from kraftcore.errors import LogGapError
from kraftcore.log import Log
from tests.log.test_log import read_all, values

pytestmark = pytest.mark.smoke


def _written_log(path, batches=6):
    log = Log.open(path, segment_bytes=4000)
    for epoch in range(batches):
        log.append(values(3, tag=f"e{epoch}-", size=150), leader_epoch=epoch)
    contents = read_all(log)
    log.close()
    active = max(n for n in os.listdir(path) if n.endswith(".log"))
    data = open(os.path.join(path, active), "rb").read()
    return contents, active, data


def _listing(path):
    """{name: bytes} of every file in the directory."""
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def _last_batch_start(data):
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
    return last


def _damaged_copy(src, dst, active, content, unclean=True):
    shutil.copytree(src, dst)
    with open(os.path.join(dst, active), "wb") as f:
        f.write(content)
    if unclean:
        os.unlink(os.path.join(dst, ".kafka_cleanshutdown"))


def test_a_cut_at_every_byte_of_the_last_batch_recovers_the_batch_before(tmp_path):
    src = tmp_path / "src-0"
    contents, active, data = _written_log(src)
    start = _last_batch_start(data)
    expected = contents[:-3]  # the last batch held 3 records
    for cut in range(start, len(data)):
        dst = tmp_path / f"cut{cut}-0"
        _damaged_copy(src, dst, active, data[:cut])
        with Log.open(dst) as log:
            assert log.log_end_offset == len(expected), cut
            assert read_all(log) == expected, cut
            assert log.recovery.truncated_bytes == cut - start
            assert log.epoch_entries()[-1] == (4, 12)
            assert log.append(values(1), leader_epoch=9) == len(expected)
        assert os.path.getsize(dst / active) > start
        shutil.rmtree(dst)


def test_bit_flips_in_the_tail_are_detected(tmp_path):
    src = tmp_path / "src-0"
    contents, active, data = _written_log(src)
    start = _last_batch_start(data)
    rng = random.Random(7)
    positions = list(range(start, start + 61)) + rng.sample(range(start + 61, len(data)), 40)
    for position in positions:
        bit = rng.randrange(8)
        damaged = bytearray(data)
        damaged[position] ^= 1 << bit
        dst = tmp_path / f"flip{position}-0"
        _damaged_copy(src, dst, active, bytes(damaged))
        with Log.open(dst) as log:
            if 12 + start <= position < 16 + start and log.log_end_offset == len(contents):
                # the leader epoch lies outside the CRC: a flip that raises it is a valid
                # later epoch, the one change a torn-write check cannot see
                assert read_all(log) == contents
                assert log.read(15).batches()[0].partition_leader_epoch > 5
            else:
                assert log.log_end_offset == len(contents) - 3, position
                assert read_all(log) == contents[:-3]
                assert log.recovery.first_invalid, position
        shutil.rmtree(dst)


def test_damage_in_an_earlier_segment_refuses_the_open_and_deletes_nothing(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path, segment_bytes=1500) as log:
        for epoch in range(8):
            log.append(values(3, size=150), leader_epoch=epoch)
        bases = log.segment_base_offsets
        contents = read_all(log)
    assert len(bases) >= 4
    victim = path / f"{bases[1]:020d}.log"
    raw = bytearray(victim.read_bytes())
    raw[-5] ^= 0xFF
    victim.write_bytes(bytes(raw))
    os.unlink(path / ".kafka_cleanshutdown")
    (path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
    before = _listing(path)
    with pytest.raises(LogGapError, match="set_aside_past_gap=True") as refused:
        Log.open(path)
    assert f"{bases[1]:020d}.log is damaged" in str(refused.value)
    assert _listing(path) == before  # a refusal changes nothing on disk
    with Log.open(path, set_aside_past_gap=True) as log:
        # the log ends inside the damaged segment; the batches past the damage, and the
        # segments after it, are kept aside whole
        assert log.segment_base_offsets == bases[:2]
        assert log.log_end_offset < bases[2]
        assert read_all(log) == contents[: log.log_end_offset]
        assert log.recovery.deleted_segments == []
        assert log.recovery.gap and log.recovery.first_invalid
        assert len(log.recovery.set_aside) == 1 + len(bases[2:])
    assert (path / f"{bases[1]:020d}.log.stray").read_bytes() == bytes(raw)
    for base in bases[2:]:
        assert (path / f"{base:020d}.log.stray").read_bytes() == before[f"{base:020d}.log"]
        assert not (path / f"{base:020d}.log").exists()


def test_preallocated_segments_recover_to_their_data(tmp_path):
    path = tmp_path / "p-0"
    log = Log.open(path, preallocate=True, segment_bytes=1 << 20)
    log.append(values(5))
    contents = read_all(log)
    active = path / "00000000000000000000.log"
    assert os.path.getsize(active) == 1 << 20
    # simulate a crash: drop the log without closing it
    log._release()
    with Log.open(path, preallocate=True, segment_bytes=1 << 20) as again:
        assert read_all(again) == contents and again.log_end_offset == 5
        assert again.append(values(1)) == 5
    assert os.path.getsize(active) < 1 << 20  # trimmed to its data on close


def _file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_prefilled_segments_keep_zeros_ahead_of_their_data_and_recover_to_it(tmp_path):
    path = tmp_path / "z-0"
    settings = dict(prefill_bytes=4096, segment_bytes=30_000)
    log = Log.open(path, **settings)
    active = path / "00000000000000000000.log"
    log.append(values(5))  # the leader's path (stamp and write)
    first = log.size_bytes
    assert os.path.getsize(active) == first + 4096
    log.append_as_follower(codec.encode_batch(values(3, tag="f"), base_offset=5,
                                              leader_epoch=1))  # the general path
    assert os.path.getsize(active) == first + 4096  # inside the zeros: the file keeps its size
    for _ in range(8):
        log.append(values(10))  # past the zeros, then up to segment_bytes at most
        data = _file_bytes(active)
        assert len(data) >= log.size_bytes and not any(data[log.size_bytes:])
        assert len(data) <= 30_000 or log.segment_base_offsets != [0]
    contents = read_all(log)
    log._release()  # a crash: the active segment still has its zeros
    with Log.open(path, **settings) as again:
        assert read_all(again) == contents
        # expected zeros are not a torn write
        assert again.recovery.truncated_bytes == 0 and again.recovery.first_invalid is None
        assert again.recovery.scanned_segments >= 1
        again.append(values(1))
        contents = read_all(again)
    for name in os.listdir(path):  # every segment is trimmed to its data on close
        if name.endswith(".log"):
            data = _file_bytes(path / name)
            pos = 0
            while pos < len(data):  # batch after batch, no zeros after the last
                length = int.from_bytes(data[pos + 8:pos + 12], "big")
                assert length > 0
                pos += 12 + length
            assert pos == len(data)
    with Log.open(path) as plain:  # read back without prefilling too
        assert read_all(plain) == contents


def test_a_torn_write_over_prefilled_zeros_is_still_reported(tmp_path):
    path = tmp_path / "t-0"
    log = Log.open(path, prefill_bytes=4096)
    log.append(values(3))
    log.append(values(2))
    good = _file_bytes(path / "00000000000000000000.log")
    contents = read_all(log)
    log._release()
    start = _last_batch_start(good[:log.size_bytes])
    torn = bytearray(good)
    torn[start + 30:log.size_bytes] = bytes(log.size_bytes - start - 30)  # the rest unwritten
    with open(path / "00000000000000000000.log", "wb") as f:
        f.write(torn)
    with Log.open(path, prefill_bytes=4096) as again:
        assert read_all(again) == contents[:3]
        assert again.recovery.truncated_bytes == len(good) - start
        assert again.recovery.first_invalid is not None
