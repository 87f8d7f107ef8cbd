"""Every hard limit of kraftcore, in one place, with its unit in the name.

A limit exists so that bad or hostile input fails fast with a clear error instead of
exhausting memory or time, or so that a loop, a queue or a report stays bounded. Names say
what is bounded, then the unit, then the bound: `<THING>_<UNIT>_MAX` or `_MIN`
(`RAFT_BATCH_BYTES_MAX`, `NET_IDLE_SWEEP_INTERVAL_MS_MIN`); counts have no unit
(`CONTROLLER_QUEUE_EVENTS_MAX`). They are grouped by the layer that enforces them, lowest
first. Changing one is a deliberate act: tests refer to these names.

What is not here: defaults of settings a caller may change stay with their configuration,
named `*_DEFAULT` (or as the default of a config field); sizes fixed by Kafka's formats
are in `kraftcore.layout`.

The limits that depend on each other are checked when this module loads (`check`, at the
bottom): values that contradict each other raise ImportError, naming the relation.
"""

from kraftcore.layout import (BATCH_HEADER_BYTES, INT32_MAX, LOG_OVERHEAD_BYTES,
                              SIZE_FIELD_MIN)

# ------------------------------------------------------------------------------ kernels
# Record batch v2 (kafka-facts §2): batchLength is an int32, so a batch is at most this big.
RECORD_BATCH_BYTES_MAX = 0x7FFFFFFF
# A record holds at least length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength and headersCount: seven one-byte fields. Used to reject lying record counts
# before anything is allocated for them.
RECORD_BYTES_MIN = 7
# Decompressing one batch may produce at most this many bytes (a guard against
# decompression bombs; Kafka's own default max.message.bytes is 1 MiB).
DECOMPRESSED_BATCH_BYTES_MAX = 128 * 1024 * 1024
# Inputs at least this large are processed with the GIL released by the native kernels.
NOGIL_BYTES_MIN = 64 * 1024
# Elements of a protocol array whose element can take zero bytes: the count cannot be
# checked against the remaining input, so it is capped (both protocol kernels).
PROTOCOL_EMPTY_ELEMENTS_MAX = 1 << 16

# ------------------------------------------------------------------------------ protocol
# Protocol frames (kafka-facts §6.1): the largest request or response a connection accepts,
# Kafka's `socket.request.max.bytes` default. A larger size prefix fails the stream.
FRAME_BYTES_MAX = 100 * 1024 * 1024

# ------------------------------------------------------------------------------ raft
# KRaft (kafka-facts §4.3): the largest batch a leader builds and the most a Fetch or
# FetchSnapshot response carries (Kafka's MAX_BATCH_SIZE_BYTES / MAX_FETCH_SIZE_BYTES).
# The metadata log refuses larger batches (its LogConfig.batch_bytes_max).
RAFT_BATCH_BYTES_MAX = 8 * 1024 * 1024
RAFT_FETCH_BYTES_MAX = 8 * 1024 * 1024
# What a Fetch or FetchSnapshot response of the metadata partition needs in its frame
# besides the records or snapshot bytes it carries: the response header, ids, offsets,
# epochs and tagged fields take about a hundred bytes (tests/test_limits.py encodes the
# largest one kraftcore sends).
RAFT_RESPONSE_FIELDS_BYTES_MAX = 4096
# Proposals waiting for the next Ready on a leader; more raises instead of queueing.
RAFT_PENDING_RECORDS_MAX = 1_000_000
# The observers (non-voters that fetch, e.g. brokers) a leader tracks for DescribeQuorum;
# the one that fetched least recently is forgotten when another one arrives.
RAFT_OBSERVERS_MAX = 10_000

