"""The data-plane simulator's invariants (`kraftcore.sim.data_plane`), checked after every
event, and the counters of what the faults were allowed to cost.

What the checker keeps:

* a *mirror* of every live replica's log: [(leader epoch, record value)] by offset, read
  from the real `kraftcore.log.Log` (only the tail that changed since the last check: a log
  either grows or is truncated within one event, and the record before the old end is
  re-read to catch a truncation followed by an append);
* per partition the *committed log*: the records below the highest high watermark any
  replica has shown. It only grows, one replica's records at a time, and every replica must
  agree with it below its own high watermark.

The invariants (DESIGN.md, kafka-broker-facts §C):

1. a leader's high watermark never decreases within a leader epoch;
2. every record below the committed log's end (so every acks=all acknowledgement, and every
   record a consumer read) is held, with the same offset and bytes, by every replica the
   controller's committed image names in the ISR — counting only a broker's *current*
   incarnation: a broker that crashed and lost unflushed writes is in the ISR under its old
   broker epoch until its new registration takes it out (KIP-903), and holds nothing until
   then. An acks=all acknowledgement must name an offset below the committed end whose
   record is the acknowledged one;
3. at most one broker leads a partition in one leader epoch, and it is the leader the
   controller committed for that epoch;
4. a consumer reads only records below the leader's high watermark, and only committed
   ones (invariant 2 then says they are never lost);
5. replicas agree on the records (offset, leader epoch, bytes) below their high watermark.

What is assumed (the fault model): brokers run with fsync "never", so a crash loses every
write after the last flush (a roll, a close or a recovery flushes). Kafka itself loses
acknowledged data when every ISR member loses its unflushed copy at once and a replica
without it is then elected. kraftcore's controller never elects a replica outside the ISR
unless unclean election is enabled: when the last ISR member is fenced, the ISR becomes
empty and the partition goes offline (kraftcore.controller.replication). So, with unclean
election off, invariants 2 and 5 must hold whatever the number of simultaneous crashes;
the cost of such crashes is availability, counted as `offline_partitions` (partitions left
with an empty ISR). With unclean election on (scenario e), a replica outside the ISR may
lead: the committed records it lacks are *lost*; the checker then rebases the committed log
on the new leader's, and counts the lost records (`lost_records`, `lost_acked`) instead of
failing.
"""

from kraftcore.metadata.partition import RECOVERING
from kraftcore.sim.state_machine import SimViolation

__all__ = ["DataChecker", "SimViolation"]

_READ_BYTES = 1 << 20


def read_records(log, start):
    """[(offset, leader epoch, value)] of the log from `start` (a batch boundary or inside
    one: records before `start` are left out) to its end."""
    out = []
    offset = start
    end = log.log_end_offset
    while offset < end:
        read = log.read(offset, _READ_BYTES)
        if not len(read.records):
            break
        for batch in read.batches():
            epoch = batch.partition_leader_epoch
            for record in batch.records:
                if record.offset >= start:
                    out.append((record.offset, epoch, bytes(record.value)))
        offset = read.next_offset
    return out


class _Mirror:
    __slots__ = ("log", "entries", "agree")

    def __init__(self, log):
        self.log = log
        self.entries = []  # [(epoch, value)] for offsets 0..len-1
        self.agree = 0  # length of the common prefix with the committed log


