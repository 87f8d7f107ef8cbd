"""`Partition`: one partition replica a broker hosts — its `kraftcore.log.Log` and its role
(leader, follower, or neither while the partition has no leader) — and the replication
rules of a partition leader (kafka-broker-facts §C.1-§C.3; Kafka's `Partition`).

The role comes only from the metadata image (`apply`): the controller is the one writer of
leaders, ISRs and epochs. A leader changes its ISR only by asking the controller
(AlterPartition); until the answer is in the image it uses the *maximal* ISR (the
committed ISR plus the replicas it asked to add), as Kafka does.

As leader:

* every follower fetch records the follower's log end offset (its fetch offset), the fetch
  time and its last caught-up time: the fetch time when it fetched at the leader's log
  end offset, else the previous fetch time when it then had reached the leader's log end
  offset of that previous fetch;
* a follower that has not been caught up within `replica.lag.time.max.ms` is dropped from
  the ISR (`isr_to_shrink`); a follower that reaches the high watermark and the start
  offset of the leader's epoch is added back (`isr_to_expand`), when it is an active
  broker;
* the high watermark is the least log end offset over the maximal ISR, frozen while the ISR
  is smaller than the effective `min.insync.replicas` (min(setting, replication factor),
  KIP-966), and it never goes down. The arithmetic is `HighWatermarks`', shared by every
  partition the broker leads, so a fetch round costs what it moves;
* a follower fetch whose (last fetched epoch, fetch offset) is not in the leader's log is
  answered with the diverging epoch and where it ends (`divergence`), and the follower
  truncates there.

A compacted topic's partition (cleanup.policy includes compact, `compacted`) refuses a
producer's batch holding a record without a key, as Kafka's `LogValidator` does:
INVALID_RECORD, "Compacted topic cannot accept message without key in topic partition
<topic>-<partition>", nothing of the append written. The broker's log cleaner
(`kraftcore.runtime.log_cleaner`) cleans the partition's log, leader and follower alike.

Idempotent producers (`kraftcore.log.producer_state`): a leader checks each producer's
epoch and sequence before it appends, and answers a retried batch with the offset of its
first write; leader and follower both record every appended batch, so a new leader knows
its predecessor's producers. The state is snapshotted when the log closes and rebuilt from
the newest snapshot plus the log after it.

As follower, the log takes the leader's batches as they are (`append_as_follower`), its
high watermark is min(own log end offset, the leader's), and it truncates where the
leader says its log diverges — below its own high watermark too, when an unclean election
chose a leader without those records (the loss Kafka accepts for availability).

No clock, socket or thread here: time is the `now_ms` the caller passes.
"""

from kraftcore.epochs import UNDEFINED_EPOCH
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, KraftcoreError,
                              LogClosedError, OffsetOutOfRangeError, StorageError,
                              UnsupportedCompressionError)
from kraftcore import codec
from kraftcore.layout import (ATTRIBUTES_OFFSET, BATCH_LENGTH, BATCH_LENGTH_OFFSET, CRC_OFFSET,
                              CRC_START_OFFSET, LOG_OVERHEAD_BYTES, MAX_TIMESTAMP_OFFSET,
                              TIMESTAMP_TYPE_MASK)
from kraftcore.log import producer_state
from kraftcore.log.producer_state import (InvalidProducerEpochError, OutOfOrderSequenceError,
                                          batch_headers)
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["Partition", "PartitionError", "FollowerState", "LEADER", "FOLLOWER", "OFFLINE"]

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"
_E = ErrorCode


def _batch_sizes(data):
    """The sizes of the whole batches `data` holds, as their framing declares them (up to
    the first that does not fit; the log's checks refuse the rest)."""
    view = memoryview(data).cast("B")
    pos, end, sizes = 0, len(view), []
    while pos + LOG_OVERHEAD_BYTES <= end:
        size = LOG_OVERHEAD_BYTES + BATCH_LENGTH.unpack_from(view, pos + BATCH_LENGTH_OFFSET)[0]
        if size <= LOG_OVERHEAD_BYTES or size > end - pos:
            break  # not a whole batch: the log's checks call it corrupt
        sizes.append(size)
        pos += size
    return sizes


