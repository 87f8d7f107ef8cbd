"""Real nodes on 127.0.0.1 with small listener limits, against clients that flood, hoard
connections or hold memory: 50 connections pipelining ApiVersions without reading, idle
connections up to max.connections, too many connections from one address, and partial
frames as large as socket.request.max.bytes. Throughout, another client's DescribeQuorum
and ApiVersions are answered within their request timeout, and the quorum's high watermark
keeps moving (the other controllers fetch from the leader on the flooded listener); the
node's memory stays within queued.max.request.bytes plus a baseline.

The floods come from other loopback addresses (127.0.0.2 and up; Linux routes all of
127.0.0.0/8 to lo), the quorum and the probing client from 127.0.0.1. The one bound that
is asserted is the probing client's request timeout; every other wait only stops a hung
test, and is longer than the requests it waits for could take."""

import asyncio
import struct
import time

import pytest

from kraftcore.net import Connection
from kraftcore.protocol import framing
from kraftcore.protocol.messages import ApiVersionsRequest
from kraftcore.raft import rpc
from kraftcore.runtime.local_cluster import free_ports, start_node
from tests.net.helpers import HOST, open_raw

from .processes import WAIT_S, LocalCluster, kraftcore, stop, wait_for

# The probing client's request timeout, set explicitly: every probe must be answered within
# it while the floods run. Without the listener limits, every request of an admin timed out
# for as long as a flood lasted (a minute and more); 15 s is far below that, and far above
# what a probe takes on a loaded 2-core machine.
REQUEST_TIMEOUT_MS = 15_000
CONNECTIONS_MAX = 120
CONNECTIONS_PER_IP_MAX = 30
IDLE_MS = 3000
FRAME_BYTES = 8 * 1024 * 1024
QUEUED_BYTES = 16 * 1024 * 1024
LIMITS = [f"max.connections={CONNECTIONS_MAX}",
          f"max.connections.per.ip={CONNECTIONS_PER_IP_MAX}",
          f"connections.max.idle.ms={IDLE_MS}",
          f"socket.request.max.bytes={FRAME_BYTES}",
          f"queued.max.request.bytes={QUEUED_BYTES}",
          "broker.heartbeat.interval.ms=500"]


def rss_kib(pid, field="VmRSS"):
    """`field` of /proc/<pid>/status in KiB (VmRSS: resident now; VmHWM: its peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


# ------------------------------------------------------------------------------ clients


def probe_bound_s(rounds):
    """The longest `rounds` probes on one connection can take without one of them failing:
    a connect and two requests per round, each within REQUEST_TIMEOUT_MS."""
    return (1 + 2 * rounds) * REQUEST_TIMEOUT_MS / 1000


async def probe(port, rounds=1):
    """DescribeQuorum and ApiVersions on a new connection, `rounds` times; returns the
    high watermarks seen. Every answer must come within REQUEST_TIMEOUT_MS."""
    seen = []
    conn = await Connection.open(HOST, port, request_timeout_ms=REQUEST_TIMEOUT_MS,
                                 connect_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        for _ in range(rounds):
            versions = await conn.send(ApiVersionsRequest(), 3)
            assert versions.error_code == 0 and versions.api_keys
            response = await conn.send(rpc.describe_quorum_request(), 1)
            part = rpc.describe_quorum_partition(response)
            assert response.error_code == 0 and part.error_code == 0, response
            seen.append(part.high_watermark)
    finally:
        await conn.close()
    return seen


async def probe_during(port, flooding, probes=6, pause_s=0.5):
    """Probe `probes` times, `pause_s` apart, while the coroutine `flooding` runs; then
    stop it. Returns the high watermarks seen."""
    task = asyncio.ensure_future(flooding)
    seen = []
    try:
        for _ in range(probes):
            await asyncio.sleep(pause_s)
            assert not task.done() or task.exception() is None
            seen += await probe(port)
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    return seen


def run(coroutine, bound_s=WAIT_S):
    """Run a scenario, bounded: a hung one fails instead of hanging the suite. `bound_s`
    must exceed what the scenario's own bounded waits add up to."""
    return asyncio.run(asyncio.wait_for(coroutine, bound_s))


def close_all(raws):
    for raw in raws:
        raw.writer.transport.abort()


