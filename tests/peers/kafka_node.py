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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
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
    broker_port, controller_port = free_port(), free_port()
    while controller_port == broker_port:
        controller_port = free_port()
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