def stamp_log_append_time(data, now_ms):
    """`data`'s whole batches with their timestamp type set to LogAppendTime and their max
    timestamp to `now_ms` (what a topic with message.timestamp.type=LogAppendTime stores;
    Kafka's `LogValidator`), each CRC sealed again. Bytes past the last whole batch are
    kept as they are (the log's checks refuse them)."""
    out = bytearray(data)
    view = memoryview(out)
    pos = 0
    for size in _batch_sizes(out):
        if size >= CRC_START_OFFSET + 2 and len(out) - pos >= size:
            attributes = int.from_bytes(out[pos + ATTRIBUTES_OFFSET:pos + ATTRIBUTES_OFFSET + 2],
                                        "big")
            out[pos + ATTRIBUTES_OFFSET:pos + ATTRIBUTES_OFFSET + 2] = (
                attributes | TIMESTAMP_TYPE_MASK).to_bytes(2, "big")
            out[pos + MAX_TIMESTAMP_OFFSET:pos + MAX_TIMESTAMP_OFFSET + 8] = now_ms.to_bytes(
                8, "big", signed=True)
            crc = codec.crc32c(view[pos + CRC_START_OFFSET:pos + size])
            out[pos + CRC_OFFSET:pos + CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        pos += size
    del view
    return bytes(out)


class PartitionError(KraftcoreError):
    """A partition refused a request; `code` is the Kafka error code its answer carries."""

    def __init__(self, code, message):
        self.code = int(code)
        super().__init__(message)


class FollowerState:
    """What a leader knows of one follower (Kafka's `Replica` state)."""

    __slots__ = ("end_offset", "last_fetch_ms", "last_caught_up_ms", "leader_end_at_fetch",
                 "broker_epoch", "may_join")

    def __init__(self, caught_up_ms):
        self.end_offset = -1
        self.last_fetch_ms = -1
        self.last_caught_up_ms = caught_up_ms
        self.leader_end_at_fetch = -1
        self.broker_epoch = -1
        # its last fetch, made outside the ISR, reached the high watermark and the epoch's
        # start: it may join (once; a later fetch must show it again)
        self.may_join = False


class Partition:
    """One hosted partition: `log` (a `kraftcore.log.Log`), and its replication state."""

    def __init__(self, topic, topic_id, index, log, broker_id, tracker):
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.log = log
        self.broker_id = broker_id
        self.tracker = tracker  # the broker's `HighWatermarks`
        self.role = OFFLINE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas = ()
        self.isr = ()  # the committed ISR (the image's)
        self.maximal_isr = ()  # committed ISR plus pending additions (leader only)
        self.isr_in_flight = None  # the ISR an AlterPartition in flight asks for
        self.min_isr = 1
        self.log_append_time = False  # message.timestamp.type=LogAppendTime
        self.compacted = False  # cleanup.policy includes compact
        self.followers = {}
        self.epoch_start_offset = 0
        self.slot = None  # the tracker's slot while this broker leads
        self.producers = self._load_producers()
        self.messages_in = 0  # records and bytes appended from producers, for the metrics
        self.bytes_in = 0

    def _load_producers(self):
        """The idempotent producers' state: the newest producer snapshot at or below the
        log end offset, then the batches after it."""
        log = self.log
        offset, state = producer_state.read_snapshot(log.path, log.log_end_offset)
        self._snapshot_end = offset if offset else None
        offset = max(offset, log.log_start_offset)
        while offset < log.log_end_offset:
            read = log.read(offset, 1 << 20)
            if not len(read.records):
                break
            state.update(batch_headers(read.records))
            offset = read.next_offset
        return state

    def close_log(self):
        """Snapshot the producers' state at the log end offset and close the log (the
        next open reads the snapshot instead of the whole log)."""
        self.close()
        log = self.log
        if not log.closed:
            try:
                end = log.log_end_offset
                # a log that is empty, or unchanged since the snapshot it was opened from,
                # needs no new one
                if end > 0 and end != self._snapshot_end:
                    producer_state.write_snapshot(log.path, end, self.producers)
            finally:
                log.close()

    def __repr__(self):
        return (f"Partition({self.topic}-{self.index}, {self.role}, leader {self.leader_id}, "
                f"epoch {self.leader_epoch}, isr {list(self.isr)})")

    @property
    def name(self):
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self):
        return self.role == LEADER

    @property
    def high_watermark(self):
        return self.log.high_watermark

    @property
    def log_end_offset(self):
        return self.log.log_end_offset

    # ------------------------------------------------------------------ roles

    def apply(self, record, min_isr, now_ms):
        """Take the partition's state from its image record (a `PartitionRecord`). Returns
        "leader" / "follower" / "offline" when the role or leader epoch changed, else None."""
        self.min_isr = max(1, int(min_isr))
        new_epoch = record.leader_epoch != self.leader_epoch
        if (record.leader == self.broker_id and self.role == LEADER and not new_epoch
                and record.partition_epoch <= self.partition_epoch):
            # Nothing new for this partition (an image that changed other partitions), or
            # older than the state an AlterPartition answer already gave: keep the change
            # in flight and the maximal ISR with its pending additions. Dropping them here
            # lets the HW pass a follower the controller is about to commit into the ISR
            # (Kafka's makeLeader skips a partition epoch below its own, and KRaft's
            # applyDelta only visits the partitions the delta changed).
            if self.slot is not None:
                self._take_hw(self.tracker.set_min_isr(self.slot, self._effective_min_isr()))
            return None
        self.partition_epoch = record.partition_epoch
        self.replicas = tuple(record.replicas)
        self.isr = tuple(record.isr)
        if record.leader == self.broker_id:
            if self.role != LEADER or new_epoch:
                self._become_leader(record, now_ms)
                return LEADER
            self.isr_in_flight = None
            self._set_maximal_isr(self.isr)
            if self.slot is not None:
                self._take_hw(self.tracker.set_min_isr(self.slot, self._effective_min_isr()))
            return None
        role = FOLLOWER if record.leader >= 0 else OFFLINE
        changed = self.role != role or new_epoch or self.leader_id != record.leader
        self._stop_leading()
        self.role, self.leader_id, self.leader_epoch = role, record.leader, record.leader_epoch
        return role if changed else None

    def _effective_min_isr(self):
        return min(self.min_isr, max(1, len(self.replicas)))

    def _become_leader(self, record, now_ms):
        self._stop_leading()
        self.role, self.leader_id, self.leader_epoch = LEADER, self.broker_id, record.leader_epoch
        log = self.log
        self.epoch_start_offset = log.log_end_offset
        log.start_epoch(record.leader_epoch)
        in_isr = set(self.isr)
        self.followers = {r: FollowerState(now_ms if r in in_isr else 0)
                          for r in self.replicas if r != self.broker_id}
        self.isr_in_flight = None
        self.maximal_isr = self.isr
        self.slot = self.tracker.add(list(self.replicas), list(self.isr), self.broker_id,
                                     log.log_end_offset, log.high_watermark,
                                     self._effective_min_isr())
        # an ISR of the leader alone moves the high watermark to its log end at once
        self._take_hw(self.tracker.high_watermark(self.slot))

    def _stop_leading(self):
        if self.slot is not None:
            self.tracker.remove(self.slot)
            self.slot = None
        self.followers = {}
        self.isr_in_flight = None
        self.maximal_isr = ()

    def close(self):
        """Stop the role (the log stays open: the manager closes or deletes it)."""
        self._stop_leading()
        self.role = OFFLINE

    def _set_maximal_isr(self, isr):
        self.maximal_isr = tuple(isr)
        if self.slot is not None:
            self._take_hw(self.tracker.set_isr(self.slot, list(isr)))

    def _take_hw(self, hw):
        """Store a high watermark the tracker moved (None: it did not move)."""
        if hw is not None and hw > self.log.high_watermark:
            self.log.update_high_watermark(min(hw, self.log.log_end_offset))
            return True
        return False

    # ------------------------------------------------------------------ leader

    def check_leader(self, current_leader_epoch=-1):
        """Raise unless this replica leads, in `current_leader_epoch` when one is given."""
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch > self.leader_epoch:
                raise PartitionError(_E.UNKNOWN_LEADER_EPOCH, (
                    f"{self.name}: leader epoch {current_leader_epoch} is newer than this "
                    f"broker's {self.leader_epoch}; its metadata is behind"))
            raise PartitionError(_E.FENCED_LEADER_EPOCH, (
                f"{self.name}: leader epoch {current_leader_epoch} is fenced; the current "
                f"one is {self.leader_epoch}"))
        if self.role != LEADER:
            raise PartitionError(_E.NOT_LEADER_OR_FOLLOWER, (
                f"broker {self.broker_id} is not the leader of {self.name} (leader "
                f"{self.leader_id}, epoch {self.leader_epoch})"))

    def append_as_leader(self, data, required_acks, now_ms=None):
        """Append a producer's batches (bytes): offsets are assigned and the leader epoch
        stamped by the log (and, for a LogAppendTime topic, `now_ms` as their timestamp). Returns (base offset, high watermark moved). With acks=all an
        ISR below the effective min ISR refuses before anything is written
        (NOT_ENOUGH_REPLICAS)."""
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self._effective_min_isr():
            raise PartitionError(_E.NOT_ENOUGH_REPLICAS, (
                f"{self.name}: the ISR {list(self.isr)} is smaller than min.insync.replicas "
                f"{self._effective_min_isr()}"))
        log = self.log
        if self.log_append_time and now_ms is not None:
            data = stamp_log_append_time(data, now_ms)
        headers = batch_headers(data)
        limit = log.config.batch_bytes_max
        if any(size > limit for size in _batch_sizes(data)):
            raise PartitionError(_E.MESSAGE_TOO_LARGE, (
                f"{self.name}: a batch is larger than message.max.bytes ({limit})"))
        if self.compacted:
            self._check_keys(data)
        try:
            if headers and headers[0][2] >= 0:  # an idempotent producer's batch
                _, last, pid, epoch, seq, _, delta = headers[0]
                duplicate = self.producers.check(pid, epoch, seq, delta + 1)
                if duplicate is not None:
                    return duplicate, False  # a retry: answered with the first write's offset
            base = log.append(data, leader_epoch=self.leader_epoch, sync=False)
        except OutOfOrderSequenceError as exc:
            raise PartitionError(_E.OUT_OF_ORDER_SEQUENCE_NUMBER, f"{self.name}: {exc}") from None
        except InvalidProducerEpochError as exc:
            raise PartitionError(_E.INVALID_PRODUCER_EPOCH, f"{self.name}: {exc}") from None
        except CorruptRecordError as exc:
            raise PartitionError(_E.CORRUPT_MESSAGE, f"{self.name}: {exc}") from None
        except UnsupportedCompressionError as exc:
            raise PartitionError(_E.UNSUPPORTED_COMPRESSION_TYPE, f"{self.name}: {exc}") from None
        except InvalidAppendError as exc:
            raise PartitionError(_E.INVALID_RECORD, f"{self.name}: {exc}") from None
        except (LogClosedError, StorageError) as exc:
            raise PartitionError(_E.KAFKA_STORAGE_ERROR, f"{self.name}: {exc}") from None
        offset = base
        assigned = []
        for _, last, pid, epoch, seq, ts, delta in headers:
            assigned.append((offset, offset + delta, pid, epoch, seq, ts, delta))
            offset += delta + 1
        self.producers.update(assigned)
        self.messages_in += offset - base
        self.bytes_in += len(data)
        moved = self._take_hw(self.tracker.on_leader_append(self.slot, log.log_end_offset))
        return base, moved

    def _check_keys(self, data):
        """Refuse a record without a key (Kafka's `LogValidator.validateKey`). Bytes that do
        not decode are left to the log's checks, which answer with their own error."""
        try:
            batches = codec.decode_batches(data)
        except (CorruptRecordError, UnsupportedCompressionError):
            return
        for batch in batches:
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    raise PartitionError(_E.INVALID_RECORD, (
                        "Compacted topic cannot accept message without key in topic "
                        f"partition {self.name}"))

    def enough_replicas(self):
        """Whether the maximal ISR still meets the effective min ISR (an acks=all produce
        whose records the HW passed answers NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise)."""
        return len(self.maximal_isr) >= self._effective_min_isr()

    def divergence(self, last_fetched_epoch, fetch_offset):
        """(epoch, end offset) where a follower's log diverges from this leader's, or None.
        `last_fetched_epoch` -1 means the follower names none (no check)."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch == UNDEFINED_EPOCH and self.log.latest_epoch < 0:
            return None
        if end < fetch_offset or epoch < last_fetched_epoch:
            return epoch, end
        return None

    def on_follower_fetch(self, replica_id, fetch_offset, broker_epoch, now_ms):
        """Record a follower's fetch (Kafka's `updateFollowerFetchState`); the caller then
        moves the high watermark of every fetched partition in one tracker call. Returns
        whether the follower may now join the ISR (`isr_to_expand` names it)."""
        state = self.followers.get(replica_id)
        if state is None:
            raise PartitionError(_E.NOT_LEADER_OR_FOLLOWER, (
                f"broker {replica_id} is not a replica of {self.name} "
                f"(replicas {list(self.replicas)})"))
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif state.leader_end_at_fetch >= 0 and fetch_offset >= state.leader_end_at_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        state.leader_end_at_fetch = leader_end
        state.broker_epoch = broker_epoch
        state.may_join = (replica_id not in self.maximal_isr
                          and fetch_offset >= self.log.high_watermark
                          and fetch_offset >= self.epoch_start_offset)
        return state.may_join

    def isr_to_shrink(self, now_ms, lag_max_ms):
        """The ISR without the followers that have not caught up within `lag_max_ms`, or
        None when every member is caught up (or an ISR change is in flight)."""
        if self.role != LEADER or self.isr_in_flight is not None:
            return None
        leader_end = self.log.log_end_offset
        keep = []
        for r in self.maximal_isr:
            state = self.followers.get(r)
            if state is not None and state.end_offset != leader_end \
                    and now_ms - state.last_caught_up_ms > lag_max_ms:
                continue
            keep.append(r)
        if len(keep) == len(self.maximal_isr):
            return None
        return keep

    def isr_to_expand(self, eligible):
        """The committed ISR plus the caught-up followers `eligible(broker_id, epoch)`
        accepts, or None when there is none to add (or a change is in flight). A follower
        the maximal ISR still holds from a change whose outcome is unknown (see
        `end_isr_change`) is asked for again: it is not in the committed ISR.

        Only a fetch shows a follower caught up (Kafka expands the ISR on a follower's
        fetch): a follower whose last known offset still equals a frozen high watermark
        after it stopped fetching (SIGSTOPped, say) and was dropped is not taken back
        until it fetches again."""
        if self.role != LEADER or self.isr_in_flight is not None:
            return None
        hw = self.log.high_watermark
        add = [r for r, s in self.followers.items()
               if r not in self.isr and (s.may_join or r in self.maximal_isr)
               and s.end_offset >= hw and s.end_offset >= self.epoch_start_offset
               and eligible(r, s.broker_epoch)]
        if not add:
            return None
        for r in add:
            self.followers[r].may_join = False
        return list(self.isr) + sorted(add)

    def begin_isr_change(self, isr):
        """An AlterPartition asking for `isr` goes out: the maximal ISR includes additions
        now, and removals only once the controller has committed them."""
        self.isr_in_flight = tuple(isr)
        self._set_maximal_isr(tuple(dict.fromkeys((*self.maximal_isr, *isr))))

    def end_isr_change(self, leader_epoch=None, partition_epoch=None, isr=None, reset=False):
        """The AlterPartition was answered (or timed out). With the answer's state (same
        leader epoch), the ISR is taken from it; with `reset` (the controller refused the
        change outright) the maximal ISR is the committed one again; otherwise (another
        error, or a timeout) the next check may send a change again, and the maximal ISR
        keeps what it had (see below)."""
        self.isr_in_flight = None
        if self.role != LEADER:
            return
        if isr is not None and leader_epoch == self.leader_epoch \
                and partition_epoch >= self.partition_epoch:
            self.partition_epoch = partition_epoch
            self.isr = tuple(isr)
            self._set_maximal_isr(self.isr)
        elif reset:
            # the controller said the change was not made (INELIGIBLE_REPLICA,
            # OPERATION_NOT_ATTEMPTED): back to the committed ISR, as Kafka does
            self._set_maximal_isr(self.isr)
        # Without the answer's state (a refusal, or no answer at all: a timeout) the
        # maximal ISR keeps its pending additions: an unanswered request may have been
        # committed, and the HW must not pass a replica the controller may have put in the
        # ISR (Kafka keeps the pending state until an answer or a newer partition epoch).
        # The next image with a newer partition epoch gives the committed ISR; a pending
        # member that lags is dropped again by the next shrink check.

    # ------------------------------------------------------------------ follower

    def append_as_follower(self, data, leader_high_watermark):
        """Append batches fetched from the leader and take its high watermark (at most our
        log end offset). Returns whether the high watermark moved."""
        log = self.log
        if len(data):
            log.append_as_follower(data, sync=False)
            self.producers.update(batch_headers(data))
        return self.follower_high_watermark(leader_high_watermark)

    def follower_high_watermark(self, leader_high_watermark):
        log = self.log
        hw = min(log.log_end_offset, leader_high_watermark)
        if hw > log.high_watermark:
            log.update_high_watermark(hw)
            return True
        return False

    def truncate_to(self, offset):
        """Remove this follower's records from `offset` on (the leader's log diverges
        there). Below the high watermark only after an unclean election; returns the
        number of offsets removed."""
        log = self.log
        offset = max(offset, log.log_start_offset)
        removed = max(0, log.log_end_offset - offset)
        if removed and log.high_watermark > offset:
            log.update_high_watermark(offset)
        log.truncate_to(offset)  # also drops an epoch entry past the end with no record
        if removed:
            self.producers = self._load_producers()
        return removed

    def truncate_for_divergence(self, epoch, end_offset):
        """Truncate where the leader says this follower's log diverges (Kafka's
        `getOffsetForTruncation`): to the end of `epoch` in both logs, the smaller; to the
        high watermark when the leader knows no such epoch (-1). Returns (offset, records
        removed)."""
        log = self.log
        if epoch < 0 or end_offset < 0:
            offset = log.high_watermark
        else:
            own_epoch, own_end = log.end_offset_for_epoch(epoch)
            offset = end_offset if own_end < 0 else min(end_offset, own_end)
        offset = min(offset, log.log_end_offset)
        return offset, self.truncate_to(offset)

    def restart_at(self, offset):
        """Drop the whole log and start empty at `offset` (the leader's log starts past
        this follower's end)."""
        self.log.truncate_fully_and_start_at(offset)
        self.producers = self._load_producers()

    def fetch_position(self):
        """(fetch offset, last fetched epoch) of this follower's next fetch."""
        return self.log.log_end_offset, self.log.latest_epoch

    def read(self, offset, bytes_max, *, committed, region_bytes_min=None):
        """A read for a fetch (`Log.read`): `OffsetOutOfRangeError` outside the log's range
        becomes OFFSET_OUT_OF_RANGE."""
        try:
            return self.log.read(offset, bytes_max, committed=committed,
                                 region_bytes_min=region_bytes_min)
        except OffsetOutOfRangeError as exc:
            raise PartitionError(_E.OFFSET_OUT_OF_RANGE, f"{self.name}: {exc}") from None
