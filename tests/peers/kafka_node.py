"""One real Kafka 4.x node (combined mode) as a test peer.

``kafka_combined(tmpdir)`` formats a fresh log directory and starts ONE
``process.roles=broker,controller`` node on free 127.0.0.1 ports, waits until its broker
listener answers ApiVersions, yields ``"127.0.0.1:PORT"`` and always stops it (SIGTERM, then
SIGKILL). The jars come from ``tests/peers/kafka/fetch.sh`` (Maven Central, cached outside
the tree; see shared/reference/kafka-broker-facts.md §B).

With ``request_log=True`` the node writes Kafka's own request log (``kafka.request.logger``
at DEBUG: one line per completed request, with its API key, version and client id) to
``tmpdir/requests.log``; ``request_versions()`` reads it back, which is how one learns which
API versions each client really sent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from kraftcore.runtime.local_cluster import free_ports
from typing import Self

KAFKA_DIR = Path(__file__).resolve().parent / "kafka"
FETCH_SCRIPT = KAFKA_DIR / "fetch.sh"
FETCH_TIMEOUT_S = 900.0
FORMAT_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
HEAP = "-Xmx512m"


class KafkaNodeError(RuntimeError):
    """The real Kafka node could not be fetched, formatted or started."""


def kafka_version() -> str:
    pom = (KAFKA_DIR / "pom.xml").read_text()
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    if m is None:
        raise KafkaNodeError(f"no <kafka.version> in {KAFKA_DIR / 'pom.xml'}")
    return m.group(1)


def java_available() -> bool:
    return shutil.which("java") is not None


def fetch_kafka_jars(timeout_s: float = FETCH_TIMEOUT_S) -> Path:
    """Run fetch.sh (idempotent) and return the directory of jars."""
    if shutil.which("mvn") is None:
        cache = _default_cache()
        if (cache / ".kraftcore-fetched").exists():
            return cache
        raise KafkaNodeError("mvn is not installed and no fetched Kafka jars are cached")
    try:
        proc = subprocess.run(
            ["bash", str(FETCH_SCRIPT)],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise KafkaNodeError(f"fetch.sh did not finish within {timeout_s:.0f}s") from e
    if proc.returncode != 0:
        raise KafkaNodeError(
            f"fetch.sh failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def unavailable(message: str) -> None:
    """A test that needs a missing tool (Java, Maven, Node) skips on a developer's machine
    and fails under CI (`.ci/run` sets CI): there its absence is a broken install."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(message + " (CI must have it)")
    pytest.skip(message)


def kafka_jars_for_tests() -> Path:
    """Kafka's jars for a test that runs its tools, or `unavailable` without Java or jars."""
    if not java_available():
        unavailable("needs java")
    try:
        return fetch_kafka_jars()
    except KafkaNodeError as exc:
        unavailable(f"Kafka's jars are not available: {exc}")