# A leader epoch is an int32 in every Raft RPC, in quorum-state and in every record batch
# header (kafka-facts §2, §4.2, §6.3); each candidacy spends one (epoch + 1). Unit: epochs
# (elections). `kraftcore.raft` keeps every epoch it stores, sends or adopts within these
# bounds; docs/raft.md ("Epochs and ids from other nodes") gives the reasoning.
#
# The largest epoch a node ever stores or accepts: one below the int32 maximum, which could
# never be followed by a larger epoch. A node whose next election would need an epoch above
# it has exhausted the epoch space and stops (RaftEpochExhaustedError).
RAFT_EPOCH_MAX = 2**31 - 2
# The largest epoch one message can move a node to in a single jump: half the epoch space.
# Below it a node adopts any epoch it hears of, as Kafka does (a voter that was away for
# many elections catches up at once); so a quorum pushed here by one accepted message
# (say, one that forges a voter's id) keeps 2**30 - 2 elections.
RAFT_EPOCH_ACCEPTED_MAX = 2**30
# Above RAFT_EPOCH_ACCEPTED_MAX, how far past its own epoch one response can move a node:
# enough for a voter that missed that many elections to rejoin in a few round trips. A
# response answers a request of the node's own, on a connection it opened, so only a peer
# can send one; one that names a larger epoch moves the node this far (and the next one
# further).
RAFT_EPOCH_STEP_MAX = 2**16
# Above RAFT_EPOCH_ACCEPTED_MAX, how far past its own epoch one request can move a node: one
# epoch, the most a single election spends. Anyone can send a request, forging a voter's
# id, so spending the remaining epochs this way takes 2**30 such requests; a request that
# names a larger epoch is refused, and a voter that missed more elections catches up
# through the answers to its own requests.
RAFT_EPOCH_REQUEST_STEP_MAX = 1

# ------------------------------------------------------------------------------ log
# Kafka's minimum of `segment.bytes` (LegacyRecord.RECORD_OVERHEAD_V0): the smallest segment
# a Log (and `metadata.log.segment.bytes`) accepts.
LOG_SEGMENT_BYTES_MIN = SIZE_FIELD_MIN
# The quorum-state file is one short line; anything longer is not a quorum-state file.
QUORUM_STATE_FILE_BYTES_MAX = 1 << 20
# The first batch of a snapshot file (its header) is read whole only up to this size: a
# Raft batch with its framing.
SNAPSHOT_FIRST_BATCH_BYTES_MAX = RAFT_BATCH_BYTES_MAX + LOG_OVERHEAD_BYTES

# The log cleaner (`kraftcore.log.cleaner`) reads a segment this many bytes at a time (one
# batch at a time when a batch is larger), and checks between reads whether its clean was
# aborted (the log is closing, truncated or deleted): what a close may wait for.
LOG_CLEANER_READ_BYTES_MAX = 4 * 1024 * 1024
# What the cleaner counts for each key of its key -> last offset map besides the key's bytes
# (a dict entry, the int and the bytes object), so that `log.cleaner.dedupe.buffer.size`
# bounds the map's memory.
LOG_CLEANER_MAP_ENTRY_BYTES = 120

# ------------------------------------------------------------------------------ metadata
# The most bytes of record values a snapshot writer puts in one data batch (a single larger
# value goes alone).
METADATA_SNAPSHOT_BATCH_BYTES_MAX = 1024 * 1024
# Committed batches handed to a MetadataLoader at a time when a metadata directory is
# replayed (`metadata-shell`, `kraftcore verify`).
METADATA_APPLY_BYTES_MAX = 8 * 1024 * 1024

# ------------------------------------------------------------------------------ controller
# Client operations the controller's event queue holds; more fail with
# ControllerQueueFullError (the Raft core's inputs are always taken).
CONTROLLER_QUEUE_EVENTS_MAX = 100_000
# The most partitions one CreateTopics or CreatePartitions request may add (Kafka's
# ReplicationControlManager MAX_PARTITIONS_PER_BATCH): placement runs before the controller
# counts records, so a request for 2^31 partitions must be refused before it gets there.
CONTROLLER_PARTITIONS_PER_REQUEST_MAX = 10_000
# Kafka's longest topic name (Topic.MAX_NAME_LENGTH); names are ASCII, so bytes = characters.
TOPIC_NAME_BYTES_MAX = 249

