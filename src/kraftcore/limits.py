"""Every hard limit of kraftcore, in one place, with its unit in the name.

A limit exists so that bad or hostile input fails fast with a clear error instead of
exhausting memory or time. Changing one is a deliberate act: tests refer to these names.
"""

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

# Protocol frames (kafka-facts §6.1): the largest request or response a connection accepts,
# Kafka's `socket.request.max.bytes` default. A larger size prefix fails the stream.
FRAME_BYTES_MAX = 100 * 1024 * 1024

# KRaft (kafka-facts §4.3): the largest batch a leader builds and the most a Fetch or
# FetchSnapshot response carries (Kafka's MAX_BATCH_SIZE_BYTES / MAX_FETCH_SIZE_BYTES).
RAFT_BATCH_BYTES_MAX = 8 * 1024 * 1024
RAFT_FETCH_BYTES_MAX = 8 * 1024 * 1024
# Proposals waiting for the next Ready on a leader; more raises instead of queueing.
RAFT_PENDING_RECORDS_MAX = 1_000_000

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
NET_CONNECTION_GUARANTEED_BYTES = 16 * 1024
# A frame counts its whole declared size from the moment its 4-byte size has been read (the
# rest is reserved), so 4 bytes can reserve the whole request memory. A connection that
# holds the reserved rest of a frame beyond its guaranteed bytes, has no request being
# handled, and sends no byte of it for this long is closed (by the idle sweep): it cannot
# keep the memory from the others for longer. A frame whose bytes keep arriving, however
# slowly, is never cut off: any byte restarts the count.
NET_PARTIAL_FRAME_STALL_MS = 10_000
# A listener looks for idle connections every eighth of `connections.max.idle.ms`, within
# these bounds: a connection without a request is closed after between 1 and 1.25 times
# the setting (at most 60 s late).
NET_IDLE_SWEEP_INTERVAL_MS_MIN = 10
NET_IDLE_SWEEP_INTERVAL_MS_MAX = 30_000
# Connections a listener refuses (over max.connections or max.connections.per.ip) are
# logged in at most one line per this interval; the line counts the ones not logged.
NET_REFUSAL_LOG_INTERVAL_MS = 1000

# ------------------------------------------------------------------------------ raft epochs
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
# The observers (non-voters that fetch, e.g. brokers) a leader tracks for DescribeQuorum;
# the one that fetched least recently is forgotten when another one arrives.
RAFT_OBSERVERS_MAX = 10_000
