"""`ReplicaFetchers`: a follower broker's fetchers, one asyncio task per source broker (the
leader of some of its partitions), each sending one Fetch for all the partitions it
follows there (Kafka's `ReplicaFetcherThread`, kafka-broker-facts §C.3, §C.4).

A fetch carries, per partition, the follower's log end offset as fetch offset, the epoch of
its last record (`LastFetchedEpoch`) and the leader epoch it believes current; the
follower's id and broker epoch go in `ReplicaState` (Fetch v15+). What comes back is
applied through the `ReplicaManager`:

* records: appended as they are (`Partition.append_as_follower`), and the high watermark
  becomes min(own log end offset, the leader's);
* `DivergingEpoch`: the log is truncated to where the leader says it diverges, and the
  next fetch resumes there;
* OFFSET_OUT_OF_RANGE with a fetch offset below the leader's log start offset: the log
  restarts empty at the leader's log start offset; above its log end: truncated to it;
* NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_*: the
  partition waits for the metadata image to say who leads;
* a failed request (connection, timeout): the fetcher backs off
  `replica.fetch.backoff.ms`.

A partition whose leader or leader epoch changed while its fetch was in flight ignores that
answer. `update()` (after each new image) starts fetchers for new leaders and stops those
with nothing left to fetch.
"""

import asyncio
import logging

from kraftcore.errors import KraftcoreError
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode

log = logging.getLogger("kraftcore.runtime")

FETCH_VERSION = 17
_E = ErrorCode
_WAIT_FOR_METADATA = frozenset((_E.NOT_LEADER_OR_FOLLOWER, _E.FENCED_LEADER_EPOCH,
                                _E.UNKNOWN_LEADER_EPOCH, _E.UNKNOWN_TOPIC_OR_PARTITION,
                                _E.UNKNOWN_TOPIC_ID))


