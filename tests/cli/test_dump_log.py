"""`kraftcore dump-log`: segments written by the log, snapshots, index files, the metadata
decoder, JSON output, and every kind of damage (exit 1 with the position)."""

import io
import json
import os
import struct

import pytest

from kraftcore.cli import dump_log
from kraftcore.cli.main import main
from kraftcore.log import Log
from kraftcore.metadata import records
from kraftcore.raft import control
from kraftcore.types import Uuid

pytestmark = pytest.mark.smoke

TOPIC_ID = Uuid(bytes(range(16)))
TS = 1_700_000_000_000


def _metadata_batch(base_offset, epoch=1):
    return records.encode_batch([
        records.TopicRecord(name="foo", topic_id=TOPIC_ID),
        records.PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=[1, 2, 3],
                                isr=[1, 2, 3], leader=1, leader_epoch=0, partition_epoch=0),
    ], base_offset=base_offset, leader_epoch=epoch, timestamp=TS)


def _leader_change(base_offset, epoch=1):
    voter = control.LeaderChangeMessage.Voter
    return control.encode_control_batch([control.LeaderChangeMessage(
        version=0, leader_id=1, voters=[voter(voter_id=1)], granting_voters=[voter(voter_id=1)])],
        base_offset=base_offset, leader_epoch=epoch, timestamp=TS)


