"""How a quorum's transcript is written and read: one short line per event (a message as it
is delivered, `1 -> 2 Vote(pre, epoch=0, last_epoch=0, leo=0)`; a role change, `1:
unattached -> prospective (epoch 0)`; a persisted election state, ...), and the assertions
over a transcript: `assert_transcript` checks that given lines appear in order (a
subsequence, `*` a wildcard), so a test reads like a transcript but tolerates unrelated
lines."""

import re
import textwrap

from kraftcore import codec
from kraftcore.layout import BATCH_HEAD, BATCH_HEAD_BYTES, LOG_OVERHEAD_BYTES
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.raft.control import decode_control_record


# ============================================================================ formatting
# One function per message kind; each returns the text after "src -> dst ".

def _error_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _id(value):
    return "-" if value is None or value < 0 else str(value)


def _batch_ranges(data):
    """(first offset, last offset) of the v2 batches in `data`, from their headers."""
    if not data:
        return None
    data = bytes(data)
    pos, first, last = 0, None, None
    while pos + BATCH_HEAD_BYTES <= len(data):
        # base offset, batch length, partition leader epoch, magic, crc, attributes,
        # last offset delta
        base, length, _, _, _, _, delta = BATCH_HEAD.unpack_from(data, pos)
        first = base if first is None else first
        last = base + delta
        pos += LOG_OVERHEAD_BYTES + length
    return first, last


def fmt_vote_request(body, request=None):
    part = body.topics[0].partitions[0]
    kind = "pre, " if part.pre_vote else ""
    return (f"Vote({kind}epoch={part.replica_epoch}, last_epoch={part.last_offset_epoch}, "
            f"leo={part.last_offset})")


def fmt_vote_response(body, request=None):
    part = body.topics[0].partitions[0]
    pre = request is not None and request.topics[0].partitions[0].pre_vote
    name = "Vote(pre)" if pre else "Vote"
    error = body.error_code or part.error_code
    leader = f", leader {part.leader_id}" if part.leader_id >= 0 else ""
    if error:
        return f"{name} {_error_name(error)} (epoch {part.leader_epoch}{leader})"
    verdict = "granted" if part.vote_granted else "refused"
    return f"{name} {verdict} (epoch {part.leader_epoch}{leader})"


def fmt_begin_quorum_epoch_request(body, request=None):
    part = body.topics[0].partitions[0]
    return f"BeginQuorumEpoch(epoch={part.leader_epoch}, leader={part.leader_id})"


def fmt_end_quorum_epoch_request(body, request=None):
    part = body.topics[0].partitions[0]
    preferred = [c.candidate_id for c in part.preferred_candidates or ()] or list(
        part.preferred_successors or ())
    return (f"EndQuorumEpoch(epoch={part.leader_epoch}, leader={part.leader_id}, "
            f"preferred={preferred})")


def _fmt_quorum_epoch_response(name, body):
    part = body.topics[0].partitions[0]
    error = body.error_code or part.error_code
    verdict = _error_name(error) if error else "ok"
    leader = f", leader {part.leader_id}" if part.leader_id >= 0 else ""
    return f"{name} {verdict} (epoch {part.leader_epoch}{leader})"


def fmt_begin_quorum_epoch_response(body, request=None):
    return _fmt_quorum_epoch_response("BeginQuorumEpoch", body)


def fmt_end_quorum_epoch_response(body, request=None):
    return _fmt_quorum_epoch_response("EndQuorumEpoch", body)


def fmt_fetch_request(body, request=None):
    part = body.topics[0].partitions[0]
    return f"Fetch(offset={part.fetch_offset}, last_epoch={part.last_fetched_epoch})"


def fmt_fetch_response(body, request=None):
    if body.error_code:
        return f"Fetch: {_error_name(body.error_code)}"
    part = body.responses[0].partitions[0]
    hw = _id(part.high_watermark)
    leader = part.current_leader
    if part.error_code:
        return (f"Fetch: {_error_name(part.error_code)} (epoch {leader.leader_epoch}, "
                f"leader {_id(leader.leader_id)})")
    if part.diverging_epoch is not None and part.diverging_epoch.epoch >= 0:
        d = part.diverging_epoch
        return f"Fetch: diverging (epoch {d.epoch}, end offset {d.end_offset}), hw={hw}"
    if part.snapshot_id is not None and part.snapshot_id.end_offset >= 0:
        s = part.snapshot_id
        return f"Fetch: snapshot (end offset {s.end_offset}, epoch {s.epoch}), hw={hw}"
    span = _batch_ranges(part.records)
    if span is None:
        return f"Fetch: empty, hw={hw}"
    return f"Fetch: records {span[0]}..{span[1]}, hw={hw}"


