"""Consumer-group members of four real Kafka clients, each a process of its own that the
test reads and may SIGKILL, and the wire checks beside them.

* ``Member(client, bootstrap, topic, group, **options)`` starts one member:
  ``python -m tests.peers.group_member`` for kafka-python, confluent-kafka and aiokafka,
  ``node kafkajs/group.js`` for KafkaJS (``CLIENTS``). Each subscribes with the client's own
  group protocol (JoinGroup, SyncGroup, Heartbeat, its default assignor), processes, then
  commits synchronously (at-least-once), and prints what it did as JSON lines
  (``group_member``'s docstring). A reader thread keeps them: ``assignment`` (the latest
  the client reported), ``processed`` ({(partition, offset)}), ``committed`` ({partition:
  next offset}, the latest successful commits). ``stop()`` asks it to close (LeaveGroup)
  and waits; ``kill()`` SIGKILLs it. A client library or node that is missing fails
  (ImportError, ``clients.PeerError``), never skips.
* ``Wire(host, port)``: one raw connection speaking Kafka's frames
  (``kraftcore.protocol.framing``), for the checks the clients do not show and for
  requests no client would send. ``coordinator(bootstrap, group)`` finds a group's
  coordinator (FindCoordinator), ``describe(bootstrap, group)`` answers its DescribeGroups
  with each member's assignment decoded (the consumer protocol's bytes),
  ``committed(bootstrap, group, topic, partitions)`` its OffsetFetch.
* ``wait_until(what, predicate, members=())`` is a bounded wait whose failure carries the
  members' event counts and the tails of their stderr.

Every process started here ends by itself (its ``timeout_s``), and ``stop_all`` ends the
rest; no wait is a timing goal.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kraftcore.protocol import framing
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from tests.peers import clients
from tests.runtime.processes import wait_for

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka", "kafkajs")
_MODULES = {"kafka-python": "kafka", "confluent-kafka": "confluent_kafka",
            "aiokafka": "aiokafka"}
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
STOP_S = 30.0


def require(client):
    """Fail (ImportError, PeerError) when `client` cannot run here."""
    if client == "kafkajs":
        clients.ensure_kafkajs()
    else:
        __import__(_MODULES[client])


class Member:
    """One member process (module docstring). `options`: session_ms, heartbeat_ms,
    rebalance_ms, process_ms, max_records, fetch_bytes, timeout_s."""

    def __init__(self, client, bootstrap, topic, group, name=None, **options):
        require(client)
        self.client, self.group, self.topic = client, group, topic
        self.name = name or client
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as the process
        args = {"client": client, "bootstrap": bootstrap, "topic": topic, "group": group,
                **options}
        if client == "kafkajs":
            camel = {"session_ms": "sessionMs", "heartbeat_ms": "heartbeatMs",
                     "rebalance_ms": "rebalanceMs", "process_ms": "processMs",
                     "fetch_bytes": "fetchBytes", "timeout_s": "timeoutS"}
            args = {camel.get(k, k): v for k, v in args.items() if k != "max_records"}
            argv = ["node", str(clients.KAFKAJS_DIR / "group.js"), json.dumps(args)]
            cwd = clients.KAFKAJS_DIR
        else:
            argv = [sys.executable, "-m", "tests.peers.group_member", json.dumps(args)]
            cwd = REPO
        self.events = []  # (monotonic time, event dict), in the order printed
        self._changed = threading.Condition()
        self.process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr,
                                        env={**os.environ,
                                             "KAFKAJS_NO_PARTITIONER_WARNING": "1"})
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"member-{self.name}")
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self.events.append((time.monotonic(), event))
                self._changed.notify_all()

    # ------------------------------------------------------------------ views

    @property
    def pid(self):
        return self.process.pid

    def alive(self):
        return self.process.poll() is None

    def _of(self, kind):
        with self._changed:
            return [(t, e) for t, e in self.events if e["e"] == kind]

    @property
    def assignment(self):
        """The partitions of the latest assignment the client reported (None: none yet)."""
        found = self._of("assigned")
        return found[-1][1]["partitions"] if found else None

    def assignments(self):
        """Every assignment it reported: [(monotonic time, [partitions])]."""
        return [(t, e["partitions"]) for t, e in self._of("assigned")]

    @property
    def processed(self):
        return {(p, o) for _, e in self._of("processed") for p, o in e["records"]}

    def processed_in_order(self):
        return [(t, p, o) for t, e in self._of("processed") for p, o in e["records"]]

    @property
    def committed(self):
        out = {}
        for _, e in self._of("committed"):
            for p, o in e["offsets"].items():
                out[int(p)] = o
        return out

    def fatal(self):
        return [e.get("error") for _, e in self._of("fatal")]

    def stderr_tail(self, n=1500):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-n:]

    def summary(self):
        counts = {}
        with self._changed:
            for _, e in self.events:
                counts[e["e"]] = counts.get(e["e"], 0) + 1
        return (f"{self.name} pid {self.pid} exit {self.process.poll()} events {counts} "
                f"assignment {self.assignment} committed {self.committed}\n"
                f"  stderr: {self.stderr_tail()!r}")

    # ------------------------------------------------------------------ actions

    def stop(self, wait_s=STOP_S):
        """Ask it to close (it leaves the group) and wait; SIGKILL after `wait_s`."""
        if self.alive():
            self._say_stop()
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)

    def _say_stop(self):
        try:
            if not self.process.stdin.closed:
                self.process.stdin.write(b"stop\n")
                self.process.stdin.close()
        except (OSError, ValueError):
            pass  # it exited meanwhile

    def kill(self):
        """SIGKILL: no LeaveGroup, no commit; the coordinator learns of it only from its
        session timeout."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_S)
        self._reader.join(5)

    def closed_cleanly(self):
        return self.process.poll() == 0 and bool(self._of("closed"))


