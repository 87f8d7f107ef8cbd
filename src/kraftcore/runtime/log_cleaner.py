"""`LogCleaner`: a broker's cleaner of the compacted partitions it hosts, leader and follower
alike (Kafka's `LogCleaner` with one cleaner thread), driven from the event loop.

When idle it looks every `log.cleaner.backoff.ms` (Kafka's 15 s) at the partitions whose
topic is compacted (`ReplicaManager.compacted_partitions`), judges each log with its
topic's settings (`kraftcore.log.cleaner.cleanable`: min.cleanable.dirty.ratio,
min.compaction.lag.ms) and cleans the dirtiest one worth it; after a clean it looks again
at once, as Kafka's cleaner thread sleeps only when no log needed cleaning. The choice is
made on the event loop (the partitions and the image live there); the clean itself
(`kraftcore.log.cleaner.clean`: reading, rewriting and syncing segment files) runs in one
worker thread, so requests, fetches (sendfile regions of segment files included) and
replica fetchers go on while it runs; the log's lock is held only for the swaps.

Each finished clean is logged with the offsets it covered and the bytes before and after.
A clean that fails — a batch that does not read back, a storage error — is logged as an
error and the partition is not cleaned again until its log is opened again (Kafka's
uncleanable partitions); nothing of it was changed but complete swaps. `close()` aborts a
clean in progress and waits for it (it stops at its next read).
"""

import asyncio
import concurrent.futures
import logging
import time

from kraftcore.errors import CleanAbortedError, KraftcoreError
from kraftcore.log import cleaner

log = logging.getLogger("kraftcore.runtime")

__all__ = ["LogCleaner"]


class LogCleaner:
    def __init__(self, node_id, replicas, clock, *, backoff_ms=15_000):
        self.node_id = node_id
        self.replicas = replicas
        self.clock = clock
        self.backoff_ms = backoff_ms
        self.cleans = 0  # cleans finished since start
        self.uncleanable = {}  # (topic, partition) -> the Log whose clean failed
        self._executor = None
        self._task = None
        self._running = None  # (partition, future) of the clean in progress
        self._closed = False

    def start(self):
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"kraftcore-log-cleaner-{self.node_id}")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self):
        while not self._closed:
            try:
                cleaned = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never stop cleaning the other logs
                log.error("broker %s: the log cleaner failed: %s: %s", self.node_id,
                          type(exc).__name__, exc, exc_info=exc)
                cleaned = False
            if not cleaned and not self._closed:
                await asyncio.sleep(self.backoff_ms / 1000)

    def _pick(self, now_ms):
        """(partition, CleanerConfig, producers' last offsets) of the dirtiest log worth
        cleaning, or None."""
        best, best_ratio = None, -1.0
        for partition, settings, last_offsets in self.replicas.compacted_partitions():
            key = (partition.topic, partition.index)
            if self.uncleanable.get(key) is partition.log:
                continue
            try:
                config = cleaner.CleanerConfig(**settings)
                offered = cleaner.cleanable(partition.log.clean_state(), now_ms, config)
            except KraftcoreError:
                continue  # closed meanwhile, or settings the controller should have refused
            if offered.worth_cleaning(config) and offered.dirty_ratio > best_ratio:
                best, best_ratio = (partition, config, last_offsets), offered.dirty_ratio
        return best

    async def clean_once(self):
        """Clean the dirtiest log worth it; returns whether a log was cleaned."""
        now = self.clock()
        picked = self._pick(now)
        if picked is None:
            return False
        partition, config, last_offsets = picked
        partition_log = partition.log
        started = time.monotonic()
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: cleaner.clean(partition_log, now, config,
                                                  producer_last_offsets=last_offsets))
        # its outcome is read below, or by `close` when this task was cancelled
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._running = (partition, future)
        try:
            result = await asyncio.shield(future)
        except CleanAbortedError as exc:
            log.info("broker %s: the clean of %s stopped: %s", self.node_id, partition.name,
                     exc)
            return False
        except Exception as exc:
            self.uncleanable[(partition.topic, partition.index)] = partition_log
            log.error("broker %s: cleaning %s failed, the partition is not cleaned again "
                      "until its log is reopened; nothing was changed but the segments "
                      "swapped in before the failure: %s: %s", self.node_id, partition.name,
                      type(exc).__name__, exc,
                      exc_info=None if isinstance(exc, KraftcoreError) else exc)
            return False
        finally:
            self._running = None
        if result is None:
            return False
        self.cleans += 1
        log.info("broker %s: cleaned %s: offsets [%s, %s) of %s segments into %s, "
                 "%s bytes -> %s bytes, %s of %s records kept, %s tombstones removed, "
                 "in %.2f s", self.node_id, partition.name, result.first_dirty_offset,
                 result.end_offset, result.segments_before, result.segments_after,
                 result.bytes_before, result.bytes_after, result.records_kept,
                 result.records_read, result.tombstones_removed, time.monotonic() - started)
        return True

    async def close(self):
        """Stop: abort the clean in progress and wait for it to end."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        running = self._running
        if running is not None:
            partition, future = running
            partition.log.abort_clean("the broker is stopping")
            try:
                await future
            except Exception:  # aborted, or failed: either way over
                pass
        if self._task is not None:
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._executor is not None:
            self._executor.shutdown(wait=True)
