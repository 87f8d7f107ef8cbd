"""A local multi-process cluster on 127.0.0.1: what `kraftcore cluster up | down | kill |
stop | start` run.

`up` writes one Kafka-style properties file per node under `DIR/node-<id>/` (controllers
1..N, brokers N+1..N+M; `combined` makes nodes 1..N both), with free ports, formats every
node's directories with one new cluster id, and hands the plan (`DIR/cluster-plan.json`)
to a supervisor. The supervisor (`supervise`: `kraftcore cluster supervise`, a process of
its own logging to `DIR/supervisor.log`; or `up` itself with `foreground`) starts each node
as its own process (`start_node`: output in `DIR/node-<id>/node.log`, rotated by size),
waits until the controllers report a leader, and writes `DIR/cluster.json` — the nodes'
ids, roles, addresses, pids and directories, plus the supervisor's pid. `up` then waits
until every broker is unfenced (or says which are not) and prints a table of the nodes and
the strings to paste (`bootstrap.servers=...`, `--bootstrap-controller ...`).

The supervisor reports a node that exits; `node_action` (`cluster kill | stop NODE`)
SIGKILLs or SIGTERMs one node, noted as asked for, and `cluster start NODE` has the
supervisor start it again (through a file in `DIR/control/`). SIGTERM (what `down` sends)
or Ctrl-C on a foreground `up` stops the brokers (controlled shutdown), then the
controllers, each with SIGTERM, and waits for them (SIGKILL after a grace period).

`down` reads `DIR/cluster.json`, asks the supervisor to stop the cluster (or, when the
supervisor is gone, each node directly), SIGTERMs any other `kraftcore start` process whose
properties file lies in the cluster's directory (a node restarted by hand), and waits for
every one to exit.

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

from kraftcore.admin.client import AdminClient, quorum_leader
from kraftcore.errors import ClusterError, KraftcoreError
from kraftcore.limits import LOCAL_CLUSTER_LEADER_WAIT_S_MAX, LOCAL_CLUSTER_STOP_WAIT_S_MAX
from kraftcore.log.meta_properties import format_directories
from kraftcore.runtime.config import NodeConfig
from kraftcore.runtime.security import NodeSecurity
from kraftcore.types import Uuid

__all__ = ["up", "supervise", "node_action", "down", "plan", "free_ports", "start_node",
           "node_properties", "CLUSTER_FILE", "NODE_LOG"]

CLUSTER_FILE = "cluster.json"
PLAN_FILE = "cluster-plan.json"
SUPERVISOR_LOG = "supervisor.log"
CONTROL_DIR = "control"
START = "start-"  # control/start-<id>: `cluster start` asks the supervisor for that node
EXPECT_EXIT = "stopping-"  # control/stopping-<id>: `cluster stop | kill` stopped that one
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


def _client_options(config_path):
    """The options the supervisor reaches the controllers with: those of the node whose
    configuration is at `config_path` (its trust store, client certificate and SASL
    credentials on the controller listener, when that listener is secured)."""
    config = NodeConfig.from_file(config_path)
    return NodeSecurity(config, lambda: None).client_options(
        config.controller_listener_name, config.security.controller_mechanism)


def _wait_for_leader(voters, stopping=(), options=None):
    deadline = time.monotonic() + LOCAL_CLUSTER_LEADER_WAIT_S_MAX
    while time.monotonic() < deadline and not stopping:
        for port in voters.values():
            leader = asyncio.run(quorum_leader(("127.0.0.1", port), connection_options=options))
            if leader is not None:
                return leader
        time.sleep(POLL_S)
    return None


def up(directory, controllers, brokers, combined, overrides, out=print, foreground=False):
    """Plan and format the cluster, start it under a supervisor and report it (see the
    module docstring). With `foreground` this process is the supervisor, until Ctrl-C or
    SIGTERM: returns 0 when every node stopped cleanly, else 1. Otherwise the supervisor
    runs on its own (`kraftcore cluster supervise`) and this returns once every broker is
    unfenced (0), or says which are not (1). `overrides`: [(key, value)] for every node's
    properties; `out(line)` reports progress."""
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
    _write_json(os.path.join(directory, PLAN_FILE), {"cluster_id": cluster_id, "nodes": [
        {"id": node_id, "roles": list(roles), "ports": {r: port[r] for r in roles},
         "dir": node_dir, "config": path} for node_id, roles, port, node_dir, path in nodes]})
    out(f"cluster {cluster_id}: {len(voters)} controllers, "
        f"{sum('broker' in n[1] for n in nodes)} brokers in {directory}")
    if foreground:
        return supervise(directory, out, announce=True)
    log_path = os.path.join(directory, SUPERVISOR_LOG)
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "kraftcore.cli.main", "cluster", "supervise", "--dir",
             directory], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    path = os.path.join(directory, CLUSTER_FILE)
    deadline = time.monotonic() + LOCAL_CLUSTER_LEADER_WAIT_S_MAX + 10
    while not os.path.exists(path):
        if supervisor.poll() is not None or time.monotonic() > deadline:
            if supervisor.poll() is None:
                supervisor.terminate()
            raise ClusterError(f"the cluster did not come up; the supervisor's log "
                               f"({log_path}) ends with: {_tail(log_path)}")
        time.sleep(POLL_S)
    description = _read_description(directory)
    return 0 if _announce(description, out) else 1


def supervise(directory, out=print, announce=False):
    """Start the nodes `up` planned in `directory`, write cluster.json once the quorum has
    a leader, then supervise them until Ctrl-C or SIGTERM: report a node that exits, start
    one again when `cluster start` asks, and in the end stop them all. Returns 0 when every
    node stopped cleanly (nodes stopped by `cluster stop | kill` count as clean), else 1.
    `announce`: print the nodes and the broker check once up (the foreground `up`)."""
    directory = os.path.abspath(directory)
    try:
        with open(os.path.join(directory, PLAN_FILE)) as f:
            planned = json.load(f)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"no cluster planned in {directory}: {exc}") from None
    nodes = {n["id"]: n for n in planned["nodes"]}
    voters = {i: n["ports"]["controller"] for i, n in nodes.items()
              if "controller" in n["roles"]}
    processes = {}
    # Ctrl-C and SIGTERM are noted from here on, not obeyed at once: whether they come while
    # the nodes start, while they run or while they stop, every node is stopped (a node
    # runs in a session of its own and would outlive this process).
    stopping = []
    previous = {s: signal.signal(s, lambda signum, frame: stopping.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    os.makedirs(os.path.join(directory, CONTROL_DIR), exist_ok=True)
    clean = False
    try:
        for node_id, node in sorted(nodes.items()):
            if stopping:
                break
            processes[node_id] = start_node(node["config"])
        options = _client_options(next(n["config"] for n in nodes.values()
                                       if "controller" in n["roles"]))
        leader = _wait_for_leader(voters, stopping, options)  # None at once when stopping
        if stopping:
            out("stopped before the cluster was up")
            return 1
        if leader is None:
            raise ClusterError(f"no controller reported a leader within "
                               f"{LOCAL_CLUSTER_LEADER_WAIT_S_MAX} s; see "
                               f"the node.log files under {directory}")
        description = {"cluster_id": planned["cluster_id"], "supervisor_pid": os.getpid(),
                       "nodes": [_node_entry(node, processes[i].pid)
                                 for i, node in sorted(nodes.items())]}
        _write_json(os.path.join(directory, CLUSTER_FILE), description)
        out(f"quorum leader: node {leader}; cluster description in "
            f"{os.path.join(directory, CLUSTER_FILE)}")
        if announce:
            _announce(description, out, stopping)
        clean = _supervise(directory, description, processes, nodes, out, stopping)
    finally:
        clean = _stop_all(processes, nodes, out) and clean
        try:
            os.remove(os.path.join(directory, CLUSTER_FILE))
        except FileNotFoundError:
            pass
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if clean else 1


def _node_entry(node, pid):
    roles = node["roles"]
    return {"id": node["id"], "roles": roles, "host": "127.0.0.1",
            "port": node["ports"]["controller" if "controller" in roles else "broker"],
            "ports": node["ports"], "pid": pid,
            "dirs": [os.path.join(node["dir"], "data"), os.path.join(node["dir"], "metadata")],
            "config": node["config"]}


def _announce(description, out, stopping=()):
    """Wait until every broker is unfenced (bounded), then print the nodes and the strings
    to paste. Returns whether every broker is unfenced."""
    nodes = description["nodes"]
    options = _client_options(next(n["config"] for n in nodes if "controller" in n["roles"]))
    brokers = sorted(n["id"] for n in nodes if "broker" in n["roles"])
    controllers = [f"127.0.0.1:{n['ports']['controller']}" for n in nodes
                   if "controller" in n["roles"]]
    states = {}
    deadline = time.monotonic() + LOCAL_CLUSTER_LEADER_WAIT_S_MAX
    while brokers and not stopping and time.monotonic() < deadline:
        states = asyncio.run(_broker_states(controllers, options))
        if all(states.get(b) == "unfenced" for b in brokers):
            break
        time.sleep(POLL_S * 5)
    width = max(len(",".join(n["roles"])) for n in nodes)
    out(f"  {'node':<5} {'roles':<{width}}  {'address':<16} pid")
    for n in nodes:
        address = " ".join(f"127.0.0.1:{n['ports'][r]}" for r in n["roles"])
        out(f"  {n['id']:<5} {','.join(n['roles']):<{width}}  {address:<16} {n['pid']}")
    if brokers:
        out("  clients:  bootstrap.servers=" + ",".join(
            f"127.0.0.1:{n['ports']['broker']}" for n in nodes if "broker" in n["roles"]))
    out(f"  admin:    --bootstrap-controller {controllers[0]}")
    late = [b for b in brokers if states.get(b) != "unfenced"]
    if late:
        out("  not unfenced after {} s: {}".format(LOCAL_CLUSTER_LEADER_WAIT_S_MAX, ", ".join(
            f"broker {b} ({states.get(b, 'not registered')})" for b in late)))
        return False
    if brokers:
        out(f"  every broker is unfenced: {', '.join(map(str, brokers))}")
    return True


async def _broker_states(controllers, options):
    """{broker id: state} as the first controller that answers lists them."""
    for address in controllers:
        host, port = address.rsplit(":", 1)
        try:
            async with AdminClient((host, int(port)), timeout_ms=2000,
                                   connection_options=options) as admin:
                return {b["id"]: b["state"] for b in await admin.list_brokers()}
        except (KraftcoreError, OSError):
            continue
    return {}


def _supervise(directory, description, processes, nodes, out, stopping):
    """Until Ctrl-C or SIGTERM: report nodes that exit, and start again the ones `cluster
    start` asks for. Returns whether no node exited unasked."""
    control = os.path.join(directory, CONTROL_DIR)
    reported = set()
    unasked = set()
    while not stopping:
        for node_id, process in list(processes.items()):
            if node_id not in reported and process.poll() is not None:
                reported.add(node_id)
                marker = os.path.join(control, f"{EXPECT_EXIT}{node_id}")
                if os.path.exists(marker):
                    os.remove(marker)
                    out(f"node {node_id} stopped (status {process.returncode}), as asked")
                else:
                    unasked.add(node_id)
                    out(f"node {node_id} exited with status {process.returncode}")
        for name in sorted(os.listdir(control)):
            if not name.startswith(START):
                continue
            os.remove(os.path.join(control, name))
            node_id = int(name[len(START):])
            process = processes.get(node_id)
            if node_id not in nodes or (process is not None and process.poll() is None):
                continue
            processes[node_id] = start_node(nodes[node_id]["config"])
            reported.discard(node_id)
            for entry in description["nodes"]:
                if entry["id"] == node_id:
                    entry["pid"] = processes[node_id].pid
            _write_json(os.path.join(directory, CLUSTER_FILE), description)
            out(f"node {node_id} started again (pid {processes[node_id].pid})")
        time.sleep(POLL_S)
    return not unasked


def _stop_all(processes, nodes, out):
    """SIGTERM to the brokers, then to the controllers; a node that does not stop within
    `limits.LOCAL_CLUSTER_STOP_WAIT_S_MAX` is killed. Returns whether every node still
    running stopped cleanly (exit status 0)."""
    running = {i: p for i, p in processes.items() if p.poll() is None}
    if not running:
        out("cluster stopped")
        return True
    clean = True
    out("stopping the cluster: brokers first, then controllers")
    for group in ([i for i in running if "controller" not in nodes[i]["roles"]],
                  [i for i in running if "controller" in nodes[i]["roles"]]):
        for node_id in group:
            if running[node_id].poll() is None:
                running[node_id].send_signal(signal.SIGTERM)
        for node_id in group:
            process = running[node_id]
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


def node_action(directory, action, node_id, out=print):
    """`cluster kill | stop | start NODE`: SIGKILL or SIGTERM one node (its supervisor
    notes it as asked for), or start a stopped one again (through the supervisor when it
    runs, which then watches it as before). Returns 0, or raises ClusterError."""
    directory = os.path.abspath(directory)
    description = _read_description(directory)
    node = next((n for n in description["nodes"] if n["id"] == node_id), None)
    if node is None:
        raise ClusterError(f"no node {node_id} in the cluster in {directory} (nodes: "
                           f"{', '.join(str(n['id']) for n in description['nodes'])})")
    control = os.path.join(directory, CONTROL_DIR)
    os.makedirs(control, exist_ok=True)
    pid = node["pid"]
    if action in ("kill", "stop"):
        if not _alive(pid):
            out(f"node {node_id} is not running")
            return 0
        open(os.path.join(control, f"{EXPECT_EXIT}{node_id}"), "w").close()
        os.kill(pid, signal.SIGKILL if action == "kill" else signal.SIGTERM)
        deadline = time.monotonic() + LOCAL_CLUSTER_STOP_WAIT_S_MAX
        while _alive(pid):
            if time.monotonic() > deadline:
                raise ClusterError(f"node {node_id} (pid {pid}) did not stop within "
                                   f"{LOCAL_CLUSTER_STOP_WAIT_S_MAX} s; "
                                   f"'kraftcore cluster kill {node_id}' ends it at once")
            time.sleep(POLL_S)
        out(f"node {node_id} {'killed' if action == 'kill' else 'stopped'} (pid {pid})")
        return 0
    if action != "start":
        raise ClusterError(f"unknown action {action!r} (kill, stop or start)")
    if _alive(pid):
        out(f"node {node_id} already runs (pid {pid})")
        return 0
    supervisor = description.get("supervisor_pid")
    if supervisor is None or not _alive(supervisor):
        raise ClusterError(f"the cluster's supervisor (pid {supervisor}) no longer runs; "
                           f"start the node by hand: kraftcore start {node['config']}")
    open(os.path.join(control, f"{START}{node_id}"), "w").close()
    deadline = time.monotonic() + LOCAL_CLUSTER_LEADER_WAIT_S_MAX
    while True:
        entry = next(n for n in _read_description(directory)["nodes"] if n["id"] == node_id)
        if entry["pid"] != pid and _alive(entry["pid"]):
            out(f"node {node_id} started (pid {entry['pid']})")
            return 0
        if time.monotonic() > deadline:
            raise ClusterError(f"the supervisor did not start node {node_id} within "
                               f"{LOCAL_CLUSTER_LEADER_WAIT_S_MAX} s")
        time.sleep(POLL_S)


def down(directory, out=print):
    """Stop the cluster running in `directory` and wait for its processes, nodes started by
    hand from its directories included; returns 0."""
    given, directory = directory, os.path.abspath(directory)
    description = _read_description(directory)
    pids = [node["pid"] for node in description.get("nodes", [])]
    pids += [pid for pid in _started_from(directory) if pid not in pids]
    supervisor = description.get("supervisor_pid")
    if supervisor is not None and _alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        watched = [supervisor] + pids
        # the supervisor stops the nodes it runs; what else runs from here gets SIGTERM too
        strays = [pid for pid in pids if pid not in _supervised(description)]
    else:
        watched = strays = pids
    for pid in strays:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2 * LOCAL_CLUSTER_STOP_WAIT_S_MAX + 5
    while any(_alive(pid) for pid in watched):
        if time.monotonic() > deadline:
            raise ClusterError(f"processes {[p for p in watched if _alive(p)]} did not stop")
        time.sleep(POLL_S)
    try:
        os.remove(os.path.join(directory, CLUSTER_FILE))  # left by a supervisor killed -9
    except FileNotFoundError:
        pass
    out(f"cluster in {given} stopped")
    return 0


def _supervised(description):
    return {node["pid"] for node in description.get("nodes", [])}


def _started_from(directory):
    """The pids of `kraftcore start` processes whose properties file lies in `directory`
    (nodes started by hand from the cluster's files), from /proc; none without /proc."""
    prefix = os.path.join(directory, "")
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "start" in argv and any(a.startswith(prefix) and a.endswith(".properties")
                                   for a in argv) and any("kraftcore" in a for a in argv):
            found.append(int(entry))
    return found


def _read_description(directory):
    path = os.path.join(directory, CLUSTER_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ClusterError(f"no cluster runs in {directory} (no {CLUSTER_FILE})") from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from None


def _write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
    os.replace(tmp, path)


def _tail(path, n=2000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip() or "(nothing)"
    except OSError:
        return "(no log)"


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