# ------------------------------------------------------------------------------ broker
# A broker's lifecycle keeps its newest transitions only.
BROKER_TRANSITIONS_KEPT_MAX = 1000
# The registration backoff doubles at most this often (its delay is capped anyway; this
# keeps the exponent, and the int, small).
BROKER_BACKOFF_DOUBLINGS_MAX = 30
# New partition logs a broker opens in one event-loop turn when an image gives it many (a
# topic of thousands of partitions): each costs a directory fsync, and heartbeats and
# requests must go on in between (`ReplicaManager.apply_image(opens_max=...)`).
BROKER_LOG_OPENS_PER_TURN_MAX = 32
# A Fetch answer's records for one partition at least this big go out from the segment file
# with sendfile (zero-copy) rather than read into memory; smaller ones cost less copied.
BROKER_FETCH_ZERO_COPY_BYTES_MIN = 32 * 1024
# At most this many of one Fetch answer's partitions go out zero-copy (each holds a file
# descriptor until it is sent); the rest are copied.
BROKER_FETCH_REGIONS_PER_RESPONSE_MAX = 64
# Bytes of an offsets topic partition a new group coordinator reads per event-loop turn
# while it loads its groups' offsets (requests and heartbeats go on in between).
BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX = 1024 * 1024
# How often a group coordinator looks at its groups' session, rebalance and sync timeouts.
BROKER_GROUP_TICK_MS = 50

# ------------------------------------------------------------------------------ network
# `kraftcore.net`: per-connection and per-listener bounds. Frames use FRAME_BYTES_MAX above.
# Requests a client connection keeps written and unanswered at once; more wait their turn
# (Kafka's `max.in.flight.requests.per.connection` plays this role for producers).
NET_INFLIGHT_REQUESTS_MAX = 64
# Requests handed over with `send_nowait` that wait (for a connection or for an in-flight
# slot) on one client connection; more fail with RequestQueueFullError instead of queueing.
NET_QUEUED_REQUESTS_MAX = 1024
# Requests a listener handles at once on one connection; past it the connection is not read
# until a response goes out (Kafka's broker handles one at a time per connection).
NET_SERVER_INFLIGHT_REQUESTS_MAX = 64
# Connections one listener keeps open at once; more are closed as soon as they are accepted.
NET_LISTENER_CONNECTIONS_MAX = 4096
# Bytes a listener reads from one connection in one turn of the event loop (one recv): with
# NET_SERVER_INFLIGHT_REQUESTS_MAX, what one connection can make the listener handle before
# the others get their turn.
NET_SERVER_READ_BYTES_MAX = 256 * 1024
# Bytes of requests (read and not answered) a connection may always hold, even while the
# node's `queued.max.request.bytes` is taken by other connections: small requests (the
# quorum's Fetch and Vote, a broker's heartbeat, an admin probe) keep flowing while clients
# hold the rest. A node holds at most that cap + this much per open connection.
NET_CONNECTION_GUARANTEED_BYTES_MIN = 16 * 1024
# Responses produced in one go (one read's worth of requests) are written together, but no
# more than this many bytes are held back: past it they are written at once, so that a full
# send buffer pauses the connection before the next request is handled.
NET_SERVER_CORK_BYTES_MAX = 64 * 1024
# A frame at least this big that fills a connection's buffer exactly is handed to the
# decoder without being copied out of it.
NET_SERVER_HANDOVER_BYTES_MIN = 64 * 1024
# A frame counts its whole declared size from the moment its 4-byte size has been read (the
# rest is reserved), so 4 bytes can reserve the whole request memory. A connection that
# holds the reserved rest of a frame beyond its guaranteed bytes, has no request being
# handled, and sends no byte of it for this long is closed (by the idle sweep): it cannot
# keep the memory from the others for longer. A frame whose bytes keep arriving, however
# slowly, is never cut off: any byte restarts the count.
NET_PARTIAL_FRAME_STALL_MS_MAX = 10_000
# A TLS handshake that does not finish within this long is dropped (asyncio's
# `ssl_handshake_timeout`), and so is a connection to a SASL listener that has not
# authenticated this long after its handshake: neither can hold a connection slot forever.
NET_TLS_HANDSHAKE_MS_MAX = 10_000
NET_AUTHENTICATION_MS_MAX = 10_000
# A connection whose SASL authentication was refused closes this long after the refusal is
# sent (Kafka's connection.failed.authentication.delay.ms default), so that the client reads
# the refusal before it sees the connection end.
NET_FAILED_AUTHENTICATION_DELAY_MS = 100
# A listener looks for idle connections every eighth of `connections.max.idle.ms`, within
# these bounds: a connection without a request is closed after between 1 and 1.25 times
# the setting (at most 60 s late).
NET_IDLE_SWEEP_INTERVAL_MS_MIN = 10
NET_IDLE_SWEEP_INTERVAL_MS_MAX = 30_000
# Connections a listener refuses (over max.connections or max.connections.per.ip) are
# logged in at most one line per this interval; the line counts the ones not logged.
NET_REFUSAL_LOG_INTERVAL_MS_MIN = 1000

