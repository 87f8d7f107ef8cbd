"""`Node` in one event loop (no processes): how a node ends when its broker side cannot go
on."""

import asyncio
import random

from kraftcore.runtime.config import NodeConfig
from kraftcore.runtime.local_cluster import free_ports, node_properties
from kraftcore.runtime.node import Node
from kraftcore.types import Uuid

FAST = [("controller.quorum.election.timeout.ms", "300"),
        ("controller.quorum.fetch.timeout.ms", "600"),
        ("broker.heartbeat.interval.ms", "200"),
        ("broker.session.timeout.ms", "4000")]


def test_a_broker_the_controller_refuses_for_good_stops_with_exit_code_1(tmp_path):
    """Formatted for another cluster: the controller answers INCONSISTENT_CLUSTER_ID, and
    the broker node stops by itself, non-zero, instead of running on unregistered."""
    async def scenario():
        controller_port, broker_port, unused = free_ports(3)
        voters = {1: controller_port}
        controller = Node(NodeConfig.from_text(node_properties(
            1, ("controller",), voters, {"controller": controller_port, "broker": 0},
            str(tmp_path / "n1"), FAST)), str(Uuid.random(random.Random(1))))
        broker = Node(NodeConfig.from_text(node_properties(
            2, ("broker",), voters, {"controller": unused, "broker": broker_port},
            str(tmp_path / "n2"), FAST)), str(Uuid.random(random.Random(2))))
        await controller.start()
        started = []
        try:
            code = await asyncio.wait_for(broker.run(
                started=lambda: started.append(broker.listeners[0].port)), 30)
        finally:
            await controller.stop()
        assert code == 1
        assert started == [broker_port]  # called once, with the listener bound
        assert broker.broker.lifecycle.error is not None
        assert "INCONSISTENT_CLUSTER_ID" in str(broker.broker.lifecycle.error)
    asyncio.run(scenario())


def test_a_node_whose_start_fails_closes_what_it_had_opened(tmp_path):
    """The broker's port is taken: `run` raises, and the metadata log (opened before the
    listener) is closed again, so the directory can be opened at once."""
    import socket

    from kraftcore.errors import ListenError
    from kraftcore.runtime.raft_storage import FileRaftStorage

    async def scenario():
        controller_port, broker_port = free_ports(2)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", broker_port))
            taken.listen()
            config = NodeConfig.from_text(node_properties(
                1, ("controller", "broker"), {1: controller_port},
                {"controller": controller_port, "broker": broker_port},
                str(tmp_path / "n1"), FAST))
            node = Node(config, str(Uuid.random(random.Random(1))))
            started = []
            try:
                await node.run(started=lambda: started.append(True))
            except ListenError:
                pass
            else:
                raise AssertionError("the node started on a port in use")
            assert started == []
        FileRaftStorage.open(config.metadata_partition_dir).close()
        with socket.create_server(("127.0.0.1", controller_port)):
            pass  # the controller listener let its port go
    asyncio.run(scenario())


def test_an_exception_in_a_role_stops_the_node_with_exit_code_1(tmp_path, caplog):
    """A role's step that raises (here the broker lifecycle's poll, as a bug would) stops
    the whole node, non-zero, with one line naming the error, instead of leaving the broker
    running with no timer."""
    import logging

    async def scenario():
        controller_port, broker_port = free_ports(2)
        node = Node(NodeConfig.from_text(node_properties(
            1, ("controller", "broker"), {1: controller_port},
            {"controller": controller_port, "broker": broker_port}, str(tmp_path / "n1"),
            FAST)), str(Uuid.random(random.Random(1))))

        def started():
            def broken_poll(now_ms):
                raise RuntimeError("lifecycle bug")
            node.broker.lifecycle.poll = broken_poll
            node.broker.schedule(0)
        return await asyncio.wait_for(node.run(started=started), 30)

    with caplog.at_level(logging.ERROR, logger="kraftcore.runtime"):
        assert asyncio.run(scenario()) == 1
    assert [r.getMessage() for r in caplog.records if "stops" in r.getMessage()] == [
        "node 1 stops: the broker role failed: RuntimeError: lifecycle bug"]


