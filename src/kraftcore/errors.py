"""Errors a caller of kraftcore can meet. Each message says what is wrong and what to do."""


class KraftcoreError(Exception):
    """Base class of every error kraftcore raises on purpose."""


class _PositionedError(KraftcoreError, ValueError):
    """Bad bytes found at `position` (a byte offset in the buffer that was given)."""

    def __init__(self, message, position=None):
        self.position = position
        self.reason = message
        if position is not None:
            message = f"{message} (at byte {position})"
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.reason, self.position))


class CorruptRecordError(_PositionedError):
    """Bytes that should hold record batches do not: bad CRC, impossible field, truncation.

    `position` is the byte offset, in the buffer that was given, where the problem was found
    (for a compressed batch, the position of that batch).
    """


class ProtocolError(_PositionedError):
    """Bytes that should hold a Kafka protocol message, header, frame or metadata record do
    not: truncated, a length or count out of range, a bad varint, trailing garbage, invalid
    UTF-8. `position` is the byte offset in the buffer that was given."""


class UnsupportedVersionError(KraftcoreError, ValueError):
    """A message, header or record version outside the range kraftcore knows for it."""


class EncodeError(KraftcoreError, ValueError):
    """A value cannot be encoded: wrong type, out of its field's range, or a non-default
    value in a field that the chosen version cannot carry. Nothing was written."""


class UnsupportedCompressionError(KraftcoreError):
    """A record batch names a compression codec kraftcore does not know (Kafka's are none,
    gzip, snappy, lz4 and zstd; all are read and written)."""

    def __init__(self, codec, position=None):
        self.codec = codec
        self.position = position
        where = "" if position is None else f" (batch at byte {position})"
        super().__init__(
            f"compression codec {codec!r} is not supported{where}; "
            "kraftcore reads and writes none, gzip, snappy, lz4 and zstd"
        )

    def __reduce__(self):
        return (type(self), (self.codec, self.position))


class ConfigError(KraftcoreError, ValueError):
    """A configuration value is missing, of the wrong type, or out of its range."""


class LogError(KraftcoreError):
    """Base class of the errors of `kraftcore.log`."""


class InvalidAppendError(LogError, ValueError):
    """An append was refused (offsets not contiguous, leader epoch going backwards, a batch
    or an append too large); nothing of it was written."""


class OffsetOutOfRangeError(LogError, ValueError):
    """An offset lies outside [log start offset, log end offset]."""

    def __init__(self, offset, log_start_offset, log_end_offset, what="read"):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"cannot {what} offset {offset}: the log holds offsets "
            f"[{log_start_offset}, {log_end_offset})"
        )

    def __reduce__(self):
        return (type(self), (self.offset, self.log_start_offset, self.log_end_offset))


class InvalidOffsetError(LogError, ValueError):
    """A truncation, high watermark or log start offset move breaks the log's rules
    (log start <= high watermark <= log end offset; committed data is never truncated)."""


class StorageError(LogError, OSError):
    """Writing, syncing or reading a log file failed (a full disk, an I/O error). `errno`
    is the operating system's error number. Everything appended before the failed call is
    still readable; after a failed sync the log refuses writes until it is reopened."""


class LogClosedError(LogError):
    """The log was closed (or went offline after a storage error); reopen it."""


class CleanAbortedError(LogError):
    """A clean of a compacted log stopped before it finished because the log was closed,
    deleted or truncated meanwhile, or its segments changed under it: nothing of the
    unfinished part was swapped in (what was swapped in before is complete). The next
    clean starts again from the log's cleaner offset."""


class LogLockedError(StorageError):
    """The log's directory is held by another open `Log`, in this process or another one:
    a log has one opener at a time. `path` is the directory; `errno` the one `flock` gave."""

    def __init__(self, path, errno=None):
        self.path = path
        super().__init__(
            f"the log in {path} is already open: its lock file {path}/.lock is held, by this "
            "process or another one; close that Log (or stop the process that has it open) "
            "and open it again")
        self.errno = errno  # set after: the message is not prefixed with "[Errno n]"

    def __reduce__(self):
        return (type(self), (self.path, self.errno))


class LogGapError(StorageError):
    """The segments of a log do not hold one unbroken run of offsets: a segment is missing,
    empty or damaged in the middle of the log, or two segments claim the same offsets.
    Opening it would hide the records past the break, so `Log.open` refuses; nothing was
    changed on disk. The message names the files and the option that opens the log up to
    the break without deleting anything (`Log.open(path, set_aside_past_gap=True)`).

    `path` is the log directory, `end_offset` the log end offset the log would have if
    opened up to the break, `files` the segment files past it."""

    def __init__(self, message, path=None, end_offset=None, files=()):
        super().__init__(message)
        self.path = path
        self.end_offset = end_offset
        self.files = tuple(files)

    def __reduce__(self):
        return (type(self), (self.args[0], self.path, self.end_offset, self.files))


class RaftError(KraftcoreError):
    """Base class of the errors of `kraftcore.raft`."""


class NotLeaderError(RaftError):
    """A proposal reached a node that is not the leader of the epoch it named (or of any
    epoch). `leader_id` and `epoch` say whom to ask instead (leader_id None: unknown)."""

    def __init__(self, node_id, leader_id, epoch):
        self.node_id = node_id
        self.leader_id = leader_id
        self.epoch = epoch
        where = f"node {leader_id}" if leader_id is not None else "an unknown node"
        super().__init__(f"node {node_id} is not the leader; epoch {epoch} is led by {where}, "
                         "send proposals there")

    def __reduce__(self):
        return (type(self), (self.node_id, self.leader_id, self.epoch))


