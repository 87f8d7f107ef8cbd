"""A local multi-process cluster on 127.0.0.1: what `kraftcore cluster up | down` run.

`up` writes one Kafka-style properties file per node under `DIR/node-<id>/` (controllers
1..N, brokers N+1..N+M; `combined` makes nodes 1..N both), with free ports, formats every
node's directories with one new cluster id, starts each node as its own process
(`start_node`: output in `DIR/node-<id>/node.log`, rotated by size), waits until the
controllers report a leader, and writes `DIR/cluster.json` — the nodes' ids, roles,
address, pid and directories, plus this supervisor's pid. It then stays in the foreground:
Ctrl-C or SIGTERM stops the brokers (controlled shutdown), then the controllers, each with
SIGTERM, and waits for them (SIGKILL after a grace period). A node that exits on its own is
reported.

`down` reads `DIR/cluster.json` and asks the supervisor to stop the cluster (or, when the
supervisor is gone, each node directly), then waits for every process to exit.

This module owns the supervisor's processes and files; it reports progress through the
`out` callable it is given (one line each) and raises `ClusterError` when it cannot do its
job. `free_ports`, `node_properties` and `start_node` serve tests and benchmarks that start
nodes of their own.
"""

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

from kraftcore.admin.client import quorum_leader
from kraftcore.errors import ClusterError
from kraftcore.limits import LOCAL_CLUSTER_LEADER_WAIT_S_MAX, LOCAL_CLUSTER_STOP_WAIT_S_MAX
from kraftcore.log.meta_properties import format_directories
from kraftcore.runtime.config import NodeConfig
from kraftcore.types import Uuid

__all__ = ["up", "down", "plan", "free_ports", "start_node", "node_properties",
           "CLUSTER_FILE", "NODE_LOG"]

CLUSTER_FILE = "cluster.json"
NODE_LOG = "node.log"
POLL_S = 0.1


