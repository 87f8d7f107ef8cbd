"""The `quorum-state` file: a KRaft node's durable election state, in Kafka's format
(kafka-facts §4.2).

The file holds one line of JSON: the fields of Kafka's QuorumStateData at a data version
(0 or 1) in camelCase, then `"data_version"`. Version 1 (kraft.version 1, dynamic voters)
carries `leaderId`, `leaderEpoch`, `votedId`, `votedDirectoryId`; version 0 (static voters)
carries `clusterId` (written ""), the same ids, `appliedOffset` (written 0) and
`currentVoters`. It is replaced atomically (temporary file, fsync, rename, directory fsync),
and a node writes it before it acts on a new epoch, vote or leader.

`kraftcore.types.ElectionState` uses None for "no leader" and "no vote" (Kafka's -1 in the
file).
A file that does not parse, names an unknown data version or holds values of the wrong type
raises `CheckpointError`; a missing file reads as None (a node that never voted).
"""

import json
import os

from kraftcore.layout import QUORUM_STATE_FILE
from kraftcore.limits import QUORUM_STATE_FILE_BYTES_MAX
from kraftcore.log import fileio
from kraftcore.log.checkpoint import CheckpointError
from kraftcore.protocol.schema import Field as F, adopt, message
from kraftcore.types import ElectionState

DATA_VERSIONS = (0, 1)
NO_ID = -1

QuorumStateData = message("QuorumStateData", valid="0-1", flexible="0+", fields=[
    F("ClusterId", "string", versions="0"),
    F("LeaderId", "int32", default=NO_ID),
    F("LeaderEpoch", "int32", default=-1),
    F("VotedId", "int32", default=NO_ID),
    F("VotedDirectoryId", "uuid", versions="1+"),
    F("AppliedOffset", "int64", versions="0"),
    F("CurrentVoters", "[]Voter", versions="0", nullable="0", default=None, fields=[
        F("VoterId", "int32"),
    ]),
])
adopt(QuorumStateData, __name__)


def encode(state, data_version):
    """The file's bytes for `state` at `data_version` (0 or 1)."""
    if data_version not in DATA_VERSIONS:
        raise ValueError(f"quorum-state data_version must be 0 or 1, not {data_version!r}")
    data = QuorumStateData(
        cluster_id="", leader_id=NO_ID if state.leader_id is None else state.leader_id,
        leader_epoch=state.epoch, voted_id=NO_ID if state.voted_id is None else state.voted_id,
        voted_directory_id=state.voted_directory_id, applied_offset=0,
        current_voters=None if state.voters is None else [
            QuorumStateData.Voter(voter_id=v) for v in state.voters])
    doc = data.to_json(data_version)
    doc["data_version"] = data_version
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def decode(raw, where=QUORUM_STATE_FILE):
    """Parse a quorum-state file's bytes (only the first line counts, as in Kafka)."""
    try:
        doc = json.loads(raw.split(b"\n", 1)[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{where} is not one line of JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{where} does not hold a JSON object")
    version = doc.get("data_version")
    if version not in DATA_VERSIONS or isinstance(version, bool):
        raise CheckpointError(f"{where} has data_version {version!r}; kraftcore reads 0 and 1")
    try:
        data = QuorumStateData.from_json(doc, version)
        voters = (None if data.current_voters is None
                  else tuple(v.voter_id for v in data.current_voters))
        return ElectionState(
            epoch=max(data.leader_epoch, 0),
            leader_id=None if data.leader_id == NO_ID else data.leader_id,
            voted_id=None if data.voted_id == NO_ID else data.voted_id,
            voted_directory_id=data.voted_directory_id, voters=voters)
    except ValueError as exc:
        raise CheckpointError(f"{where}: {exc}") from None


def read(directory):
    """The election state stored in `directory`, or None when there is no file yet."""
    path = os.path.join(directory, QUORUM_STATE_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(QUORUM_STATE_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    if len(raw) > QUORUM_STATE_FILE_BYTES_MAX:
        raise CheckpointError(f"{path} is larger than {QUORUM_STATE_FILE_BYTES_MAX} bytes")
    return decode(raw, path)


def write(directory, state, data_version):
    """Replace the file in `directory` with `state` atomically and durably."""
    fileio.write_atomic(os.path.join(directory, QUORUM_STATE_FILE), encode(state, data_version))
