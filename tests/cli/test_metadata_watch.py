"""`kraftcore metadata watch` against real processes on 127.0.0.1 (`kraftcore cluster up`):
a topic created and a broker killed with SIGKILL show up as they commit, in text and in
--json; the watch keeps going when the active controller it reads from is killed, and says
which leader it follows then; --from-beginning prints the snapshot the leader's log starts
at as one line, and --max-records stops it there; Ctrl-C stops it with status 0; an
address where nothing listens is one error line. Every wait is bounded
(tests.runtime.processes.WAIT_S); none is a timing goal."""

import json
import re
import signal
import subprocess
import sys
import threading

from kraftcore.runtime.local_cluster import free_ports

from tests.runtime.processes import WAIT_S, LocalCluster, kraftcore, stop, wait_for

# Short sessions and elections (as in tests/runtime/test_processes.py): a killed broker is
# fenced after 4 s, and a killed controller replaced within a few seconds.
SETTINGS = ["controller.quorum.election.timeout.ms=300",
            "controller.quorum.fetch.timeout.ms=600",
            "controller.quorum.request.timeout.ms=1000", "broker.session.timeout.ms=4000",
            "broker.heartbeat.interval.ms=200",
            # A snapshot every second: a node's log then starts at its previous snapshot.
            "metadata.log.max.snapshot.interval.ms=1000"]
LINE = re.compile(r"^offset (\d+), epoch (\d+): (.+)$")