def fmt_fetch_snapshot_request(body, request=None):
    part = body.topics[0].partitions[0]
    s = part.snapshot_id
    return (f"FetchSnapshot(snapshot=(end offset {s.end_offset}, epoch {s.epoch}), "
            f"position={part.position})")


def fmt_fetch_snapshot_response(body, request=None):
    if body.error_code:
        return f"FetchSnapshot: {_error_name(body.error_code)}"
    part = body.topics[0].partitions[0]
    if part.error_code:
        return f"FetchSnapshot: {_error_name(part.error_code)}"
    data = part.unaligned_records or b""
    return (f"FetchSnapshot: bytes [{part.position}, {part.position + len(data)}) "
            f"of {part.size}")


def fmt_other(body, request=None):
    return type(body).__name__


_FORMATTERS = {
    "VoteRequest": fmt_vote_request,
    "VoteResponse": fmt_vote_response,
    "BeginQuorumEpochRequest": fmt_begin_quorum_epoch_request,
    "BeginQuorumEpochResponse": fmt_begin_quorum_epoch_response,
    "EndQuorumEpochRequest": fmt_end_quorum_epoch_request,
    "EndQuorumEpochResponse": fmt_end_quorum_epoch_response,
    "FetchRequest": fmt_fetch_request,
    "FetchResponse": fmt_fetch_response,
    "FetchSnapshotRequest": fmt_fetch_snapshot_request,
    "FetchSnapshotResponse": fmt_fetch_snapshot_response,
}


def format_message(body, request=None):
    try:
        return _FORMATTERS.get(type(body).__name__, fmt_other)(body, request)
    except (AttributeError, IndexError, TypeError):  # a hand-made body of another shape
        return fmt_other(body, request)


def fmt_election_state(state):
    parts = [f"epoch {state.epoch}"]
    if state.leader_id is not None:
        parts.append(f"leader {state.leader_id}")
    if state.voted_id is not None:
        parts.append(f"voted {state.voted_id}")
    return ", ".join(parts)


def fmt_role(core):
    extra = ""
    if core.role == "follower":
        extra = f", leader {core.leader_id}"
    elif core.role == "voted":
        extra = f", voted {core.voted_id}"
    return core.role, f"(epoch {core.epoch}{extra})"


def batch_kind(batch):
    if not batch.control:
        return ""
    names = []
    for decoded in codec.decode_batches(batch.data):
        for record in decoded.records:
            names.append(decode_control_record(record.key, record.value)[1])
    return ", " + "+".join(names)


# ============================================================================ assertions

def _pattern(line):
    """An expected line: exact text, `*` matching anything."""
    return re.compile(".*".join(re.escape(piece) for piece in line.split("*")) + r"\Z")


def assert_transcript(cluster, expected):
    """Each non-blank line of `expected` (dedented; `#` lines are comments) must match a
    transcript line, in order. A line starting with `t=` is matched against the whole
    transcript line, any other against the text after the time; `*` is a wildcard."""
    lines = cluster.transcript
    pos = 0
    for raw in textwrap.dedent(expected).splitlines():
        want = raw.strip()
        if not want or want.startswith("#"):
            continue
        timed = want.startswith("t=")
        pattern = _pattern(want)
        while pos < len(lines):
            t, text = lines[pos]
            pos += 1
            if pattern.match(f"t={t} {text}" if timed else text):
                break
        else:
            raise AssertionError(
                f"transcript line not found (in order): {want!r}\n--- transcript ---\n"
                + cluster.text())


def find_line(cluster, pattern, start=0):
    """(index, t) of the first transcript entry at or after `start` matching `pattern`
    (`*` wildcards, matched against the text after the time); None if none."""
    compiled = _pattern(pattern)
    for index in range(start, len(cluster.transcript)):
        t, text = cluster.transcript[index]
        if compiled.match(text):
            return index, t
    return None


def count_lines(cluster, pattern):
    compiled = _pattern(pattern)
    return sum(1 for _, text in cluster.transcript if compiled.match(text))