def _run(*args):
    out, err = io.StringIO(), io.StringIO()
    files = [a for a in args if not a.startswith("--")]
    status = dump_log.run(files, "--metadata-decoder" in args, "--json" in args, out, err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def segment(tmp_path):
    """A segment written by kraftcore's log: a LeaderChange control batch, then two batches
    of metadata records."""
    log = Log.open(tmp_path / "log", fsync="never", index_interval_bytes=1)
    log.append(_leader_change(0), leader_epoch=1)
    log.append(_metadata_batch(0), leader_epoch=1)
    log.append(_metadata_batch(0), leader_epoch=1)
    log.close()
    return tmp_path / "log" / "00000000000000000000.log"


def test_batches_and_decoded_records(segment):
    status, out, _ = _run(str(segment), "--metadata-decoder")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {segment}"
    assert lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 3
    assert batches[1].startswith("baseOffset: 1 lastOffset: 2 count: 2 ")
    assert "partitionLeaderEpoch: 1 " in batches[1] and "isControl: false" in batches[1]
    assert "isControl: true" in batches[0] and " crc: " in batches[0]
    assert "LeaderChange {" in out and '"leaderId": 1' in out
    payloads = [json.loads(line.split("payload: ", 1)[1]) for line in lines if "payload:" in line]
    assert [p["type"] for p in payloads] == ["TOPIC_RECORD", "PARTITION_RECORD"] * 2
    assert payloads[1]["data"]["replicas"] == [1, 2, 3]
    assert payloads[0]["data"]["topicId"] == str(TOPIC_ID)
    # positions printed are the file positions of the batches
    positions = [int(line.split(" position: ")[1].split()[0]) for line in batches]
    first, second = len(_leader_change(0)), len(_metadata_batch(1))
    assert positions == [0, first, first + second]
    assert os.path.getsize(segment) == first + 2 * second


def test_without_the_decoder_only_batches_print(segment):
    status, out, _ = _run(str(segment))
    assert status == 0 and "payload" not in out and out.count("baseOffset:") == 3


def test_json_lines(segment):
    status, out, _ = _run(str(segment), "--json", "--metadata-decoder")
    assert status == 0
    objects = [json.loads(line) for line in out.splitlines()]
    batches = [o["batch"] for o in objects if "batch" in o]
    assert [b["baseOffset"] for b in batches] == [0, 1, 3]
    assert batches[0]["isControl"] and batches[0]["attributes"] == 0x20
    payloads = [o["payload"] for o in objects if "payload" in o]
    assert payloads[1]["type"] == "PARTITION_RECORD" and payloads[1]["data"]["isr"] == [1, 2, 3]


def test_index_files(segment):
    status, out, _ = _run(str(segment.with_suffix(".index")), str(segment.with_suffix(".timeindex")))
    assert status == 0
    first, second = len(_leader_change(0)), len(_metadata_batch(1))
    # Kafka's cadence: an entry per appended set after the first, keyed by its last offset
    assert f"offset: 2 position: {first}\noffset: 4 position: {first + second}\n" in out
    assert "timestamp: 1700000000000 offset: 0" in out


def test_snapshot_file(tmp_path):
    header = control.encode_control_batch(
        [control.SnapshotHeaderRecord(version=0, last_contained_log_timestamp=TS)],
        base_offset=0, leader_epoch=3, timestamp=TS)
    footer = control.encode_control_batch([control.SnapshotFooterRecord(version=0)],
                                          base_offset=3, leader_epoch=3, timestamp=TS)
    path = tmp_path / "00000000000000000004-0000000003.checkpoint"
    path.write_bytes(header + _metadata_batch(1, 3) + footer)
    status, out, _ = _run(str(path), "--metadata-decoder")
    assert status == 0
    assert "Snapshot end offset: 4, epoch: 3" in out
    assert "SnapshotHeader {" in out and "SnapshotFooter {" in out and "TOPIC_RECORD" in out


def test_truncated_tail_prints_what_it_read_and_exits_1(segment, tmp_path):
    data = segment.read_bytes()
    damaged = tmp_path / "00000000000000000000.log"
    damaged.write_bytes(data[:-10])
    status, out, _ = _run(str(damaged), "--metadata-decoder")
    assert status == 1
    assert out.count("baseOffset:") == 2
    last_start = len(data) - len(_metadata_batch(3))
    assert f"Corruption in {damaged} at byte {last_start}: Found" in out
    assert "cut short" in out


def test_zeros_after_the_last_batch_end_the_dump_with_a_line_not_damage(segment, tmp_path):
    """An active segment of a running node (or one killed) has zeros after its data when
    its log preallocates or prefills: they are not a batch, and not damage, but the dump
    says where they start and how many there are."""
    data = segment.read_bytes()
    zeroed = tmp_path / "00000000000000000000.log"
    zeroed.write_bytes(data + bytes(4096))
    status, out, _ = _run(str(zeroed), "--metadata-decoder")
    assert status == 0 and out.count("baseOffset:") == 3 and "Corruption" not in out
    assert (f"Zeros in {zeroed} at byte {len(data)}: 4096 zero bytes after the last batch"
            in out.splitlines()[-1])
    status, out, _ = _run(str(zeroed), "--json")
    last = json.loads(out.splitlines()[-1])
    assert status == 0 and "error" not in last
    assert (last["position"], last["zeroBytes"]) == (len(data), 4096)


@pytest.mark.parametrize("zeros, status, says", [
    (5, 1, "Corruption in {path} at byte {end}: Found 5 invalid bytes at the end (a "
           "truncated batch header)"),
    (10, 0, "Zeros in {path} at byte {end}: 10 zero bytes after the last batch"),
])
def test_a_short_zero_tail_is_never_passed_over_in_silence(segment, tmp_path, zeros, status,
                                                           says):
    """The next batch would start at offset 5, whose int64 has seven leading zero bytes: up
    to seven zeros may be a header cut short (torn, damage); more cannot be, and are zeros
    written ahead of the data. Either way the dump says so, with the count."""
    data = segment.read_bytes()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + bytes(zeros))
    got, out, _ = _run(str(path))
    assert got == status and out.count("baseOffset:") == 3
    assert out.splitlines()[-1].startswith(says.format(path=path, end=len(data)))


def test_a_renamed_copy_with_offsets_past_2_to_the_31_dumps_whole(tmp_path):
    """A sound segment copied to a name without its base offset (`x.log`) is read from its
    first batch's offset, as before the reader was shared: its offsets above 2**31 are no
    damage."""
    big = 3_000_000_000
    path = tmp_path / "x.log"
    path.write_bytes(_metadata_batch(big) + _leader_change(big + 2))
    status, out, _ = _run(str(path), "--metadata-decoder")
    assert status == 0 and "Corruption" not in out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("baseOffset:")] \
        == [str(big), str(big + 2)]


def test_offsets_that_go_back_are_damage_and_say_so(tmp_path):
    """Within a file offsets only have to increase (a dump reads files alone, gaps are
    allowed), but a batch that repeats offsets below the one before it is damage."""
    path = tmp_path / "x.log"
    first = _metadata_batch(5)
    path.write_bytes(first + _metadata_batch(3))
    status, out, _ = _run(str(path))
    assert status == 1 and out.count("baseOffset:") == 1
    assert out.splitlines()[-1] == (
        f"Corruption in {path} at byte {len(first)}: the offsets go back from 6 to 3: the "
        "batch at offset 3 repeats offsets below 7 (offsets must increase)")
    path.write_bytes(first + _metadata_batch(10))  # a gap: fine for a file read alone
    assert _run(str(path))[0] == 0