# ------------------------------------------------------------------------------ admin
# Times an admin request follows NOT_CONTROLLER to the controller named in the answer.
ADMIN_REDIRECTS_MAX = 2
# The largest snapshot `kraftcore metadata watch` downloads (it holds one in memory while
# it loads it).
METADATA_WATCH_SNAPSHOT_BYTES_MAX = 1 << 30

# ------------------------------------------------------------------------------ runtime
# Readys one drive of the Raft driver may take before it yields to the event loop.
RAFT_DRIVER_READYS_PER_DRIVE_MAX = 10_000
# The most values, and value bytes, `RaftDriver.append` puts in one batch (and never more
# than the core's batch size once framed).
RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX = 10_000
RAFT_DRIVER_APPEND_BATCH_BYTES_MAX = 1 << 20
# How long a stopping node waits for its controlled shutdown or its resignation to go out.
NODE_SHUTDOWN_WAIT_MS_MAX = 30_000
# The smallest size at which a node's log file may be rotated (`--log-file-max-bytes`):
# below it, a rotation would follow every few lines.
PROCESS_LOG_FILE_BYTES_MAX_MIN = 4096
# How long `kraftcore cluster up` waits for the quorum's first leader, and `cluster down`
# for a node to exit before it is killed.
LOCAL_CLUSTER_LEADER_WAIT_S_MAX = 60
LOCAL_CLUSTER_STOP_WAIT_S_MAX = 40

# ------------------------------------------------------------------------------ tools
# The cluster demo: how long it waits for any one command or state.
DEMO_CLUSTER_WAIT_S_MAX = 90
# The simulator: events one seed may run (a livelocked run fails instead of running
# forever), events one `run_until` may run at one instant, Readys one input may produce
# before a node gives up on its core, the trace lines kept for a failure report, and
# problems listed in one violation message.
SIM_EVENTS_PER_SEED_MAX = 5_000_000
SIM_EVENTS_PER_RUN_MAX = 50_000_000
SIM_READYS_PER_INPUT_MAX = 1000
SIM_TRACE_TAIL_LINES_MAX = 60
SIM_PROBLEMS_SHOWN_MAX = 5
# The history checker: states one key's search may visit before it gives up (a history
# that big means the workload must be made smaller, and the failure says so).
SIM_HISTORY_SEARCH_STATES_MAX = 2_000_000
# The hostile sender: genuine messages remembered for replays (the most recent ones).
SIM_HOSTILE_REPLAY_MESSAGES_MAX = 256
# The raft workload's client: offsets it lets a leader hold above its high watermark
# before it waits.
SIM_UNCOMMITTED_OFFSETS_MAX = 500
# `kraftcore verify`: violations one file lists, differing records listed for one file that
# disagrees with another, violations a cross-file check lists (the rest are counted), and
# violations the text report prints (`--output` has them all).
SPARK_FILE_VIOLATIONS_MAX = 100
SPARK_PAIR_DIFFERENCES_MAX = 20
SPARK_CROSS_VIOLATIONS_MAX = 1000
SPARK_SHOWN_VIOLATIONS_MAX = 50


# ------------------------------------------------------------------------------ relations