def free_ports(count):
    """`count` distinct free TCP ports on 127.0.0.1 (bound and released at once)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def start_node(config_path):
    """Start `kraftcore start CONFIG` as a process of its own (its own session: a Ctrl-C
    meant for the caller does not reach it), logging to `node.log` beside the properties
    file, rotated by size (`kraftcore start --log-file`). Returns the `Popen`."""
    log_path = os.path.join(os.path.dirname(config_path), NODE_LOG)
    # What the process prints before its log file is open (a bad config) goes there too.
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kraftcore.cli.main", "start", config_path,
             "--log-file", log_path],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def node_properties(node_id, roles, voters, port, directory, overrides):
    """The properties text of one node."""
    voter_text = ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(voters.items()))
    listeners = []
    if "broker" in roles:
        listeners.append(f"PLAINTEXT://127.0.0.1:{port['broker']}")
    if "controller" in roles:
        listeners.append(f"CONTROLLER://127.0.0.1:{port['controller']}")
    lines = [
        f"node.id={node_id}",
        f"process.roles={','.join(roles)}",
        f"controller.quorum.voters={voter_text}",
        f"listeners={','.join(listeners)}",
        "controller.listener.names=CONTROLLER",
        f"log.dirs={os.path.join(directory, 'data')}",
        f"metadata.log.dir={os.path.join(directory, 'metadata')}",
    ]
    lines += [f"{key}={value}" for key, value in overrides]
    return "\n".join(lines) + "\n"


def plan(directory, controllers, brokers, combined, overrides):
    """(nodes, voters): nodes [(node id, roles, ports {role: port}, node directory,
    properties path)], voters {node id: controller port}."""
    if controllers < 1:
        raise ClusterError("a cluster needs at least one controller (--controllers >= 1)")
    if brokers < 0:
        raise ClusterError("--brokers must be >= 0")
    if combined:
        # Node i is a controller when i <= N and a broker when i <= M.
        layout = [(i, tuple(r for r, on in (("broker", i <= brokers),
                                             ("controller", i <= controllers)) if on))
                  for i in range(1, max(controllers, brokers) + 1)]
    else:
        layout = [(i, ("controller",)) for i in range(1, controllers + 1)] + \
                 [(i, ("broker",)) for i in range(controllers + 1, controllers + brokers + 1)]
    nodes = []
    ports = iter(free_ports(2 * len(layout)))
    for node_id, roles in layout:
        port = {"controller": next(ports), "broker": next(ports)}
        node_dir = os.path.join(directory, f"node-{node_id}")
        nodes.append((node_id, tuple(roles), port, node_dir,
                      os.path.join(node_dir, "server.properties")))
    voters = {n[0]: n[2]["controller"] for n in nodes if "controller" in n[1]}
    return nodes, voters


def _wait_for_leader(voters, stopping=()):
    deadline = time.monotonic() + LOCAL_CLUSTER_LEADER_WAIT_S_MAX
    while time.monotonic() < deadline and not stopping:
        for port in voters.values():
            leader = asyncio.run(quorum_leader(("127.0.0.1", port)))
            if leader is not None:
                return leader
        time.sleep(POLL_S)
    return None


def up(directory, controllers, brokers, combined, overrides, out=print):
    """Plan, format and start the cluster, then supervise it until Ctrl-C or SIGTERM (see
    the module docstring); returns 0 when every node stopped cleanly, else 1. `overrides`:
    [(key, value)] for every node's properties; `out(line)` reports progress."""
    directory = os.path.abspath(directory)
    if os.path.exists(os.path.join(directory, CLUSTER_FILE)):
        raise ClusterError(f"{directory} already holds a cluster ({CLUSTER_FILE}); stop it with "
                           f"'kraftcore cluster down --dir {directory}' or use another --dir")
    nodes, voters = plan(directory, controllers, brokers, combined, overrides)
    cluster_id = str(Uuid.random(random.SystemRandom()))
    for node_id, roles, port, node_dir, path in nodes:
        os.makedirs(node_dir, exist_ok=True)
        with open(path, "w") as f:
            f.write(node_properties(node_id, roles, voters, port, node_dir, overrides))
        format_directories(NodeConfig.from_file(path), cluster_id)
    out(f"cluster {cluster_id}: {len(voters)} controllers, "
        f"{sum('broker' in n[1] for n in nodes)} brokers in {directory}")
    processes = {}
    # Ctrl-C and SIGTERM are noted from here on, not obeyed at once: whether they come while
    # the nodes start, while they run or while they stop, every node is stopped (a node
    # runs in a session of its own and would outlive this process).
    stopping = []
    previous = {s: signal.signal(s, lambda signum, frame: stopping.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    clean = False
    try:
        for node_id, roles, port, node_dir, path in nodes:
            if stopping:
                break
            processes[node_id] = start_node(path)
        leader = _wait_for_leader(voters, stopping)  # None at once when stopping
        if stopping:
            out("stopped before the cluster was up")
            return 1
        if leader is None:
            raise ClusterError(f"no controller reported a leader within "
                               f"{LOCAL_CLUSTER_LEADER_WAIT_S_MAX} s; see "
                               f"the node.log files under {directory}")
        description = {"cluster_id": cluster_id, "supervisor_pid": os.getpid(), "nodes": [
            {"id": node_id, "roles": list(roles), "host": "127.0.0.1",
             "port": port["controller"] if "controller" in roles else port["broker"],
             "ports": {r: port[r] for r in roles}, "pid": processes[node_id].pid,
             "dirs": [os.path.join(node_dir, "data"), os.path.join(node_dir, "metadata")],
             "config": path}
            for node_id, roles, port, node_dir, path in nodes]}
        tmp = os.path.join(directory, CLUSTER_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(description, f, indent=2)
        os.replace(tmp, os.path.join(directory, CLUSTER_FILE))
        out(f"quorum leader: node {leader}; cluster description in "
            f"{os.path.join(directory, CLUSTER_FILE)}")
        clean = _supervise(processes, out, stopping)
    finally:
        clean = _stop_all(processes, nodes, out) and clean
        try:
            os.remove(os.path.join(directory, CLUSTER_FILE))
        except FileNotFoundError:
            pass
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if clean else 1


def _supervise(processes, out, stopping):
    """Until Ctrl-C or SIGTERM: report nodes that exit. Returns whether none did."""
    reported = set()
    while not stopping:
        for node_id, process in processes.items():
            if node_id not in reported and process.poll() is not None:
                reported.add(node_id)
                out(f"node {node_id} exited with status {process.returncode}")
        time.sleep(POLL_S)
    return not reported


def _stop_all(processes, nodes, out):
    """SIGTERM to the brokers, then to the controllers; a node that does not stop within
    `limits.LOCAL_CLUSTER_STOP_WAIT_S_MAX` is killed. Returns whether every node stopped
    cleanly (exit status 0)."""
    if not processes:
        return True
    clean = True
    out("stopping the cluster: brokers first, then controllers")
    roles = {node[0]: node[1] for node in nodes}
    for group in ([i for i in processes if "controller" not in roles[i]],
                  [i for i in processes if "controller" in roles[i]]):
        for node_id in group:
            if processes[node_id].poll() is None:
                processes[node_id].send_signal(signal.SIGTERM)
        for node_id in group:
            process = processes[node_id]
            try:
                process.wait(LOCAL_CLUSTER_STOP_WAIT_S_MAX)
            except subprocess.TimeoutExpired:
                out(f"node {node_id} did not stop in {LOCAL_CLUSTER_STOP_WAIT_S_MAX} s: "
                    "killing it")
                process.kill()
                process.wait()
            clean = clean and process.returncode == 0
    out("cluster stopped")
    return clean


def down(directory, out=print):
    """Stop the cluster running in `directory` and wait for its processes; returns 0."""
    path = os.path.join(os.path.abspath(directory), CLUSTER_FILE)
    try:
        with open(path) as f:
            description = json.load(f)
    except FileNotFoundError:
        raise ClusterError(f"no cluster runs in {directory} (no {CLUSTER_FILE})") from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from None
    pids = [node["pid"] for node in description.get("nodes", [])]
    supervisor = description.get("supervisor_pid")
    if supervisor is not None and _alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        watched = [supervisor] + pids
    else:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        watched = pids
    deadline = time.monotonic() + 2 * LOCAL_CLUSTER_STOP_WAIT_S_MAX + 5
    while any(_alive(pid) for pid in watched):
        if time.monotonic() > deadline:
            raise ClusterError(f"processes {[p for p in watched if _alive(p)]} did not stop")
        time.sleep(POLL_S)
    out(f"cluster in {directory} stopped")
    return 0


def _alive(pid):
    """Whether process `pid` still runs (a zombie, dead but not yet reaped by its parent,
    does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): kill(0) is the best answer there is