@pytest.mark.parametrize("name", ["00000000000000000000.log",
                                  "00000000000000000004-0000000001.checkpoint"])
def test_a_file_of_zeros_is_damage(tmp_path, name):
    zeros = tmp_path / name
    zeros.write_bytes(bytes(4096))
    status, out, _ = _run(str(zeros))
    assert status == 1
    assert f"Corruption in {zeros} at byte 0: the file holds 4096 zero bytes and no record batch" in out
    status, out, _ = _run(str(zeros), "--json")
    errors = [o for o in map(json.loads, out.splitlines()) if o.get("error")]
    assert status == 1 and len(errors) == 1 and errors[0]["position"] == 0


def test_an_empty_file_is_not_damage(tmp_path):
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    status, out, _ = _run(str(empty))
    assert status == 0 and "Corruption" not in out and "baseOffset" not in out


def test_zeros_then_other_bytes_after_the_last_batch_are_damage(segment, tmp_path):
    data = segment.read_bytes()
    damaged = tmp_path / "00000000000000000000.log"
    damaged.write_bytes(data + bytes(5000) + b"junk" + bytes(100))
    status, out, _ = _run(str(damaged))
    assert status == 1 and out.count("baseOffset:") == 3
    assert (f"Corruption in {damaged} at byte {len(data)}: 5000 zero bytes, then a non-zero "
            f"byte at {len(data) + 5000}") in out


def test_text_is_damage(tmp_path):
    text = tmp_path / "00000000000000000000.log"
    text.write_bytes(b"this is not a log segment\n" * 20)
    status, out, _ = _run(str(text))
    assert status == 1 and "Corruption in" in out


def test_bit_flip_names_the_batch(segment, tmp_path):
    data = bytearray(segment.read_bytes())
    second = len(_leader_change(0))
    data[second + 70] ^= 0x01  # inside the records of the second batch: the CRC catches it
    damaged = tmp_path / "00000000000000000000.log"
    damaged.write_bytes(bytes(data))
    status, out, _ = _run(str(damaged), "--json")
    assert status == 1
    objects = [json.loads(line) for line in out.splitlines()]
    errors = [o for o in objects if o.get("error")]
    assert len(errors) == 1 and errors[0]["position"] == second
    assert "crc" in errors[0]["reason"].lower()


def test_bad_metadata_value_in_a_valid_batch(tmp_path):
    from kraftcore import codec

    good = records.encode_values([records.NoOpRecord()])[0]
    # type 9999: a two-byte varint, a type no Kafka version has
    batch = codec.encode_batch([good, b"\x01\x63\x00\x00", good + b"\x00",
                                b"\x01\x8f\x4e\x00\x00", good], base_offset=0,
                               leader_epoch=1, timestamp=TS)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    status, out, _ = _run(str(path), "--metadata-decoder")
    assert status == 1
    assert out.count("NO_OP_RECORD") == 2  # the records around the bad ones still print
    assert "Error at 1, skipping. unknown metadata record type 99" in out
    assert "Error at 2, skipping. 1 unexpected bytes" in out
    assert "Error at 3, skipping. unknown metadata record type 9999" in out
    status, out, _ = _run(str(path), "--metadata-decoder", "--json")
    errors = {o["offset"]: o["reason"] for o in map(json.loads, out.splitlines())
              if o.get("error")}
    assert status == 1 and errors[3] == "unknown metadata record type 9999"


def test_garbage_header_and_missing_file(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(struct.pack(">qi", 0, 5) + b"\x00" * 20)
    status, out, _ = _run(str(path))
    assert status == 1 and "batch length 5 is below the minimum 49" in out
    status, _, err = _run(str(tmp_path / "missing.log"))
    assert status == 2 and "cannot read" in err


def test_cli_entry(segment, capsys):
    assert main(["dump-log", str(segment), "--cluster-metadata-decoder"]) == 0
    assert "PARTITION_RECORD" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["dump-log"])


def test_unknown_control_type_shows_its_id(tmp_path):
    from kraftcore import codec

    batch = codec.encode_batch([b"\x00\x00"], keys=[struct.pack(">hh", 0, 42)], control=True,
                               base_offset=0, leader_epoch=1, timestamp=TS)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    status, out, _ = _run(str(path), "--metadata-decoder")
    assert status == 0 and "controlType: UNKNOWN(42)" in out
