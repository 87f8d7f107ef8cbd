"""The quorum-state file in Kafka's format (kafka-facts §4.2): golden bytes, both data
versions, atomic replacement, and every kind of bad file."""

import os

import pytest

from kraftcore import limits
from kraftcore.log import quorum_state as qs
from kraftcore.log.checkpoint import CheckpointError
from kraftcore.types import ZERO_UUID, ElectionState, Uuid

pytestmark = pytest.mark.smoke

DIR_ID = Uuid.from_str("J8aAPcfLQt2bqs1JT_rMgQ")


def test_golden_version_1():
    state = ElectionState(epoch=2, voted_id=1, voted_directory_id=DIR_ID)
    assert qs.encode(state, 1) == (
        b'{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
        b'"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}')
    assert qs.decode(qs.encode(state, 1)) == state


def test_version_0_carries_the_static_voters():
    state = ElectionState(epoch=3, leader_id=2, voters=(1, 2, 3))
    raw = qs.encode(state, 0)
    assert raw == (b'{"clusterId":"","leaderId":2,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
                   b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    assert qs.decode(raw) == state
    # no voters: null, as Kafka writes it
    assert b'"currentVoters":null' in qs.encode(ElectionState(epoch=1), 0)
    # a version-0 file does not carry the directory id
    assert qs.decode(qs.encode(ElectionState(epoch=1, voted_id=4, voted_directory_id=DIR_ID),
                               0)).voted_directory_id == ZERO_UUID


def test_leader_and_vote_in_one_epoch():
    state = ElectionState(epoch=7, leader_id=1, voted_id=1, voted_directory_id=DIR_ID)
    assert qs.decode(qs.encode(state, 1)) == state


def test_write_and_read_back(tmp_path):
    assert qs.read(tmp_path) is None
    state = ElectionState(epoch=5, leader_id=3)
    qs.write(tmp_path, state, 1)
    assert qs.read(tmp_path) == state
    qs.write(tmp_path, ElectionState(epoch=6, voted_id=2), 1)
    assert qs.read(tmp_path).epoch == 6
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]  # no temporary file left


def test_only_the_first_line_counts():
    assert qs.decode(qs.encode(ElectionState(epoch=1), 1) + b"\ngarbage").epoch == 1


@pytest.mark.parametrize("raw, message", [
    (b"", "not one line of JSON"),
    (b"{not json", "not one line of JSON"),
    (b"\xff\xfe", "not one line of JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"leaderEpoch": 1}', "data_version None"),
    (b'{"leaderEpoch": 1, "data_version": 2}', "data_version 2"),
    (b'{"leaderEpoch": 1, "data_version": "1"}', "data_version '1'"),
    (b'{"leaderEpoch": 1, "data_version": true}', "data_version True"),
    (b'{"leaderEpoch": "1", "data_version": 1}', "must be an integer"),
    (b'{"leaderEpoch": 4294967296, "data_version": 1}', "out of the int32 range"),
    (b'{"leaderEpoch": 1, "votedDirectoryId": "nope", "data_version": 1}', "uuid"),
    (b'{"leaderEpoch": 1, "leaderId": -5, "data_version": 1}', "leader_id"),
    (b'{"leaderEpoch": 1, "currentVoters": [{"voterId": null}], "data_version": 0}', "null"),
    (b'{"leaderEpoch": 1, "currentVoters": {"voterId": 1}, "data_version": 0}', "list"),
    (b'{"leaderId": null, "leaderEpoch": 1, "data_version": 1}', "not nullable"),
])
def test_bad_files_are_checkpoint_errors(raw, message):
    with pytest.raises(CheckpointError, match=message):
        qs.decode(raw)


def test_bad_states_and_versions_are_refused(tmp_path):
    with pytest.raises(ValueError, match="epoch"):
        ElectionState(epoch=-1)
    with pytest.raises(ValueError, match="voted_id"):
        ElectionState(epoch=1, voted_id=-1)
    # The file's fields are int32: nothing out of their range is ever written.
    with pytest.raises(ValueError, match="int32"):
        ElectionState(epoch=2**31)
    with pytest.raises(ValueError, match="leader_id"):
        ElectionState(epoch=1, leader_id=2**31)
    assert qs.decode(qs.encode(ElectionState(epoch=2**31 - 1, leader_id=2**31 - 1), 1)) \
        == ElectionState(epoch=2**31 - 1, leader_id=2**31 - 1)
    with pytest.raises(ValueError, match="data_version"):
        qs.encode(ElectionState(epoch=1), 2)
    big = tmp_path / "quorum-state"
    big.write_bytes(b" " * (limits.QUORUM_STATE_FILE_BYTES_MAX + 1))
    with pytest.raises(CheckpointError, match="larger than"):
        qs.read(tmp_path)