class RaftStateError(RaftError):
    """The quorum reached a state that must never happen (committed data about to be
    truncated, two leaders in one epoch, a response naming this node leader when it is
    not). The node must stop: continuing could lose or fork committed data."""


class ControllerError(KraftcoreError):
    """A controller operation was refused. `code` is the Kafka error code a response carries
    for it (a `kraftcore.protocol.error_codes.ErrorCode` value, e.g. 38
    INVALID_REPLICATION_FACTOR); the message says what was wrong with the request."""

    def __init__(self, code, message):
        self.code = int(code)
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.code, str(self)))


class NotControllerError(ControllerError):
    """This node is not (or is no longer) the active controller, or it lost leadership
    before the operation's records were committed: nothing of the operation is promised.
    `controller_id` names the active controller when it is known (else None); retry there."""

    NOT_CONTROLLER = 41

    def __init__(self, node_id, controller_id=None, reason=None):
        self.node_id = node_id
        self.controller_id = controller_id
        where = (f"node {controller_id} is the active controller" if controller_id is not None
                 else "the active controller is not known")
        text = f"node {node_id} is not the active controller ({where})"
        if reason:
            text += f": {reason}"
        super().__init__(self.NOT_CONTROLLER, text + "; retry on the active controller")

    def __reduce__(self):
        return (_rebuild_not_controller, (self.node_id, self.controller_id, str(self)))


def _rebuild_not_controller(node_id, controller_id, text):
    error = NotControllerError(node_id, controller_id)
    error.args = (text,)
    return error


class MetadataError(KraftcoreError):
    """A metadata record cannot apply to the image it is replayed on (a partition of an
    unknown topic, a change to an unknown broker, a transaction marker out of place). The
    log or snapshot holding it is inconsistent: stop replaying and report it."""


class MetadataLoadError(KraftcoreError):
    """A metadata image cannot be loaded from a snapshot file or a metadata log directory
    (`kraftcore.log.metadata_dir` reads it, `kraftcore.metadata.directory` assembles the
    image): the file or directory is missing or unreadable, is
    not a snapshot or a metadata log, or its records are missing or do not replay. The
    message is one line naming the file and what to give instead."""


class AdminError(KraftcoreError):
    """An admin operation (`kraftcore.admin.client.AdminClient`) failed: the controller
    refused it (the message names the Kafka error, e.g. TOPIC_ALREADY_EXISTS (36), and the
    topic or resource), or no controller would take it (the quorum is electing a leader:
    retry shortly; or the bootstrap controller does not know the others' addresses:
    bootstrap at another controller)."""


class ClusterError(KraftcoreError):
    """A local cluster (`kraftcore.runtime.local_cluster`, `kraftcore cluster up | down`)
    could not be started or stopped; the message says why and what to do (another --dir,
    the node.log files to read)."""


# ------------------------------------------------------------------------------ network
# The errors of `kraftcore.net`. A request that meets one of them got no response; whether
# the peer acted on it is unknown unless the error says it was never sent. (ListenError is
# about binding a listener, not about a request.)


class NetworkError(KraftcoreError):
    """Base class of the errors of `kraftcore.net`. `address` is the peer's (host, port)."""

    def __init__(self, message, address=None):
        self.address = address
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (str(self), self.address))


class UnknownPeerError(NetworkError, LookupError):
    """A request named a node id the peer pool has no address for. Nothing was sent; give
    the pool the node's address with `update(node_id, host, port)` first."""


class ListenError(NetworkError, OSError):
    """A listener could not bind its address (the port is taken, the host is not an address
    of this machine, or binding it needs privileges). Pick another port or stop the process
    that holds it; the operating system's error is the `__cause__`."""


class ConnectError(NetworkError, ConnectionError):
    """No connection to the peer could be made (refused, unreachable, timed out, or still in
    the reconnect backoff after such a failure). Nothing was sent. Check that the node runs
    and listens on that address; the peer pool retries with exponential backoff."""


class ConnectionClosedError(NetworkError, ConnectionError):
    """The connection closed (by this side, by the peer, by a reset, or because the peer
    broke the protocol) before the response arrived. The peer may or may not have acted on
    the request: retry it only if it is safe to apply twice."""


class RequestTimeoutError(NetworkError, TimeoutError):
    """No response arrived within the request's timeout. A request that was sent leaves its
    connection closed (as Kafka's clients do: the peer is presumed stuck), so the peer may or
    may not have acted on it; one still waiting to be sent was dropped unsent. Retry, or
    raise `timeout_ms` if the peer legitimately needs longer (long polls, commits)."""


class RequestQueueFullError(NetworkError):
    """Too many requests already wait to be sent to this peer (`queued_max`); this one was
    dropped unsent. Send less often or wait for responses; the limit keeps a slow peer from
    growing an unbounded queue."""


# ------------------------------------------------------------------------------ raft


class RaftEpochExhaustedError(RaftStateError):
    """The node would need a leader epoch above `kraftcore.limits.RAFT_EPOCH_MAX` (its next
    election, or an epoch it stored earlier): the quorum has spent its epoch space and can
    elect no leader any more. The node stops. Its committed metadata is intact; move it to
    a newly formatted quorum (load the latest snapshot there), since no Kafka-compatible log
    can carry a larger epoch."""


# ------------------------------------------------------------------------------ security


class SaslAuthenticationError(KraftcoreError):
    """A SASL exchange failed: bad credentials, an unknown user, or a message that breaks
    its mechanism's rules. The message is what the peer is told (Kafka answers with
    SASL_AUTHENTICATION_FAILED and this text, then closes the connection)."""