# ------------------------------------------------------------------------------ nodes


def leader(cluster):
    """(node id, port) of the quorum leader."""
    def elected():
        leader_id = cluster.quorum()["leader_id"]
        return leader_id if leader_id > 0 else None
    leader_id = wait_for("a leader", elected)
    return leader_id, cluster.nodes[leader_id]["port"]


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    q = LocalCluster(tmp_path_factory.mktemp("limits") / "cluster", LIMITS, brokers=1)
    try:
        yield q
    finally:
        q.down()


def advanced(watermarks):
    """The high watermark moved during the probes: the followers' fetches got through."""
    return watermarks[-1] > watermarks[0]


# ------------------------------------------------------------------------------ tests


API_VERSIONS = framing.encode_request(
    ApiVersionsRequest(client_software_name="flood", client_software_version="1"), 3, 0, "f")


async def flood_api_versions(port, connections=50, reconnect_s=2.0):
    """`connections` connections (from 127.0.0.2-3) that pipeline ApiVersions without ever
    reading, and reconnect every `reconnect_s`."""
    chunk = API_VERSIONS * (256 * 1024 // len(API_VERSIONS))
    while True:
        raws = []
        try:
            for i in range(connections):
                raws.append(await open_raw(port, source=f"127.0.0.{2 + i % 2}"))
            deadline = time.monotonic() + reconnect_s
            while time.monotonic() < deadline:
                for raw in raws:
                    if raw.writer.transport.get_write_buffer_size() < len(chunk):
                        raw.writer.write(chunk)
                await asyncio.sleep(0.01)
        finally:
            close_all(raws)


def test_pipelined_api_versions_from_many_connections_do_not_stop_the_leader(quorum):
    _, port = leader(quorum)
    probes = 8

    async def scenario():
        assert await probe(port)
        return await probe_during(port, flood_api_versions(port), probes=probes)

    watermarks = run(scenario(), WAIT_S + (probes + 1) * (0.5 + probe_bound_s(1)))
    assert advanced(watermarks), watermarks
    assert leader(quorum)[0] > 0


def test_idle_connections_up_to_max_connections_are_closed(quorum):
    """Idle connections take every slot of the leader's listener: a new client is refused,
    the ones already connected (the quorum, the probing client) keep working, and once the
    idle ones have been closed (connections.max.idle.ms) new clients get in again."""
    _, port = leader(quorum)

    async def scenario():
        kept = await Connection.open(HOST, port, request_timeout_ms=REQUEST_TIMEOUT_MS)
        idle = []
        for i in range(CONNECTIONS_MAX + 10):  # more than there are slots
            idle.append(await open_raw(port, source=f"127.0.0.{10 + i // 20}"))
        # Slots are all taken: a newcomer is closed as soon as it is accepted.
        newcomer = await open_raw(port, source="127.0.0.50")
        assert await asyncio.wait_for(newcomer.closed_by_peer(), WAIT_S)
        close_all([newcomer])
        watermarks = []
        for _ in range(4):
            part = rpc.describe_quorum_partition(await kept.send(rpc.describe_quorum_request(),
                                                                 1))
            watermarks.append(part.high_watermark)
            await asyncio.sleep(0.5)
        # Every idle one is closed by the node, within about the idle timeout.
        await asyncio.wait_for(asyncio.gather(*(raw.closed_by_peer() for raw in idle)), WAIT_S)
        close_all(idle)
        watermarks += await probe(port, rounds=2)
        await kept.close()
        return watermarks

    watermarks = run(scenario(), 3 * WAIT_S + 4 * (0.5 + probe_bound_s(1)) + probe_bound_s(2))
    assert advanced(watermarks), watermarks


def test_connections_beyond_the_per_address_limit_are_closed(quorum):
    """One address opens four times max.connections.per.ip connections, each asking
    ApiVersions: no more than the limit are answered, the others are closed at once, and
    clients from other addresses are answered all along."""
    _, port = leader(quorum)
    request = framing.encode_request(ApiVersionsRequest(), 3, 1, "many")

    async def one(results):
        raw = await open_raw(port, source="127.0.0.2")
        results.append(raw)
        raw.writer.write(request)
        try:
            await raw.read_frame()
            return True  # answered; the connection stays open
        except (asyncio.IncompleteReadError, ConnectionError):
            return False  # closed by the node

    async def scenario():
        raws = []
        answered = await asyncio.gather(*(one(raws) for _ in
                                          range(4 * CONNECTIONS_PER_IP_MAX)))
        watermarks = await probe(port, rounds=2)
        await asyncio.sleep(1)
        watermarks += await probe(port, rounds=2)
        close_all(raws)
        return answered, watermarks

    answered, watermarks = run(scenario(), WAIT_S + 1 + 2 * probe_bound_s(2))
    assert 0 < sum(answered) <= CONNECTIONS_PER_IP_MAX, sum(answered)
    assert advanced(watermarks), watermarks


# ------------------------------------------------------------------------------ memory


@pytest.fixture
def single_node(tmp_path):
    """One controller (a quorum of one) started with `kraftcore start`, with LIMITS."""
    port = free_ports(1)[0]
    config = tmp_path / "server.properties"
    config.write_text("\n".join([
        "node.id=1", "process.roles=controller", f"controller.quorum.voters=1@{HOST}:{port}",
        f"listeners=CONTROLLER://{HOST}:{port}", "controller.listener.names=CONTROLLER",
        f"log.dirs={tmp_path / 'data'}", *LIMITS]) + "\n")
    cluster_id = kraftcore("random-uuid").stdout.strip()
    kraftcore("format", "--config", str(config), "--cluster-id", cluster_id)
    process = start_node(str(config))
    try:
        async def up():
            return await probe(port)
        wait_for("the node to answer", lambda: process.poll() is None and _answers(up))
        yield process, port
    finally:
        stop(process)


def _answers(coroutine_function):
    try:
        return asyncio.run(coroutine_function())
    except Exception:  # noqa: BLE001 - not up yet
        return None


def len_offered(frame_bytes):
    """What each sender writes: all of a `frame_bytes` frame but its last MiB."""
    return frame_bytes + 4 - 1024 * 1024


def test_partial_frames_stay_within_queued_max_request_bytes(single_node):
    """Twelve connections each send all but the last MiB of a frame of
    socket.request.max.bytes (8 MiB), and hold it: 84 MiB offered. The node's resident memory
    grows by about queued.max.request.bytes (16 MiB) at most, and a client's requests are
    answered all the while."""
    process, port = single_node
    senders, frame_bytes = 12, FRAME_BYTES - 64

    async def hold_partial_frames(sent):
        head = struct.pack(">ihhi", frame_bytes, 52, 2, 1)  # a Vote v2 that never completes
        body = head + b"\x00" * (len_offered(frame_bytes) - len(head))
        raws = []
        try:
            for i in range(senders):
                raw = await open_raw(port, source=f"127.0.0.{2 + i % 4}")
                raw.writer.write(body)
                raws.append(raw)
            while True:
                sent[0] = sum(len(body) - r.writer.transport.get_write_buffer_size()
                              for r in raws)
                await asyncio.sleep(0.05)
        finally:
            close_all(raws)

    baseline_kib = rss_kib(process.pid)

    async def scenario():
        sent = [0]
        flood = asyncio.ensure_future(hold_partial_frames(sent))
        try:
            # What the node takes in is bounded; what it cannot take stays in the sockets.
            for _ in range(6):
                await asyncio.sleep(0.5)
                assert await probe(port, rounds=2)
            return sent[0]
        finally:
            flood.cancel()
            try:
                await flood
            except asyncio.CancelledError:
                pass

    sent = run(scenario(), WAIT_S + 6 * (0.5 + probe_bound_s(2)))
    peak_kib = rss_kib(process.pid, "VmHWM")
    slack_kib = 16 * 1024  # the interpreter's own growth, allocator slack, read buffers
    # 84 MiB were offered; the node took in at least the frames it had room for (what it
    # did not take stays in the sockets' kernel buffers, which do not count in its RSS)
    what = (f"offered {senders * len_offered(frame_bytes)} bytes, the sockets took {sent}, "
            f"the node's RSS went from {baseline_kib} KiB to a peak of {peak_kib} KiB")
    assert sent > FRAME_BYTES, what
    assert peak_kib - baseline_kib <= QUEUED_BYTES // 1024 + slack_kib, what
    assert process.poll() is None
