"""`MetadataWatch` (`kraftcore.admin.watch`) against controllers served in-process
(`tests.admin.servers`, whose leader's RaftCore answers Fetch and FetchSnapshot): it finds
the leader from a standby, reads with replica id -1 (answered, never tracked as an
observer), reports only what commits after it caught up (or everything, from a snapshot
summary when the leader's log starts at one), follows a leader named in a refusal, and
fails with one `AdminError` when no leader answers in time. No test asserts on a duration;
every wait has a hang guard."""

import asyncio

import pytest

from kraftcore.admin.client import AdminClient
from kraftcore.admin.watch import MetadataWatch
from kraftcore.errors import AdminError
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.net import Listener
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.raft import rpc

from tests.admin.servers import HANG_GUARD_S, Cluster, brokers, cluster  # noqa: F401 (fixtures)


class Watching:
    """A `MetadataWatch` running as a task: its changes and notes as they come."""

    def __init__(self, bootstrap, **options):
        self.changes = []
        self.notes = []
        self._live = asyncio.Event()
        self._more = asyncio.Event()
        self.watch = MetadataWatch(bootstrap, note=self._note, **options)
        self.task = asyncio.create_task(self.watch.run(self._on_change))

    def _note(self, text):
        self.notes.append(text)
        if "changes from offset" in text:
            self._live.set()

    def _on_change(self, change):
        self.changes.append(change)
        self._more.set()
        return True

    def texts(self):
        return [c.text().split(": ", 1)[1] for c in self.changes]

    async def live(self):
        await asyncio.wait_for(self._live.wait(), HANG_GUARD_S)

    async def until(self, predicate):
        async def wait():
            while not predicate(self.texts()):
                self._more.clear()
                await self._more.wait()
        await asyncio.wait_for(wait(), HANG_GUARD_S)

    async def stop(self):
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD_S))


def test_from_a_standby_the_watch_reports_what_commits_after_it_caught_up(brokers):
    cluster, _ = brokers

    async def scenario():
        watching = Watching(cluster.standby_endpoint)
        try:
            await watching.live()
            async with AdminClient(cluster.active_endpoint) as admin:
                await admin.create_topic("orders", 3, 2)
            await watching.until(lambda texts: any(t.startswith("orders-2 created")
                                                   for t in texts))
            # Every session expires: the brokers are fenced, as the watch then says.
            cluster.on_loop(cluster.active.quorum.run, 10**9)
            await watching.until(lambda texts: "broker 1 fenced" in texts)
        finally:
            await watching.stop()
        return watching

    watching = run(scenario())
    texts = watching.texts()
    topic = cluster.image.topic("orders")
    # Nothing from before the watch caught up (the brokers' registrations are older).
    replicas = list(topic.partitions[0].replicas)
    assert texts[:2] == [f"topic orders created ({topic.topic_id})",
                         f"orders-0 created: replicas {replicas}, leader {replicas[0]}, "
                         f"ISR {replicas}"]
    assert not any("registered" in t for t in texts)
    offsets = [c.offset for c in watching.changes]
    assert offsets == sorted(set(offsets))
    assert all(c.offset < cluster.active.quorum.core.high_watermark for c in watching.changes)
    assert watching.notes[0] == (f"following node 1 (leader in epoch "
                                 f"{cluster.active.quorum.core.epoch}); changes from offset "
                                 f"{watching.watch.follower.print_from} on")
    # A reader, not a replica: the leader does not list it among its observers.
    assert cluster.on_loop(lambda: dict(cluster.active.quorum.core.quorum.state.observers)) == {}