def check(values):
    """Raise ImportError, naming each relation broken, when the limits in `values` (a
    mapping of name to value: this module's, when it loads) contradict each other or the
    code that relies on them. Returns None when they agree."""
    v = values
    broken = []

    def need(holds, relation, why):
        if not holds:
            broken.append(f"{relation} ({why})")

    for name, value in v.items():
        if name.isupper() and name.endswith(("_MAX", "_MIN", "_BYTES", "_MS")):
            need(type(value) is int and value >= 1, f"{name} >= 1",
                 "a bound of zero or less would refuse everything")
    need(v["RECORD_BATCH_BYTES_MAX"] <= INT32_MAX, "RECORD_BATCH_BYTES_MAX <= 2**31 - 1",
         "both record kernels refuse a batch above it as above the int32 limit")
    need(v["FRAME_BYTES_MAX"] <= INT32_MAX, "FRAME_BYTES_MAX <= 2**31 - 1",
         "a frame's size prefix is an int32")
    need(BATCH_HEADER_BYTES <= v["RAFT_BATCH_BYTES_MAX"] <= v["RECORD_BATCH_BYTES_MAX"],
         f"{BATCH_HEADER_BYTES} <= RAFT_BATCH_BYTES_MAX <= RECORD_BATCH_BYTES_MAX",
         "the metadata log is a Log whose batch limit is RAFT_BATCH_BYTES_MAX, and a Raft "
         "batch is a record batch")
    need(v["RAFT_BATCH_BYTES_MAX"] <= v["RAFT_FETCH_BYTES_MAX"],
         "RAFT_BATCH_BYTES_MAX <= RAFT_FETCH_BYTES_MAX",
         "a Fetch answer carries whole batches, the first one even above the fetch size: "
         "so that every answer stays within RAFT_FETCH_BYTES_MAX")
    need(v["RAFT_FETCH_BYTES_MAX"] + v["RAFT_RESPONSE_FIELDS_BYTES_MAX"]
         <= v["FRAME_BYTES_MAX"],
         "RAFT_FETCH_BYTES_MAX + RAFT_RESPONSE_FIELDS_BYTES_MAX <= FRAME_BYTES_MAX",
         "a follower's connection refuses a Fetch or FetchSnapshot answer in a larger frame")
    need(v["RAFT_EPOCH_MAX"] < INT32_MAX, "RAFT_EPOCH_MAX < 2**31 - 1",
         "the next candidacy, epoch + 1, must still fit the int32 epoch fields")
    need(v["RAFT_EPOCH_ACCEPTED_MAX"] <= v["RAFT_EPOCH_MAX"],
         "RAFT_EPOCH_ACCEPTED_MAX <= RAFT_EPOCH_MAX",
         "a node cannot adopt an epoch it may not store")
    need(v["RAFT_EPOCH_REQUEST_STEP_MAX"] <= v["RAFT_EPOCH_STEP_MAX"],
         "RAFT_EPOCH_REQUEST_STEP_MAX <= RAFT_EPOCH_STEP_MAX",
         "a request, which anyone can send, moves a node no further than a response")
    need(v["SNAPSHOT_FIRST_BATCH_BYTES_MAX"] >= BATCH_HEADER_BYTES,
         f"SNAPSHOT_FIRST_BATCH_BYTES_MAX >= {BATCH_HEADER_BYTES}",
         "a snapshot's first batch has a whole batch header")
    need(v["NET_SERVER_READ_BYTES_MAX"] >= v["NET_CONNECTION_GUARANTEED_BYTES_MIN"],
         "NET_SERVER_READ_BYTES_MAX >= NET_CONNECTION_GUARANTEED_BYTES_MIN",
         "a request within a connection's guaranteed bytes is read in one turn")
    need(v["NET_IDLE_SWEEP_INTERVAL_MS_MIN"] <= v["NET_IDLE_SWEEP_INTERVAL_MS_MAX"],
         "NET_IDLE_SWEEP_INTERVAL_MS_MIN <= NET_IDLE_SWEEP_INTERVAL_MS_MAX",
         "the sweep's interval is clamped between them")
    need(v["NET_IDLE_SWEEP_INTERVAL_MS_MIN"] <= v["NET_PARTIAL_FRAME_STALL_MS_MAX"] // 8,
         "NET_IDLE_SWEEP_INTERVAL_MS_MIN <= NET_PARTIAL_FRAME_STALL_MS_MAX // 8",
         "the sweep closes a stalled frame at most an eighth of the stall time late")
    if broken:
        raise ImportError("kraftcore.limits contradict each other: " + "; ".join(broken)
                          + ". Change the limits so that every relation holds")


check(globals())
