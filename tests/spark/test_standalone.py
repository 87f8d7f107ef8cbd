"""`kraftcore verify --master spark://...` against a real Spark standalone cluster: a master
and one worker started here from pyspark's own `spark-class`, both bound to 127.0.0.1
(`SPARK_LOCAL_IP` also keeps their web UIs and the driver on loopback). The job runs in
the worker's executor, not in the driver's process: the same code as the embedded default,
through `--master`. The cluster is stopped in a `finally`; every wait is bounded."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.spark.util import copy_cluster, flip_byte, own_ids, snapshot_path

pytestmark = pytest.mark.spark

WAIT_S = 120


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait_for_log(path, text, process):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        time.sleep(0.2)
    with open(path, errors="replace") as f:
        tail = f.read()[-2000:]
    raise AssertionError(f"{text!r} never appeared in {path}: {tail}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A Spark standalone master and one worker (1 core) on 127.0.0.1; yields the master
    URL, the environment the driver must run with and the worker's work directory."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(work / "work"), "SPARK_LOG_DIR": str(work),
           "PYSPARK_PYTHON": sys.executable}
    port, master_ui, worker_ui = _free_ports(3)
    url = f"spark://127.0.0.1:{port}"
    spark_class = os.path.join(home, "bin", "spark-class")
    processes = []
    try:
        for name, args, ready in (
                ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                            "--port", str(port), "--webui-port", str(master_ui)],
                 "I have been elected leader"),
                ("worker", ["org.apache.spark.deploy.worker.Worker", url, "--host",
                            "127.0.0.1", "--webui-port", str(worker_ui), "--cores", "1",
                            "--memory", "1g"],
                 "Successfully registered with master")):
            log_path = work / f"{name}.log"
            with open(log_path, "wb") as log:
                processes.append(subprocess.Popen(
                    [spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                    stdin=subprocess.DEVNULL, start_new_session=True))
            _wait_for_log(log_path, ready, processes[-1])
        yield url, env, work / "work"
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _verify(url, env, node_dirs, cwd):
    return subprocess.run(
        [sys.executable, "-m", "kraftcore.cli.main", "verify", "--snapshots", *node_dirs,
         "--master", url], capture_output=True, text=True, timeout=600, cwd=str(cwd),
        env=env)


def test_verify_runs_on_a_standalone_cluster(standalone, cluster, tmp_path):
    url, env, worker_dir = standalone
    result = _verify(url, env, cluster.node_dirs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("OK: 12 checks passed, 1 skipped")
    # The work ran in an executor the worker launched for the application.
    apps = [d for d in os.listdir(worker_dir) if d.startswith("app-")]
    assert len(apps) == 1 and os.listdir(worker_dir / apps[0]), apps

    # A damaged copy fails there too, naming the file.
    damaged = copy_cluster(cluster, tmp_path / "damaged")
    path = snapshot_path(damaged.node_dirs[0], own_ids(damaged, 0)[0])
    flip_byte(path)
    result = _verify(url, env, damaged.node_dirs, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert os.path.basename(path) in result.stdout
    assert "Traceback" not in result.stderr
