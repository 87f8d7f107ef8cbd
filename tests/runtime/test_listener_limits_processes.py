"""Real nodes on 127.0.0.1 with small listener limits, against clients that flood, hoard
connections or hold memory: 50 connections pipelining ApiVersions without reading, idle
connections up to max.connections, too many connections from one address, and partial
frames as large as socket.request.max.bytes. Throughout, another client's DescribeQuorum
and ApiVersions are answered within their request timeout, and the quorum's high watermark
keeps moving (the other controllers fetch from the leader on the flooded listener); the
node's memory stays within queued.max.request.bytes plus a baseline.

The floods come from other loopback addresses (127.0.0.2 and up; Linux routes all of
127.0.0.0/8 to lo), the quorum and the probing client from 127.0.0.1. Every wait is
bounded; nothing asserts on a duration."""

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from kraftcore.cli.cluster import free_ports, start_node
from kraftcore.net import Connection
from kraftcore.protocol import framing
from kraftcore.protocol.messages import ApiVersionsRequest
from kraftcore.raft import rpc

WAIT_S = 60
HOST = "127.0.0.1"
REQUEST_TIMEOUT_MS = 5000  # the probing client's: every probe must be answered within it
MAX_CONNECTIONS = 120
MAX_CONNECTIONS_PER_IP = 30
IDLE_MS = 3000
FRAME_BYTES = 8 * 1024 * 1024
QUEUED_BYTES = 16 * 1024 * 1024
LIMITS = [f"max.connections={MAX_CONNECTIONS}",
          f"max.connections.per.ip={MAX_CONNECTIONS_PER_IP}",
          f"connections.max.idle.ms={IDLE_MS}",
          f"socket.request.max.bytes={FRAME_BYTES}",
          f"queued.max.request.bytes={QUEUED_BYTES}",
          "broker.heartbeat.interval.ms=500"]


def kraftcore(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", *args],
                            capture_output=True, text=True, timeout=WAIT_S, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kraftcore {' '.join(args)} exited {result.returncode}: "
                             f"{result.stderr.strip()}")
    return result


def wait_for(what, predicate, wait_s=WAIT_S):
    deadline = time.monotonic() + wait_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}: {last}")


def rss_kib(pid, field="VmRSS"):
    """`field` of /proc/<pid>/status in KiB (VmRSS: resident now; VmHWM: its peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


# ------------------------------------------------------------------------------ clients


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


async def connect_from(source, port):
    """A raw (reader, writer) connected from address `source`."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    return await asyncio.open_connection(sock=sock)


async def closed_by_peer(reader):
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass
    return True


def run(coroutine):
    """Run a scenario, bounded: a hung one fails instead of hanging the suite."""
    return asyncio.run(asyncio.wait_for(coroutine, WAIT_S))


def close_all(writers):
    for writer in writers:
        writer.transport.abort()


# ------------------------------------------------------------------------------ nodes


