"""A node formatted with `--add-scram`: its first active controller writes the bootstrap
records, so the metadata image holds the SCRAM credentials from the start."""

import asyncio
import io
import time

from kraftcore.cli.format import run_format
from kraftcore.runtime.config import NodeConfig
from kraftcore.runtime.local_cluster import free_ports, node_properties
from kraftcore.runtime.node import Node
from kraftcore.security.scram import make_credential

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
FAST = [("controller.quorum.election.timeout.ms", "300"),
        ("controller.quorum.fetch.timeout.ms", "600"),
        ("broker.heartbeat.interval.ms", "200"),
        ("broker.session.timeout.ms", "4000")]


def test_format_add_scram_reaches_the_metadata_image(tmp_path):
    controller_port, broker_port = free_ports(2)
    config_path = tmp_path / "server.properties"
    config_path.write_text(node_properties(
        1, ("broker", "controller"), {1: controller_port},
        {"controller": controller_port, "broker": broker_port}, str(tmp_path / "n1"), FAST))
    out, err = io.StringIO(), io.StringIO()
    status = run_format(str(config_path), CLUSTER, out=out, err=err, add_scram=[
        "SCRAM-SHA-256=[name=alice,password=alice-secret]",
        "SCRAM-SHA-512=[name=admin,password=admin-secret,iterations=8192]"])
    assert status == 0, err.getvalue()

    async def scenario():
        node = Node(NodeConfig.from_file(str(config_path)), CLUSTER)
        await node.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                image = node.broker.metadata.image if node.broker else node.image
                if len(image.scram) == 2 and image.metadata_version() is not None:
                    return node.image, image
                await asyncio.sleep(0.05)
            raise AssertionError("the SCRAM credentials never reached the image")
        finally:
            await node.stop()

    controller_image, broker_image = asyncio.run(scenario())
    for image in (controller_image, broker_image):
        assert sorted(image.scram) == [("admin", 2), ("alice", 1)]
        for (user, code), password, iterations in ((("alice", 1), "alice-secret", 4096),
                                                   (("admin", 2), "admin-secret", 8192)):
            record = image.scram[user, code]
            want = make_credential(code, password, record.salt, iterations)
            assert record.iterations == iterations
            assert (record.stored_key, record.server_key) == (want.stored_key,
                                                              want.server_key)