def _default_cache() -> Path:
    env = os.environ.get("KRAFTCORE_KAFKA_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "kraftcore" / f"kafka-{kafka_version()}"


def random_cluster_id() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: 16 random bytes, URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {root_level}
rootLogger.appenderRef.err.ref = STDERR
"""

_LOG4J2_REQUESTS = """\
appender.req.type = File
appender.req.name = REQUESTS
appender.req.fileName = {path}
appender.req.layout.type = PatternLayout
appender.req.layout.pattern = %m%n
logger.req.name = kafka.request.logger
logger.req.level = DEBUG
logger.req.additivity = false
logger.req.appenderRef.req.ref = REQUESTS
"""


# A broker's settings for a cluster of one broker: no automatic topics, internal topics
# with one replica, no wait before a group's first rebalance.
_ONE_BROKER = {
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
}


def _server_properties(data_dir: Path, node_id: int, broker_port: int, controller_port: int) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": 1,
        **_ONE_BROKER,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _api_versions_ok(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Send ApiVersions v0 and return True on a well-formed error-free answer."""
    client_id = b"kraftcore-probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            resp = _recv_exact(s, size)
    except OSError:
        return False
    if len(resp) < 6:
        return False
    corr, err = struct.unpack(">ih", resp[:6])
    return corr == 1 and err == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return bytes(buf)


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def kafka_combined(
    tmpdir: str | os.PathLike,
    *,
    request_log: bool = False,
    log_level: str = "WARN",
    start_timeout_s: float = START_TIMEOUT_S,
    extra_properties: dict[str, object] | None = None,
) -> Iterator[str]:
    """Format and start one combined-mode Kafka node; yield its bootstrap address."""
    if not java_available():
        raise KafkaNodeError("java is not installed (Kafka 4.x needs Java 17+)")
    tmp = Path(tmpdir)
    tmp.mkdir(parents=True, exist_ok=True)
    jars = fetch_kafka_jars()
    classpath = str(jars / "*")
    data_dir = tmp / "data"
    broker_port, controller_port = free_ports(2)
    props = _server_properties(data_dir, 1, broker_port, controller_port)
    for k, v in (extra_properties or {}).items():
        props += f"{k}={v}\n"
    props_path = tmp / "server.properties"
    props_path.write_text(props)
    log4j = _LOG4J2.format(root_level=log_level)
    if request_log:
        log4j += _LOG4J2_REQUESTS.format(path=tmp / "requests.log")
    log4j_path = tmp / "log4j2.properties"
    log4j_path.write_text(log4j)
    java = ["java", HEAP, "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j_path}",
            "-cp", classpath]

    fmt = subprocess.run(
        java + ["kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
                "-c", str(props_path), "--standalone"],
        capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False,
    )
    if fmt.returncode != 0:
        raise KafkaNodeError(
            f"kafka.tools.StorageTool format failed (exit {fmt.returncode}):\n"
            f"{fmt.stdout[-2000:]}\n{fmt.stderr[-4000:]}")

    server_log = tmp / "server.log"
    with open(server_log, "wb") as out:
        proc = subprocess.Popen(
            java + ["kafka.Kafka", str(props_path)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise KafkaNodeError(
                    f"Kafka exited with {proc.returncode} before answering on port {broker_port}:\n"
                    f"{_tail(server_log)}")
            if _api_versions_ok("127.0.0.1", broker_port):
                break
            if time.monotonic() > deadline:
                raise KafkaNodeError(
                    f"Kafka did not answer ApiVersions on 127.0.0.1:{broker_port} within "
                    f"{start_timeout_s:.0f}s:\n{_tail(server_log)}")
            time.sleep(0.2)
        yield f"127.0.0.1:{broker_port}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


# Kafka's request log line (4.x, DEBUG): "Completed request:{json} ..." where the JSON holds
# "requestHeader":{"requestApiKey":..,"requestApiVersion":..,"correlationId":..,"clientId":..,
# "requestApiKeyName":"API_VERSIONS"}; the header object has no nested objects.
_HEADER = re.compile(r'"requestHeader":(\{[^{}]*\})')


def request_versions(path: str | os.PathLike) -> dict[str, dict[str, list[int]]]:
    """{client_id: {API_NAME: sorted versions}} from a request log written with request_log=True."""
    out: dict[str, dict[str, set[int]]] = {}
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return {}
    for m in _HEADER.finditer(text):
        try:
            h = json.loads(m.group(1))
        except ValueError:
            continue
        name = h.get("requestApiKeyName") or f"API_{h.get('requestApiKey')}"
        out.setdefault(h.get("clientId") or "", {}).setdefault(name, set()).add(int(h["requestApiVersion"]))
    return {c: {a: sorted(v) for a, v in sorted(apis.items())} for c, apis in sorted(out.items())}


# ------------------------------------------------------------------------------ a cluster

CONTROLLER_HEAP = "-Xmx384m"
BROKER_HEAP = "-Xmx512m"
# The collector settings Kafka's start scripts give the server (kafka-run-class.sh); the heap
# is bounded above instead of their fixed 1 GiB, so that four JVMs fit beside the other work
# of a small machine.
JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
               "-Djava.awt.headless=true")


class KafkaCluster:
    """A real Kafka KRaft cluster: controllers 1..C (``process.roles=controller``) and brokers
    C+1..C+B (``process.roles=broker``), each its own JVM on free 127.0.0.1 ports.

    The quorum is static: every node gets ``controller.quorum.voters`` (id@127.0.0.1:port),
    and ``kafka.tools.StorageTool format`` runs without ``--standalone`` or
    ``--initial-controllers`` (Kafka 4.4 accepts both ways; with static voters the cluster
    keeps ``kraft.version`` 0, the way kraftcore's own clusters are configured, so the two
    get the same settings). Each node's directory holds ``server.properties``,
    ``log4j2.properties`` (WARN and above, to ``server.log``), ``data/`` (``log.dirs``) and
    ``metadata/`` (``metadata.log.dir``).

    ``format()`` formats every node (untimed, in parallel), ``start()`` starts every JVM
    (``started_at``: ``time.perf_counter()`` just before the first one), ``wait_ready()``
    waits until a controller names a leader through DescribeQuorum on its controller
    listener and every broker answers ApiVersions on its client listener (a Kafka broker
    opens it once it is unfenced). ``kill`` sends SIGKILL, ``restart`` starts the node again on
    its directories, ``stop`` stops every process it started (brokers first, SIGTERM, then
    SIGKILL after STOP_TIMEOUT_S). Use it as a context manager, or call ``stop`` in a
    ``finally``.
    """

    def __init__(self, directory: str | os.PathLike, controllers: int = 3, brokers: int = 1, *,
                 properties: dict[str, object] | None = None, log_level: str = "WARN",
                 controller_heap: str = CONTROLLER_HEAP, broker_heap: str = BROKER_HEAP):
        if not java_available():
            raise KafkaNodeError("java is not installed (Kafka 4.x needs Java 17+)")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.classpath = str(fetch_kafka_jars() / "*")
        self.cluster_id = random_cluster_id()
        ports = iter(free_ports(controllers + brokers))
        self.nodes: dict[int, dict] = {}
        for node_id in range(1, controllers + brokers + 1):
            role = "controller" if node_id <= controllers else "broker"
            self.nodes[node_id] = {"id": node_id, "role": role, "port": next(ports),
                                   "dir": self.directory / f"node-{node_id}",
                                   "heap": controller_heap if role == "controller" else broker_heap}
        voters = ",".join(f"{n['id']}@127.0.0.1:{n['port']}" for n in self.nodes.values()
                          if n["role"] == "controller")
        for node in self.nodes.values():
            node["dir"].mkdir(parents=True, exist_ok=True)
            props = self._properties(node, voters)
            props.update(properties or {})
            node["config"] = node["dir"] / "server.properties"
            node["config"].write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            node["log4j"] = node["dir"] / "log4j2.properties"
            node["log4j"].write_text(_LOG4J2.format(root_level=log_level))
            node["log"] = node["dir"] / "server.log"
            node["metadata_dir"] = node["dir"] / "metadata"
        self.processes: dict[int, subprocess.Popen] = {}
        self.reap: list[subprocess.Popen] = []
        self.started_at: float | None = None

    def _properties(self, node: dict, voters: str) -> dict[str, object]:
        props: dict[str, object] = {
            "process.roles": node["role"],
            "node.id": node["id"],
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": node["dir"] / "data",
            "metadata.log.dir": node["dir"] / "metadata",
        }
        if node["role"] == "controller":
            props["listeners"] = f"CONTROLLER://127.0.0.1:{node['port']}"
        else:
            props.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{node['port']}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node['port']}",
                "inter.broker.listener.name": "PLAINTEXT",
                **_ONE_BROKER,
            })
        return props

    def _java(self, node: dict) -> list[str]:
        return ["java", node["heap"], *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={node['log4j']}", "-cp", self.classpath]

    def controller_ports(self, exclude=()) -> dict[int, int]:
        return {i: n["port"] for i, n in self.nodes.items()
                if n["role"] == "controller" and i not in exclude}

    def broker_ports(self) -> dict[int, int]:
        return {i: n["port"] for i, n in self.nodes.items() if n["role"] == "broker"}

    def pids(self) -> dict[int, int]:
        return {i: p.pid for i, p in self.processes.items() if p.poll() is None}

    def format(self) -> None:
        """StorageTool format of every node with one cluster id (all at once)."""
        running = [(node_id, subprocess.Popen(
            self._java(node) + ["kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                "-c", str(node["config"])],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            for node_id, node in self.nodes.items()]
        failed = []
        for node_id, proc in running:
            try:
                out, _ = proc.communicate(timeout=FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            if proc.returncode != 0:
                failed.append(f"node {node_id} (exit {proc.returncode}):\n"
                              f"{out.decode(errors='replace')[-2000:]}")
        if failed:
            raise KafkaNodeError("kafka.tools.StorageTool format failed: " + "\n".join(failed))

    def _launch(self, node_id: int) -> None:
        node = self.nodes[node_id]
        with open(node["log"], "ab") as out:
            self.processes[node_id] = subprocess.Popen(
                self._java(node) + ["kafka.Kafka", str(node["config"])],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def start(self) -> None:
        """Start every node's JVM, controllers first."""
        self.started_at = time.perf_counter()
        for node_id in self.nodes:
            self._launch(node_id)

    def leader_id(self, timeout_s: float = 2.0) -> int | None:
        """The quorum leader a controller names through DescribeQuorum, or None."""
        import asyncio

        from kraftcore.admin.client import quorum_leader

        for port in self.controller_ports().values():
            leader = asyncio.run(quorum_leader(("127.0.0.1", port), timeout_s))
            if leader is not None:
                return leader
        return None

    def _check_running(self) -> None:
        for node_id, proc in self.processes.items():
            if proc.poll() is not None:
                raise KafkaNodeError(f"Kafka node {node_id} exited with {proc.returncode}:\n"
                                     f"{_tail(self.nodes[node_id]['log'])}")

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> int:
        """Until a leader is known and every broker answers; returns the leader's id."""
        deadline = time.monotonic() + timeout_s
        leader = None
        while True:
            self._check_running()
            if leader is None:
                leader = self.leader_id()
            if leader is not None and all(_api_versions_ok("127.0.0.1", port)
                                          for port in self.broker_ports().values()):
                return leader
            if time.monotonic() > deadline:
                raise KafkaNodeError(f"the Kafka cluster in {self.directory} was not ready "
                                     f"within {timeout_s:.0f}s (leader {leader})")
            time.sleep(0.1)

    def kill(self, node_id: int) -> None:
        """SIGKILL; the process is reaped later, outside any timing."""
        proc = self.processes.pop(node_id)
        proc.kill()
        self.reap.append(proc)

    def restart(self, node_id: int) -> None:
        """Start a killed node again on its directories."""
        for proc in self.reap:
            proc.wait(STOP_TIMEOUT_S)
        self.reap = []
        if node_id in self.processes:
            raise KafkaNodeError(f"node {node_id} is running")
        self._launch(node_id)

    def stop(self) -> None:
        """Stop every process started here: brokers, then controllers (SIGTERM, then
        SIGKILL after STOP_TIMEOUT_S)."""
        brokers = [p for i, p in self.processes.items() if self.nodes[i]["role"] == "broker"]
        controllers = [p for i, p in self.processes.items()
                       if self.nodes[i]["role"] == "controller"]
        try:
            for group in (brokers, controllers):
                for proc in group:
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGTERM)
                for proc in group:
                    try:
                        proc.wait(timeout=STOP_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=STOP_TIMEOUT_S)
        finally:
            for proc in brokers + controllers + self.reap:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT_S)
            self.processes, self.reap = {}, []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def kafka_cluster(tmpdir: str | os.PathLike, controllers: int = 3, brokers: int = 1,
                  **options) -> Iterator[KafkaCluster]:
    """Format and start a `KafkaCluster`, wait until it is ready, yield it; always stopped."""
    cluster = KafkaCluster(tmpdir, controllers, brokers, **options)
    try:
        cluster.format()
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