class Quorum:
    """`kraftcore cluster up`: three controllers and a broker, with LIMITS."""

    def __init__(self, directory):
        self.directory = str(directory)
        args = [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--controllers",
                "3", "--brokers", "1", "--dir", self.directory]
        for setting in LIMITS:
            args += ["--set", setting]
        self.supervisor = subprocess.Popen(args, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
        path = os.path.join(self.directory, "cluster.json")
        wait_for("cluster.json", lambda: os.path.exists(path) or self.supervisor.poll())
        if self.supervisor.poll() is not None:
            raise AssertionError(f"cluster up failed: {self.supervisor.stdout.read()}")
        with open(path) as f:
            self.nodes = {n["id"]: n for n in json.load(f)["nodes"]}

    def leader(self):
        """(node id, port) of the quorum leader."""
        port = self.nodes[1]["port"]

        def ask():
            out = kraftcore("quorum", "describe", "--bootstrap-controller",
                            f"{HOST}:{port}", "--status", "--json", check=False)
            return out.returncode == 0 and json.loads(out.stdout)["leader_id"] > 0 and \
                json.loads(out.stdout)["leader_id"]
        leader = wait_for("a leader", ask)
        return leader, self.nodes[leader]["port"]

    def down(self):
        try:
            kraftcore("cluster", "down", "--dir", self.directory, check=False)
            self.supervisor.wait(WAIT_S)
        finally:
            if self.supervisor.poll() is None:
                self.supervisor.kill()
                self.supervisor.wait()


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    q = Quorum(tmp_path_factory.mktemp("limits") / "cluster")
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
        writers = []
        try:
            for i in range(connections):
                _, writer = await connect_from(f"127.0.0.{2 + i % 2}", port)
                writers.append(writer)
            deadline = time.monotonic() + reconnect_s
            while time.monotonic() < deadline:
                for writer in writers:
                    if writer.transport.get_write_buffer_size() < len(chunk):
                        writer.write(chunk)
                await asyncio.sleep(0.01)
        finally:
            close_all(writers)


def test_pipelined_api_versions_from_many_connections_do_not_stop_the_leader(quorum):
    _, port = quorum.leader()

    async def scenario():
        assert await probe(port)
        return await probe_during(port, flood_api_versions(port), probes=8)

    watermarks = run(scenario())
    assert advanced(watermarks), watermarks
    assert quorum.leader()[0] > 0


def test_idle_connections_up_to_max_connections_are_closed(quorum):
    """Idle connections take every slot of the leader's listener: a new client is refused,
    the ones already connected (the quorum, the probing client) keep working, and once the
    idle ones have been closed (connections.max.idle.ms) new clients get in again."""
    _, port = quorum.leader()

    async def scenario():
        kept = await Connection.open(HOST, port, request_timeout_ms=REQUEST_TIMEOUT_MS)
        idle = []
        for i in range(MAX_CONNECTIONS + 10):  # more than there are slots
            idle.append(await connect_from(f"127.0.0.{10 + i // 20}", port))
        # Slots are all taken: a newcomer is closed as soon as it is accepted.
        reader, writer = await connect_from("127.0.0.50", port)
        assert await asyncio.wait_for(closed_by_peer(reader), WAIT_S)
        writer.close()
        watermarks = []
        for _ in range(4):
            part = rpc.describe_quorum_partition(await kept.send(rpc.describe_quorum_request(),
                                                                 1))
            watermarks.append(part.high_watermark)
            await asyncio.sleep(0.5)
        # Every idle one is closed by the node, within about the idle timeout.
        await asyncio.wait_for(asyncio.gather(*(closed_by_peer(r) for r, _ in idle)), WAIT_S)
        close_all(w for _, w in idle)
        watermarks += await probe(port, rounds=2)
        await kept.close()
        return watermarks

    watermarks = run(scenario())
    assert advanced(watermarks), watermarks


def test_connections_beyond_the_per_address_limit_are_closed(quorum):
    """One address opens four times max.connections.per.ip connections, each asking
    ApiVersions: no more than the limit are answered, the others are closed at once, and
    clients from other addresses are answered all along."""
    _, port = quorum.leader()
    request = framing.encode_request(ApiVersionsRequest(), 3, 1, "many")

    async def one(results):
        reader, writer = await connect_from("127.0.0.2", port)
        results.append(writer)
        writer.write(request)
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            return True  # answered; the connection stays open
        except (asyncio.IncompleteReadError, ConnectionError):
            return False  # closed by the node

    async def scenario():
        writers = []
        answered = await asyncio.gather(*(one(writers) for _ in
                                          range(4 * MAX_CONNECTIONS_PER_IP)))
        watermarks = await probe(port, rounds=2)
        await asyncio.sleep(1)
        watermarks += await probe(port, rounds=2)
        close_all(writers)
        return answered, watermarks

    answered, watermarks = run(scenario())
    assert 0 < sum(answered) <= MAX_CONNECTIONS_PER_IP, sum(answered)
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
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
        writers = []
        try:
            for i in range(senders):
                _, writer = await connect_from(f"127.0.0.{2 + i % 4}", port)
                writer.write(body)
                writers.append(writer)
            while True:
                sent[0] = sum(len(body) - w.transport.get_write_buffer_size() for w in writers)
                await asyncio.sleep(0.05)
        finally:
            close_all(writers)

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

    sent = run(scenario())
    peak_kib = rss_kib(process.pid, "VmHWM")
    slack_kib = 16 * 1024  # the interpreter's own growth, allocator slack, read buffers
    # 84 MiB were offered; the node took in at least the frames it had room for (what it
    # did not take stays in the sockets' kernel buffers, which do not count in its RSS)
    what = (f"offered {senders * len_offered(frame_bytes)} bytes, the sockets took {sent}, "
            f"the node's RSS went from {baseline_kib} KiB to a peak of {peak_kib} KiB")
    assert sent > FRAME_BYTES, what
    assert peak_kib - baseline_kib <= QUEUED_BYTES // 1024 + slack_kib, what
    assert process.poll() is None