def stop_all(members):
    """Stop every member at once (each leaves the group), then wait for each."""
    for member in members:
        if member.alive():
            member._say_stop()
    for member in members:
        member.stop()


def wait_until(what, predicate, members=(), wait_s=WAIT_S):
    """`processes.wait_for` (`predicate()` until it returns something true, an
    AssertionError meaning "not yet"), whose failure also carries every member's summary."""
    try:
        return wait_for(what, predicate, wait_s)
    except AssertionError as exc:
        details = "\n".join(member.summary() for member in members)
        raise AssertionError(f"{exc}\n{details}") from None


def owners(members):
    """{partition: [member names]} of the members' latest assignments (live ones only)."""
    out = {}
    for member in members:
        if member.alive():
            for p in member.assignment or ():
                out.setdefault(p, []).append(member.name)
    return out


def one_owner_each(members, partitions):
    """The owners when every partition of range(partitions) is assigned to exactly one live
    member and every live member reported an assignment; else raise AssertionError (a
    wait's "not yet")."""
    live = [x for x in members if x.alive()]
    if any(x.assignment is None for x in live):
        raise AssertionError(f"not every member has an assignment: "
                             f"{[(x.name, x.assignment) for x in live]}")
    found = owners(live)
    if sorted(found) != list(range(partitions)) or any(len(v) != 1 for v in found.values()):
        raise AssertionError(f"partitions not owned exactly once: {found}")
    return found


# ----------------------------------------------------------------------------- wire


def consumer_assignment(data):
    """{topic: [partitions]} of a consumer protocol assignment (ConsumerProtocolAssignment:
    version int16, [topic string, [int32]], user data)."""
    data = bytes(data)
    if len(data) < 6:
        return {}
    pos = 2
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = {}
    for _ in range(max(count, 0)):
        (size,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2:pos + 2 + size].decode()
        pos += 2 + size
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out[topic] = sorted(struct.unpack_from(f">{n}i", data, pos)) if n > 0 else []
        pos += 4 * max(n, 0)
    return out


class Wire:
    """A raw connection to one broker: `call(body, version)` sends a request and returns
    its decoded answer; `send_frame` / `read(api_key, version)` for hand-made frames."""

    def __init__(self, host, port, timeout_s=30.0, client_id="kraftcore-wire"):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation = 0
        self.client_id = client_id

    @classmethod
    def to(cls, address, **kw):
        host, port = address.rsplit(":", 1)
        return cls(host, int(port), **kw)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def send_frame(self, frame):
        self.sock.sendall(frame)

    def frame(self, body, version):
        self.correlation += 1
        return framing.encode_request(body, version, self.correlation, self.client_id)

    def read(self, api_key, version):
        (size,) = struct.unpack(">i", self._exactly(4))
        cid, body = framing.decode_response(self._exactly(size), api_key, version)
        if cid != self.correlation:
            raise AssertionError(f"answer to correlation id {cid}, expected {self.correlation}")
        return body

    def _exactly(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def call(self, body, version):
        self.send_frame(self.frame(body, version))
        return self.read(body.api_key, version)


def coordinator(bootstrap, group, wait_s=WAIT_S):
    """"host:port" of `group`'s coordinator, asked of the first broker of `bootstrap` that
    answers without error (retried while COORDINATOR_NOT_AVAILABLE, e.g. while the offsets
    topic is created or its leader moves)."""
    def ask():
        for address in bootstrap.split(","):
            try:
                with Wire.to(address, timeout_s=5) as w:
                    r = w.call(m.FindCoordinatorRequest(key=group, key_type=0), 3)
            except OSError:
                continue
            if r.error_code == 0:
                return f"{r.host}:{r.port}"
        return None
    return wait_until(f"the coordinator of group {group!r}", ask, wait_s=wait_s)


def describe(bootstrap, group):
    """DescribeGroups v5 of `group` at its coordinator: {"error", "state", "protocol",
    "members": [{"member_id", "client_id", "partitions": {topic: [p]}}]}."""
    with Wire.to(coordinator(bootstrap, group)) as w:
        r = w.call(m.DescribeGroupsRequest(groups=[group], include_authorized_operations=False), 5)
    g = r.groups[0]
    return {"error": g.error_code, "state": g.group_state, "protocol": g.protocol_data,
            "protocol_type": g.protocol_type,
            "members": [{"member_id": x.member_id, "client_id": x.client_id,
                         "partitions": consumer_assignment(x.member_assignment)}
                        for x in g.members]}


def committed(bootstrap, group, topic, partitions):
    """{partition: committed offset (-1: none)} of `group` from its coordinator (OffsetFetch
    v7, require_stable false)."""
    cls = m.OffsetFetchRequest
    with Wire.to(coordinator(bootstrap, group)) as w:
        r = w.call(cls(group_id=group, topics=[cls.OffsetFetchRequestTopic(
            name=topic, partition_indexes=list(range(partitions)))], require_stable=False), 7)
    if r.error_code != ErrorCode.NONE:
        raise AssertionError(f"OffsetFetch of {group!r}: error {r.error_code}")
    return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}