class Watch:
    """`kraftcore metadata watch ARGS` as a process; `out` and `err` fill with its lines as
    it prints them."""

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kraftcore.cli.main", "metadata", "watch", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out, self.err = [], []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.process.stdout, self.out),
                                               (self.process.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_out(self, what, predicate):
        """The first stdout line for which `predicate(line)` holds, once there is one."""
        return wait_for(what, lambda: next((x for x in list(self.out) if predicate(x)), None)
                        or self._check_running())

    def wait_err(self, what, predicate):
        return wait_for(what, lambda: next((x for x in list(self.err) if predicate(x)), None)
                        or self._check_running())

    def _check_running(self):
        assert self.process.poll() is None, \
            f"the watch exited {self.process.returncode}: {self.err}"

    def interrupt(self):
        """Ctrl-C; returns the exit status."""
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(WAIT_S)
        for reader in self._readers:
            reader.join(WAIT_S)
        return status

    def stop(self):
        stop(self.process)


def docs(watch):
    return [json.loads(line) for line in list(watch.out)]


def test_watch_follows_topics_fencing_and_a_controller_failover(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", SETTINGS, brokers=2)
    watches = []
    try:
        wait_for("two unfenced brokers",
                 lambda: cluster.brokers() == {4: "unfenced", 5: "unfenced"})
        leader = cluster.quorum()["leader_id"]
        # The text watch is bootstrapped at the active controller, which is killed later:
        # it must find the next leader through the controllers it learnt of.
        text = Watch("--bootstrap-controller", cluster.bootstrap(exclude=(
            set(cluster.pids) - {leader})))
        as_json = Watch("--bootstrap-controller", cluster.bootstrap(exclude=(leader,)),
                        "--json")
        watches += [text, as_json]
        for watch in watches:
            watch.wait_err("the watch caught up", lambda x: "changes from offset" in x)

        kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(),
                  "--topic", "orders", "--partitions", "3", "--replication-factor", "2")
        created = text.wait_out("the topic", lambda x: "topic orders created" in x)
        text.wait_out("its partitions", lambda x: "orders-2 created: replicas" in x)
        doc = wait_for("the topic in JSON", lambda: next(
            (d for d in docs(as_json) if d["type"] == "TOPIC_RECORD"), None))
        assert doc["data"]["name"] == "orders" and doc["change"] in created
        assert set(doc) == {"offset", "epoch", "timestamp", "type", "version", "change",
                            "data"}
        assert created == f"offset {doc['offset']}, epoch {doc['epoch']}: {doc['change']}"

        # SIGKILL a broker: fenced once its session expires.
        cluster.kill(5)
        fenced = text.wait_out("broker 5 fenced", lambda x: x.endswith(": broker 5 fenced"))
        doc = wait_for("the fencing in JSON", lambda: next(
            (d for d in docs(as_json) if d["change"] == "broker 5 fenced"), None))
        assert doc["data"]["brokerId"] == 5
        assert fenced == f"offset {doc['offset']}, epoch {doc['epoch']}: broker 5 fenced"

        # SIGKILL the active controller: both watches find the next leader and go on.
        old_epoch = cluster.quorum()["leader_epoch"]
        cluster.kill(leader)
        new = wait_for("a new leader", lambda: (lambda s: s["leader_id"] not in (-1, leader)
                                                and s)(cluster.quorum(exclude=(leader,))))
        for watch in watches:
            watch.wait_err("the new leader", lambda x: x.startswith(
                f"kraftcore metadata watch: following node {new['leader_id']} (leader in "
                f"epoch {new['leader_epoch']}) from offset "))
        assert any(x.startswith(f"kraftcore metadata watch: node {leader} (leader in epoch "
                                f"{old_epoch}) ") for x in text.err)
        kraftcore("topics", "create", "--bootstrap-controller",
                  cluster.bootstrap(exclude=(leader,)), "--topic", "after", "--partitions",
                  "1", "--replication-factor", "1")
        for watch, predicate in ((text, lambda x: "topic after created" in x),
                                 (as_json, lambda x: '"topic after created' in x)):
            watch.wait_out("the topic after the failover", predicate)
        text.wait_out("the election", lambda x: x.startswith("offset ") and f"epoch "
                      f"{new['leader_epoch']}: node {new['leader_id']} leads the quorum (" in x)

        # Every line is final and in order: offsets only grow, none is told twice.
        parsed = [LINE.match(x) for x in list(text.out)]
        assert all(parsed), text.out
        offsets = [int(p.group(1)) for p in parsed]
        assert offsets == sorted(set(offsets))
        assert [d["offset"] for d in docs(as_json)] == sorted({d["offset"]
                                                               for d in docs(as_json)})
        # The same changes in both, over the offsets both were watching.
        in_text = {int(p.group(1)): p.group(3) for p in parsed}
        in_json = {d["offset"]: d["change"] for d in docs(as_json)}
        low, high = max(min(in_text), min(in_json)), min(max(in_text), max(in_json))
        assert {o: c for o, c in in_text.items() if low <= o <= high} == \
            {o: c for o, c in in_json.items() if low <= o <= high}

        # From the beginning: the leader's log starts at a snapshot by now (a node moves
        # its log start up to its previous snapshot when it takes one), so the first line
        # sums the snapshot up; --max-records 1 stops there.
        def from_beginning():
            result = kraftcore("metadata", "watch", "--bootstrap-controller",
                               cluster.bootstrap(exclude=(leader,)), "--from-beginning",
                               "--max-records", "1", "--json")
            (line,) = result.stdout.splitlines()
            return json.loads(line)

        snapshot = wait_for("a log that starts at a snapshot",
                            lambda: (lambda d: d["type"] == "SNAPSHOT" and d)(from_beginning()))
        assert snapshot["change"].startswith(f"snapshot of offsets 0-{snapshot['offset']}: ")
        # (the snapshot is at most a few seconds old; the topic was created well before)
        assert "orders" in snapshot["data"]["topics"] and snapshot["data"]["brokers"] == [4, 5]

        # A broker's address is no controller's: one error line, at once.
        result = kraftcore("metadata", "watch", "--bootstrap-controller",
                           f"127.0.0.1:{cluster.nodes[4]['port']}", check=False)
        assert result.returncode == 1 and result.stdout == ""
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("kraftcore metadata watch: error: ") and "broker" in line

        # Ctrl-C: status 0, nothing on stderr but the watch's own notes.
        for watch in watches:
            assert watch.interrupt() == 0
            assert all(x.startswith("kraftcore metadata watch: ") for x in watch.err), \
                watch.err
    finally:
        for watch in watches:
            watch.stop()
        cluster.down()


def test_watch_with_nothing_listening_is_one_error_line():
    (port,) = free_ports(1)
    result = kraftcore("metadata", "watch", "--bootstrap-controller", f"127.0.0.1:{port}",
                       check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"kraftcore metadata watch: error: could not connect to 127.0.0.1:{port}: Connect "
        f"call failed ('127.0.0.1', {port}); check that the node runs and listens on that "
        "address"]
    result = kraftcore("metadata", "watch", "--bootstrap-controller", "nowhere", check=False)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