def test_a_metadata_log_with_a_gap_opens_only_when_asked(tmp_path, caplog):
    """A middle segment of the metadata log deleted by hand: the node refuses to start
    (LogGapError, and `kraftcore start` says which option to use), nothing on disk
    changes; with set_aside_past_gap it starts, the files past the gap renamed .stray."""
    import os
    import subprocess
    import sys

    from kraftcore.controller.replication import NewTopic
    from kraftcore.errors import ControllerError, LogGapError
    from kraftcore.log.meta_properties import format_directories

    controller_port, broker_port = free_ports(2)
    text = node_properties(
        1, ("controller", "broker"), {1: controller_port},
        {"controller": controller_port, "broker": broker_port}, str(tmp_path / "n1"),
        FAST + [("metadata.log.segment.bytes", "1024"),
                ("metadata.log.segment.min.bytes", "1024")])
    config = NodeConfig.from_text(text)
    cluster_id = str(Uuid.random(random.Random(1)))
    format_directories(config, cluster_id)
    directory = config.metadata_partition_dir

    def segments():
        return sorted(n for n in os.listdir(directory) if n.endswith(".log"))

    async def fill():
        node = Node(config, cluster_id)
        await node.start()
        try:
            created = 0
            deadline = asyncio.get_running_loop().time() + 30
            while len(segments()) < 5:
                assert asyncio.get_running_loop().time() < deadline, segments()
                try:
                    [result] = await node.submit("create_topics", [NewTopic(
                        f"topic-{created}", 1, 1)])
                except ControllerError:
                    await asyncio.sleep(0.1)  # the broker is not registered yet
                    continue
                created += result.error_code == 0
        finally:
            await node.stop()
    asyncio.run(fill())

    os.remove(os.path.join(directory, segments()[2]))
    before = sorted(os.listdir(directory))

    async def start(**options):
        node = Node(config, cluster_id, **options)
        try:
            await node.start()
        finally:
            await node.stop()
    try:
        asyncio.run(start())
    except LogGapError as exc:
        assert "set_aside_past_gap" in str(exc)
    else:
        raise AssertionError("a metadata log with a gap opened")
    assert sorted(os.listdir(directory)) == before

    path = tmp_path / "server.properties"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", "start", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "start it once with --set-aside-past-gap" in \
        result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(directory)) == before

    import logging
    with caplog.at_level(logging.WARNING, logger="kraftcore.runtime"):
        asyncio.run(start(set_aside_past_gap=True))
    assert any("opened up to a gap" in r.getMessage() and "as a voter" in r.getMessage()
               for r in caplog.records)
    before_logs = [n for n in before if n.endswith(".log")]
    strays = sorted(n[:-len(".stray")] for n in os.listdir(directory)
                    if n.endswith(".log.stray"))
    assert strays == before_logs[2:]  # every segment past the gap, none deleted
    assert segments()[:2] == before_logs[:2]


def test_raft_requests_to_a_node_stopping_on_a_failure_are_answered_not_raised(tmp_path,
                                                                               caplog):
    """The request that makes the core fail, every Raft request after it until the node
    is down, and the ones in flight at the failure (a Fetch the leader holds, through the
    listener) get a BROKER_NOT_AVAILABLE answer of their own API: the failure is logged
    once, not once per request by the listener, and no traceback is logged."""
    import logging

    from kraftcore.net import Connection
    from kraftcore.protocol.error_codes import ErrorCode
    from kraftcore.protocol.framing import Request
    from kraftcore.raft import rpc

    async def scenario():
        (port,) = free_ports(1)
        node = Node(NodeConfig.from_text(node_properties(
            1, ("controller",), {1: port}, {"controller": port, "broker": 0},
            str(tmp_path / "n1"), FAST)), str(Uuid.random(random.Random(1))))
        await node.start()
        conn = None
        try:
            core = node.driver.core
            while core.high_watermark is None:
                await asyncio.sleep(0.01)
            conn = await Connection.open("127.0.0.1", port)

            def fetch():  # an observer's Fetch at the log end: held once it is caught up
                return asyncio.ensure_future(conn.send(rpc.fetch_request(
                    node.cluster_id, 99, core.epoch, core.storage.log_end_offset, core.epoch,
                    30_000, 1 << 20), rpc.VERSIONS["Fetch"], timeout_ms=30_000))
            while True:
                held = fetch()
                await asyncio.sleep(0.1)
                if not held.done():
                    break
                assert (await held).error_code == 0
            assert len(node.driver._answers) == 1  # the held Fetch waits in the driver

            def broken_handle(message, now_ms):
                raise RuntimeError("core bug")
            core.handle = broken_handle
            body = rpc.describe_quorum_request()
            request = Request(55, 1, 7, "probe", body, None)
            answers = [node._handle(request, ("127.0.0.1", 1)) for _ in range(3)]
            assert node.driver.failed is not None and node.exit_code == 1
            in_flight = await asyncio.wait_for(held, 30)
            return answers, in_flight
        finally:
            if conn is not None:
                await conn.close()
            await node.stop(graceful=False)

    with caplog.at_level(logging.INFO):
        answers, in_flight = asyncio.run(scenario())
    assert [a.error_code for a in answers] == [ErrorCode.BROKER_NOT_AVAILABLE] * 3
    assert type(in_flight).__name__ == "FetchResponse"
    assert in_flight.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("node 1 stops: ") and \
        "core bug" in errors[0], errors
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "Traceback" not in caplog.text