class ReplicaFetchers:
    """The fetchers of one broker. `pool` is a `kraftcore.net.PeerPool` keyed by broker id
    (addresses from the image's registrations), `broker_epoch()` the broker's current
    registration epoch."""

    def __init__(self, broker_id, replicas, pool, config, broker_epoch):
        self.broker_id = broker_id
        self.replicas = replicas
        self.pool = pool
        self.config = config
        self.broker_epoch = broker_epoch
        self._listener_name = getattr(config, "inter_broker_listener_name", None)
        self._tasks = {}  # leader id -> asyncio task
        self._wake = {}  # leader id -> asyncio.Event
        self.closed = False

    def update(self, image):
        """Follow the image: fetchers for every broker that leads partitions this one
        follows, addresses from their registrations."""
        if self.closed:
            return
        targets = self.replicas.fetch_targets()
        for leader_id in targets:
            broker = image.brokers.get(leader_id)
            if broker is not None and broker.end_points:
                # the leader's endpoint on the inter-broker listener (else its first)
                ep = next((e for e in broker.end_points if e.name == self._listener_name),
                          broker.end_points[0])
                self.pool.update(leader_id, ep.host, ep.port)
            if leader_id not in self._tasks:
                self._wake[leader_id] = asyncio.Event()
                self._tasks[leader_id] = asyncio.get_running_loop().create_task(
                    self._run(leader_id), name=f"replica-fetcher-{self.broker_id}-{leader_id}")
            self._wake[leader_id].set()
        for leader_id in [b for b in self._tasks if b not in targets]:
            self._wake[leader_id].set()  # it finds nothing to fetch and ends

    async def close(self):
        self.closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing
                pass
        self._tasks.clear()

    async def _run(self, leader_id):
        config = self.config
        try:
            while not self.closed:
                partitions = self.replicas.fetch_targets().get(leader_id)
                if not partitions:
                    break
                sent = [(p, p.leader_epoch, *p.fetch_position()) for p in partitions]
                body = self._request(sent)
                try:
                    response = await self.pool.send(
                        leader_id, body, FETCH_VERSION,
                        timeout_ms=config.replica_fetch_wait_ms_max + 30_000)
                except (KraftcoreError, OSError) as exc:
                    log.debug("broker %s: fetch from broker %s failed: %s", self.broker_id,
                              leader_id, exc)
                    await self._backoff(leader_id)
                    continue
                if response.error_code:
                    await self._backoff(leader_id)
                    continue
                if self._apply(sent, response):
                    await self._backoff(leader_id)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a fetcher's bug must not pass silently
            log.exception("broker %s: the fetcher from broker %s failed", self.broker_id,
                          leader_id)
        finally:
            if self._tasks.get(leader_id) is asyncio.current_task():
                del self._tasks[leader_id]
                self._wake.pop(leader_id, None)

    async def _backoff(self, leader_id):
        event = self._wake.get(leader_id)
        if event is None:
            return
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), self.config.replica_fetch_backoff_ms / 1000)
        except asyncio.TimeoutError:
            pass

    def _request(self, sent):
        cls = m.FetchRequest
        config = self.config
        topics = {}
        for partition, epoch, offset, last_epoch in sent:
            topics.setdefault(partition.topic_id, []).append(cls.FetchPartition(
                partition=partition.index, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=partition.log.log_start_offset,
                partition_max_bytes=config.replica_fetch_bytes_max))
        return cls(replica_state=cls.ReplicaState(replica_id=self.broker_id,
                                                  replica_epoch=self.broker_epoch()),
                   max_wait_ms=config.replica_fetch_wait_ms_max, min_bytes=1,
                   max_bytes=config.replica_fetch_response_bytes_max, isolation_level=0,
                   session_id=0, session_epoch=-1,
                   topics=[cls.FetchTopic(topic_id=t, partitions=parts)
                           for t, parts in topics.items()])

    def _apply(self, sent, response):
        """Apply a fetch response; True when the fetcher should back off (every partition
        answered with an error)."""
        answers = {}
        for topic in response.responses:
            for p in topic.partitions:
                answers[(topic.topic_id, p.partition_index)] = p
        replicas = self.replicas
        errors = 0
        for partition, epoch, offset, _ in sent:
            p = answers.get((partition.topic_id, partition.index))
            current = replicas.partitions.get((partition.topic_id, partition.index))
            if p is None or current is not partition or partition.leader_epoch != epoch \
                    or partition.role != "follower":
                continue
            if partition.log.log_end_offset != offset:
                continue  # truncated meanwhile
            try:
                if p.error_code == _E.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(partition, offset, p)
                elif p.error_code:
                    errors += 1
                    if p.error_code not in _WAIT_FOR_METADATA:
                        log.warning("broker %s: fetching %s from broker %s: error %s",
                                    self.broker_id, partition.name, partition.leader_id,
                                    p.error_code)
                elif p.diverging_epoch.epoch >= 0 or p.diverging_epoch.end_offset >= 0:
                    d = p.diverging_epoch
                    at, removed = replicas.follower_truncate(partition, d.epoch, d.end_offset)
                    log.info("broker %s: %s diverges from leader %s (its epoch %s ends at %s): "
                             "truncated to offset %s, %s offsets removed", self.broker_id,
                             partition.name, partition.leader_id, d.epoch, d.end_offset, at,
                             removed)
                else:
                    replicas.follower_append(partition, p.records or b"", p.high_watermark)
            except KraftcoreError as exc:
                errors += 1
                log.warning("broker %s: could not apply the fetch of %s from broker %s: %s",
                            self.broker_id, partition.name, partition.leader_id, exc)
        return errors > 0 and errors == len(sent)

    def _out_of_range(self, partition, offset, p):
        if p.log_start_offset >= 0 and offset < p.log_start_offset:
            partition.restart_at(p.log_start_offset)
        elif p.high_watermark >= 0 and offset > p.high_watermark:
            self.replicas.follower_truncate(partition, -1, -1)  # to its own high watermark