class DataChecker:
    def __init__(self, sim):
        self.sim = sim
        self.mirrors = {}  # (broker id, incarnation, topic id, index) -> _Mirror
        self.committed = {}  # (topic id, index) -> [(epoch, value)]
        self.leader_hw = {}  # (topic id, index, leader epoch) -> highest HW seen
        self.epoch_leader = {}  # (topic id, index, leader epoch) -> (broker, incarnation)
        self.controller_leader = {}  # (topic id, index, leader epoch) -> leader id
        self.seen_image = None
        # what the invariants read, as of the last check: a check that would read the same
        # is skipped
        self._signature = None
        self._committed_total = 0
        self.unclean = set()  # partitions an unclean election has touched
        # counted costs
        self.lost_records = 0
        self.lost_acked = 0
        self.lost_values = set()
        self.consumed = 0
        self.checks = 0
        self.rebases = 0

    # ------------------------------------------------------------------ helpers

    def fail(self, message):
        raise SimViolation(f"t={self.sim.scheduler.now_ms}: {message}")

    def _mirror(self, broker, partition):
        key = (broker.node_id, broker.incarnation, partition.topic_id, partition.index)
        mirror = self.mirrors.get(key)
        log = partition.log
        if mirror is None or mirror.log is not log:
            mirror = self.mirrors[key] = _Mirror(log)
            self._refresh(mirror, 0)
            return mirror
        entries = mirror.entries
        leo = log.log_end_offset
        n = len(entries)
        if leo == n:
            return mirror
        if leo < n:
            del entries[leo:]
            mirror.agree = min(mirror.agree, leo)
            return mirror
        # grew: re-read from the record before the old end (a truncation followed by an
        # append within one event would change it)
        self._refresh(mirror, max(0, n - 1))
        return mirror

    def _refresh(self, mirror, start):
        records = read_records(mirror.log, start)
        entries = mirror.entries
        if start < len(entries):
            first = records[0] if records else None
            if first is None or first[0] != start or (first[1], first[2]) != entries[start]:
                # the tail changed under us: read the whole log again
                records = read_records(mirror.log, 0)
                start = 0
            del entries[start:]
            mirror.agree = min(mirror.agree, start)
        expected = len(entries)
        for offset, epoch, value in records:
            if offset != expected:
                self.fail(f"log {mirror.log.path} holds offset {offset} where {expected} "
                          "was expected (a gap in the log)")
            entries.append((epoch, value))
            expected += 1

    @staticmethod
    def _agree(mirror, committed):
        entries = mirror.entries
        i = mirror.agree
        limit = min(len(entries), len(committed))
        while i < limit and entries[i] == committed[i]:
            i += 1
        mirror.agree = i
        return i

    # ------------------------------------------------------------------ the check

    def check(self):
        """Every invariant, now (after an event)."""
        self.checks += 1
        sim = self.sim
        image = sim.controller.image
        if image is not self.seen_image:
            self._on_image(image)
        signature = [image]
        append = signature.append
        for broker in sim.brokers.values():
            replicas = broker.replicas
            if replicas is None:
                append(None)
                continue
            for partition in replicas.partitions.values():
                log = partition.log
                append((log, log._leo, log._hw, log._closed, partition.role,
                        partition.leader_epoch))
        signature.append(self._committed_total)
        if signature == self._signature:
            return  # nothing any invariant reads has moved since the last check
        self._signature = signature
        live = []  # (broker, partition, mirror)
        for broker in sim.brokers.values():
            replicas = broker.replicas
            if replicas is None:
                continue
            for partition in replicas.partitions.values():
                if partition.log.closed:
                    continue
                live.append((broker, partition, self._mirror(broker, partition)))
        for broker, partition, mirror in live:
            key = (partition.topic_id, partition.index)
            if partition.role == "leader":
                self._check_leader(broker, partition)
            committed = self.committed.setdefault(key, [])
            hw = partition.log.high_watermark
            agree = self._agree(mirror, committed)
            if agree < min(hw, len(committed)):
                self._diverged(broker, partition, mirror, committed, agree, hw)
                committed = self.committed[key]
                agree = self._agree(mirror, committed)
            if hw > len(committed):
                if agree < len(committed):
                    self._diverged(broker, partition, mirror, committed, agree, hw)
                    committed = self.committed[key]
                    agree = self._agree(mirror, committed)
                if agree >= len(committed):
                    committed.extend(mirror.entries[len(committed):hw])
        self._check_isr(image, live)
        total = sum(len(c) for c in self.committed.values())
        if total != self._committed_total:
            self._committed_total = total
            self._signature = None  # check again after the next event

    def _check_leader(self, broker, partition):
        key = (partition.topic_id, partition.index, partition.leader_epoch)
        who = (broker.node_id, broker.incarnation)
        other = self.epoch_leader.setdefault(key, who)
        if other != who:
            self.fail(f"two leaders of {partition.name} in leader epoch "
                      f"{partition.leader_epoch}: broker {other[0]} (incarnation {other[1]}) "
                      f"and broker {who[0]} (incarnation {who[1]})")
        chosen = self.controller_leader.get(key)
        if chosen is not None and chosen != broker.node_id:
            self.fail(f"broker {broker.node_id} leads {partition.name} in epoch "
                      f"{partition.leader_epoch}, but the controller chose broker {chosen}")
        hw = partition.log.high_watermark
        last = self.leader_hw.get(key, -1)
        if hw < last:
            self.fail(f"the high watermark of {partition.name} went down from {last} to {hw} "
                      f"within leader epoch {partition.leader_epoch} (leader {broker.node_id})")
        self.leader_hw[key] = hw

    def _on_image(self, image):
        self.seen_image = image
        for topic in image.topics.values():
            for index, record in topic.partitions.items():
                if record.leader >= 0:
                    key = (topic.topic_id, index, record.leader_epoch)
                    chosen = self.controller_leader.setdefault(key, record.leader)
                    if chosen != record.leader:
                        self.fail(f"the controller named two leaders of {topic.name}-{index} "
                                  f"in epoch {record.leader_epoch}: {chosen} and "
                                  f"{record.leader}")
                if record.leader_recovery_state == RECOVERING:
                    self.unclean.add((topic.topic_id, index))

    def _diverged(self, broker, partition, mirror, committed, agree, hw):
        """A replica disagrees with the committed log below its high watermark (or below the
        committed end it is extending). After an unclean election, the loss it stands for
        is counted and the committed log follows the leader; otherwise a violation."""
        key = (partition.topic_id, partition.index)
        if key in self.unclean and partition.role == "leader":
            self._rebase(key, mirror, agree)
            return
        if key in self.unclean:
            # a follower still holding what the unclean leader lacks: it truncates when it
            # fetches; its high watermark is stale, not a committed record's loss
            return
        at = agree
        mine = mirror.entries[at] if at < len(mirror.entries) else None
        theirs = committed[at] if at < len(committed) else None
        self.fail(f"broker {broker.node_id} disagrees with the committed log of "
                  f"{partition.name} at offset {at} (its high watermark {hw}, committed end "
                  f"{len(committed)}): it holds {_show(mine)}, the committed log "
                  f"{_show(theirs)}")

    def _rebase(self, key, mirror, agree):
        committed = self.committed[key]
        lost = committed[agree:]
        self.rebases += 1
        self.lost_records += len(lost)
        acked = self.sim.acked_values
        for _, value in lost:
            self.lost_values.add(value)
            if value in acked:
                self.lost_acked += 1
        sim = self.sim
        sim.note(f"unclean leader: {len(lost)} committed records of partition "
                 f"{sim.partition_name(key)} lost from offset {agree} "
                 f"({sum(v in acked for _, v in lost)} acknowledged)")
        del committed[agree:]
        for m in self.mirrors.values():
            m.agree = min(m.agree, agree)

    def _check_isr(self, image, live):
        by_key = {}
        for broker, partition, mirror in live:
            by_key[(broker.node_id, partition.topic_id, partition.index)] = (broker, mirror)
        for topic in image.topics.values():
            for index, record in topic.partitions.items():
                key = (topic.topic_id, index)
                if key in self.unclean:
                    continue
                committed = self.committed.get(key)
                if not committed:
                    continue
                end = len(committed)
                for b in record.isr:
                    found = by_key.get((b, topic.topic_id, index))
                    if found is None:
                        continue
                    broker, mirror = found
                    registration = image.brokers.get(b)
                    if registration is None or registration.broker_epoch != broker.epoch:
                        continue  # the ISR names an older incarnation of this broker
                    if self._agree(mirror, committed) < end:
                        self.fail(
                            f"broker {b} is in the committed ISR {list(record.isr)} of "
                            f"{topic.name}-{index} (partition epoch {record.partition_epoch})"
                            f" but lacks committed records: it agrees with the committed log "
                            f"up to offset {mirror.agree} of {end} (its log end "
                            f"{len(mirror.entries)}: "
                            f"{_show(mirror.entries[mirror.agree]) if mirror.agree < len(mirror.entries) else 'nothing'}"
                            f" vs committed {_show(committed[mirror.agree])})")

    # ------------------------------------------------------------------ client events

    def on_ack(self, key, offset, values, acks):
        """An acknowledgement of `values` at `offset` (acks=all checked against the
        committed log; acks=1 recorded only)."""
        if acks != -1 or key in self.unclean:
            return
        committed = self.committed.get(key, [])
        for i, value in enumerate(values):
            o = offset + i
            if o >= len(committed):
                self.fail(f"an acks=all acknowledgement of {value!r} at offset {o} of "
                          f"{self.sim.partition_name(key)}, but the committed log ends at "
                          f"{len(committed)}")
            if committed[o][1] != value:
                self.fail(f"an acks=all acknowledgement of {value!r} at offset {o} of "
                          f"{self.sim.partition_name(key)}, but the committed record there "
                          f"is {_show(committed[o])}")

    def on_consume(self, key, records, high_watermark, leader_hw):
        """A consumer's read: [(offset, epoch, value)] and the high watermarks of the answer
        and of the leader when it answered."""
        # The answer may come in the very event that moved the high watermark (a paused
        # leader taking up its queue when it resumes): bring the committed log up to date
        # first, as after any event.
        self.check()
        committed = self.committed.get(key, [])
        for offset, epoch, value in records:
            self.consumed += 1
            if offset >= high_watermark or offset >= leader_hw:
                self.fail(f"a consumer read offset {offset} of {self.sim.partition_name(key)}"
                          f" at or above the high watermark ({high_watermark} in the answer,"
                          f" {leader_hw} at the leader)")
            if key in self.unclean:
                continue
            if offset >= len(committed) or committed[offset] != (epoch, value):
                self.fail(f"a consumer read {_show((epoch, value))} at offset {offset} of "
                          f"{self.sim.partition_name(key)}, which is not the committed "
                          f"record ({_show(committed[offset]) if offset < len(committed) else 'none'})")

    # ------------------------------------------------------------------ the end

    def final_check(self):
        """Every mirror equals its log read whole (the incremental reads missed nothing)."""
        for broker in self.sim.brokers.values():
            if broker.replicas is None:
                continue
            for partition in broker.replicas.partitions.values():
                if partition.log.closed:
                    continue
                mirror = self._mirror(broker, partition)
                whole = [(e, v) for _, e, v in read_records(partition.log, 0)]
                if whole != mirror.entries:
                    self.fail(f"the checker's mirror of {partition.name} on broker "
                              f"{broker.node_id} differs from its log")

    def duplicates(self, key):
        """Values that appear more than once in the committed log of `key`."""
        seen, dups = set(), 0
        for _, value in self.committed.get(key, ()):
            if value in seen:
                dups += 1
            seen.add(value)
        return dups


def _show(entry):
    if entry is None:
        return "nothing"
    epoch, value = entry
    return f"{value.decode(errors='replace')!r} (epoch {epoch})"