def test_from_the_beginning_a_snapshot_the_log_starts_at_is_one_line(brokers):
    cluster, _ = brokers

    async def create():
        async with AdminClient(cluster.active_endpoint) as admin:
            await admin.create_topic("orders", 2, 1)

    run(create())

    def snapshot_and_clean():
        quorum = cluster.active.quorum
        image = quorum.controller.image
        snapshot_id = quorum.core.create_snapshot(image.end_offset, encode_snapshot(image))
        quorum.storage.advance_log_start_offset(snapshot_id)
        return snapshot_id

    snapshot_id = cluster.on_loop(snapshot_and_clean)
    assert snapshot_id.end_offset > 0

    async def scenario():
        watching = Watching(cluster.active_endpoint, from_beginning=True)
        try:
            await watching.until(lambda texts: len(texts) >= 1)
            async with AdminClient(cluster.active_endpoint) as admin:
                await admin.create_topic("later", 1, 1)
            await watching.until(lambda texts: any(t.startswith("later-0 created")
                                                   for t in texts))
        finally:
            await watching.stop()
        return watching

    watching = run(scenario())
    first = watching.changes[0]
    assert (first.type, first.offset, first.epoch) == (
        "SNAPSHOT", snapshot_id.end_offset - 1, snapshot_id.epoch)
    assert first.sentence.startswith(f"snapshot of offsets 0-{snapshot_id.end_offset - 1}: "
                                     "3 brokers, ")
    assert "1 topics, 2 partitions" in first.sentence
    assert all(c.offset >= snapshot_id.end_offset for c in watching.changes[1:])
    assert any(t.startswith("topic later created") for t in watching.texts())


class StaleLeader:
    """Node 2 believes it leads epoch 0: DescribeQuorum names itself; a Fetch in epoch 0
    is told that node 1 leads epoch 1. DescribeCluster lists both."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.fetches = 0

    async def handle(self, request, peer):
        if request.api_key == 55:
            return rpc.describe_quorum_response(E.NONE, 2, 0, 0)
        if request.api_key == 1:
            self.fetches += 1
            return rpc.fetch_response(E.FENCED_LEADER_EPOCH, 1, 1)
        return await self.cluster.standby_node.handle(request, peer)


def test_a_refusal_naming_the_leader_moves_the_watch_there_from_the_same_offset(cluster):
    stale = StaleLeader(cluster)

    async def scenario():
        listener = await Listener.start("127.0.0.1", 0, stale.handle)
        cluster.controllers[2] = ("127.0.0.1", listener.port)
        try:
            watching = Watching(("127.0.0.1", listener.port), from_beginning=True)
            try:
                await watching.until(lambda texts: len(texts) >= 2)
            finally:
                await watching.stop()
        finally:
            await listener.close()
        return watching

    watching = run(scenario())
    assert stale.fetches == 1
    epoch = cluster.active.quorum.core.epoch
    assert watching.notes[:2] == [
        "node 2 (leader in epoch 0) answered FENCED_LEADER_EPOCH (74); looking for the "
        "quorum's leader",
        f"following node 1 (leader in epoch {epoch}) from offset 0",
    ]
    assert watching.changes[0].offset == 0 and watching.changes[0].type == "LEADER_CHANGE"


def test_no_leader_within_the_timeout_is_one_admin_error():
    with Cluster(standby_knows_leader=False) as c:
        # The standby knows no leader and no other controller.
        c.standby_node.facade.controllers = lambda: {2: c.standby_endpoint}

        async def scenario():
            watch = MetadataWatch(c.standby_endpoint, timeout_ms=300)
            await watch.run(lambda change: True)

        with pytest.raises(AdminError, match=r"no quorum leader answered within 300 ms \("
                           r"127\.0\.0\.1:\d+ knows no leader yet\)"):
            run(scenario())


def test_a_bootstrap_that_refuses_the_connection_fails_at_once():
    async def scenario():
        listener = await Listener.start("127.0.0.1", 0, None)
        port = listener.port
        await listener.close()
        await MetadataWatch(("127.0.0.1", port), timeout_ms=HANG_GUARD_S * 1000).run(
            lambda change: True)

    with pytest.raises(AdminError, match="could not connect to 127.0.0.1"):
        run(scenario())


def test_on_change_returning_false_ends_the_watch(brokers):
    cluster, _ = brokers

    async def scenario():
        seen = []
        await MetadataWatch(cluster.active_endpoint, from_beginning=True).run(
            lambda change: seen.append(change) or len(seen) < 3)
        return seen

    seen = run(scenario())
    assert [c.offset for c in seen] == sorted(c.offset for c in seen) and len(seen) == 3
