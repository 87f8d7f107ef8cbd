"""`kraftcore.limits`: each relation between limits that the code relies on is refused when
broken, by `check` and when the module loads, and the room a Raft response needs in its frame
besides its records is what `RAFT_RESPONSE_FIELDS_BYTES_MAX` says."""

import pathlib

import pytest

from kraftcore import limits
from kraftcore.protocol import framing
from kraftcore.raft import rpc
from kraftcore.types import SnapshotId

MiB = 1024 * 1024
LIMITS = {name: value for name, value in vars(limits).items() if name.isupper()}


def _check(**changes):
    limits.check({**LIMITS, **changes})


@pytest.mark.parametrize("changes, relation", [
    ({"RECORD_BATCH_BYTES_MAX": 2**31}, "RECORD_BATCH_BYTES_MAX <= 2**31 - 1"),
    ({"FRAME_BYTES_MAX": 2**31}, "FRAME_BYTES_MAX <= 2**31 - 1"),
    ({"RAFT_BATCH_BYTES_MAX": 60}, "61 <= RAFT_BATCH_BYTES_MAX <= RECORD_BATCH_BYTES_MAX"),
    ({"RECORD_BATCH_BYTES_MAX": 4 * MiB},
     "61 <= RAFT_BATCH_BYTES_MAX <= RECORD_BATCH_BYTES_MAX"),
    ({"RAFT_BATCH_BYTES_MAX": 16 * MiB}, "RAFT_BATCH_BYTES_MAX <= RAFT_FETCH_BYTES_MAX"),
    ({"RAFT_FETCH_BYTES_MAX": 100 * MiB},
     "RAFT_FETCH_BYTES_MAX + RAFT_RESPONSE_FIELDS_BYTES_MAX <= FRAME_BYTES_MAX"),
    ({"FRAME_BYTES_MAX": 8 * MiB},
     "RAFT_FETCH_BYTES_MAX + RAFT_RESPONSE_FIELDS_BYTES_MAX <= FRAME_BYTES_MAX"),
    ({"RAFT_EPOCH_MAX": 2**31 - 1}, "RAFT_EPOCH_MAX < 2**31 - 1"),
    ({"RAFT_EPOCH_ACCEPTED_MAX": 2**31 - 2 + 1}, "RAFT_EPOCH_ACCEPTED_MAX <= RAFT_EPOCH_MAX"),
    ({"RAFT_EPOCH_REQUEST_STEP_MAX": 2**16 + 1},
     "RAFT_EPOCH_REQUEST_STEP_MAX <= RAFT_EPOCH_STEP_MAX"),
    ({"SNAPSHOT_FIRST_BATCH_BYTES_MAX": 60}, "SNAPSHOT_FIRST_BATCH_BYTES_MAX >= 61"),
    ({"NET_SERVER_READ_BYTES_MAX": 8 * 1024},
     "NET_SERVER_READ_BYTES_MAX >= NET_CONNECTION_GUARANTEED_BYTES_MIN"),
    ({"NET_IDLE_SWEEP_INTERVAL_MS_MAX": 5},
     "NET_IDLE_SWEEP_INTERVAL_MS_MIN <= NET_IDLE_SWEEP_INTERVAL_MS_MAX"),
    ({"NET_IDLE_SWEEP_INTERVAL_MS_MIN": 2000},
     "NET_IDLE_SWEEP_INTERVAL_MS_MIN <= NET_PARTIAL_FRAME_STALL_MS_MAX // 8"),
    ({"NOGIL_BYTES_MIN": 0}, "NOGIL_BYTES_MIN >= 1"),
    ({"SIM_PROBLEMS_SHOWN_MAX": 2.5}, "SIM_PROBLEMS_SHOWN_MAX >= 1"),
])
def test_each_broken_relation_is_refused_by_name(changes, relation):
    with pytest.raises(ImportError, match="contradict each other") as refused:
        _check(**changes)
    assert relation + " (" in str(refused.value)


def test_every_broken_relation_is_named_at_once():
    with pytest.raises(ImportError) as refused:
        _check(RAFT_EPOCH_MAX=2**31 - 1, NET_SERVER_READ_BYTES_MAX=1024)
    message = str(refused.value)
    assert "RAFT_EPOCH_MAX < 2**31 - 1" in message
    assert "NET_SERVER_READ_BYTES_MAX >= NET_CONNECTION_GUARANTEED_BYTES_MIN" in message


def test_the_module_checks_its_limits_when_it_loads():
    """The module's own source with one limit changed: loading it raises."""
    path = pathlib.Path(limits.__file__)
    source = path.read_text()
    line = "RAFT_FETCH_BYTES_MAX = 8 * 1024 * 1024\n"
    assert source.count(line) == 1
    namespace = {"__name__": "kraftcore.limits"}
    exec(compile(source, str(path), "exec"), namespace)  # as it is: loads
    broken = source.replace(line, "RAFT_FETCH_BYTES_MAX = 4 * 1024 * 1024\n")
    with pytest.raises(ImportError, match="RAFT_BATCH_BYTES_MAX <= RAFT_FETCH_BYTES_MAX"):
        exec(compile(broken, str(path), "exec"), {"__name__": "kraftcore.limits"})


def _fields_bytes(body, api_name, payload):
    """The bytes of `body`'s response frame (at the version the Raft driver speaks) that
    are not `payload`."""
    return len(framing.encode_response(body, rpc.VERSIONS[api_name], 2**31 - 1)) - len(payload)


def test_a_raft_response_needs_the_room_the_limits_leave_it():
    """The largest Fetch and FetchSnapshot responses the core builds: every field at its
    widest (int64 offsets, tagged diverging epoch and snapshot id, top-level errors)."""
    records = b"\x00" * 1000
    fetch = rpc.fetch_response(
        -32768, 2**31 - 1, 2**31 - 1, high_watermark=2**63 - 1, log_start_offset=2**63 - 1,
        records=records, diverging=(2**31 - 1, 2**63 - 1),
        snapshot_id=SnapshotId(2**63 - 1, 2**31 - 1), top_error=-32768)
    snapshot = rpc.fetch_snapshot_response(
        -32768, 2**31 - 1, 2**31 - 1, snapshot_id=SnapshotId(2**63 - 1, 2**31 - 1),
        size=2**63 - 1, position=2**63 - 1, data=records, top_error=-32768)
    needed = max(_fields_bytes(fetch, "Fetch", records),
                 _fields_bytes(snapshot, "FetchSnapshot", records))
    assert 0 < needed <= limits.RAFT_RESPONSE_FIELDS_BYTES_MAX
