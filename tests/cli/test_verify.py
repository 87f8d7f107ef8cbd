"""`kraftcore verify`: every user error is one line on stderr, exit status 2, no traceback,
and no Spark started (these tests run without a JVM). The runs with Spark are in
tests/spark/test_job.py."""

import socket
import subprocess
import sys

import pytest

import kraftcore.spark as ks
from kraftcore.cli import verify as verify_cli
from kraftcore.cli.main import main

SNAPSHOT = "00000000000000000010-0000000001.checkpoint"


@pytest.fixture
def node(tmp_path):
    d = tmp_path / "node-1" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / SNAPSHOT).write_bytes(b"not checked: the run stops before Spark")
    return tmp_path / "node-1"


@pytest.fixture(autouse=True)
def no_spark(monkeypatch):
    """Fail the test if the command gets as far as starting Spark."""
    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started for a run that should have stopped before")

    monkeypatch.setattr("kraftcore.spark.session.build_session", refuse)


def _run(capsys, *args):
    status = main(["verify", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def _one_line_error(err, *fragments):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kraftcore verify: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)
    assert "Traceback" not in err


def test_a_missing_directory(capsys, tmp_path):
    status, out, err = _run(capsys, "--snapshots", tmp_path / "nope")
    assert status == 2 and out == ""
    _one_line_error(err, str(tmp_path / "nope"), "no such directory")


def test_a_directory_without_snapshots(capsys, node, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = _run(capsys, "--snapshots", node, empty)
    assert status == 2
    _one_line_error(err, "no .checkpoint file under", str(empty))


def test_a_file_instead_of_a_directory(capsys, node):
    status, _, err = _run(capsys, "--snapshots", node / "__cluster_metadata-0" / SNAPSHOT)
    assert status == 2
    _one_line_error(err, "is not a directory")


@pytest.mark.parametrize("master", ["foo", "local[0]", "local[x]", "spark://nohost",
                                    "http://h:7077"])
def test_a_bad_master(capsys, node, master):
    status, _, err = _run(capsys, "--snapshots", node, "--master", master)
    assert status == 2
    _one_line_error(err, f"--master {master!r} is not a Spark master URL")


def test_an_unreachable_master(capsys, node):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status, _, err = _run(capsys, "--snapshots", node, "--master", f"spark://127.0.0.1:{port}")
    assert status == 2
    _one_line_error(err, f"cannot reach the Spark master 127.0.0.1:{port}")


def test_the_spark_extra_missing(capsys, node, monkeypatch):
    monkeypatch.setattr(ks, "missing_requirements", lambda: ["pyspark", "pandas"])
    status, _, err = _run(capsys, "--snapshots", node)
    assert status == 2
    _one_line_error(err, "pip install 'kraftcore[spark]'", "pyspark, pandas not installed")


def test_the_spark_extra_missing_for_real(node):
    """pyspark made unimportable in a fresh interpreter."""
    code = ("import sys; sys.modules['pyspark'] = None; "
            "from kraftcore.cli.main import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "verify", "--snapshots", str(node)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    _one_line_error(result.stderr, "pip install 'kraftcore[spark]'", "pyspark")


def test_java_missing(capsys, node, monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    status, _, err = _run(capsys, "--snapshots", node)
    assert status == 2
    _one_line_error(err, "Java runtime", "JAVA_HOME")


def test_logs_that_do_not_match_the_nodes(capsys, node, tmp_path):
    status, _, err = _run(capsys, "--snapshots", node, "--logs", node, tmp_path)
    assert status == 2
    _one_line_error(err, "one log directory per snapshot directory")
    status, _, err = _run(capsys, "--snapshots", node, "--logs")
    assert status == 2
    _one_line_error(err, "no metadata log under")


def test_outputs_that_cannot_be_written(capsys, node, tmp_path):
    status, _, err = _run(capsys, "--snapshots", node, "--output", tmp_path / "no" / "r.json")
    assert status == 2
    _one_line_error(err, "--output", "does not exist")
    status, _, err = _run(capsys, "--snapshots", node, "--export",
                          node / "__cluster_metadata-0" / SNAPSHOT)
    assert status == 2
    _one_line_error(err, "--export", "is not a directory")


def test_no_snapshots_argument(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["verify"])
    assert exc.value.code == 2
    assert "--snapshots" in capsys.readouterr().err


def test_a_spark_failure_is_one_line():
    long_error = Exception("line one of a Py4J error\n" + "\tat org.apache.Foo\n" * 50)
    assert verify_cli._spark_failure(long_error) == "line one of a Py4J error"
    worker = Exception("An exception was thrown from the Python worker:\nTraceback (most "
                       "recent call last):\n  File \"x\"\nValueError: bad things")
    assert verify_cli._spark_failure(worker) == "ValueError: bad things"


def test_the_progress_line(tmp_path):
    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    tty = Tty()
    progress = verify_cli.ProgressLine(tty)
    progress("decoding", 3, 10, "tasks")
    progress("decoding", 7, 10, "tasks")
    assert tty.text.count("\r") == 2 and "7/10 tasks" in tty.text
    progress.clear()
    assert tty.text.endswith("\r")
    progress("after clear")  # silent once cleared
    assert "after clear" not in tty.text


def test_spark_that_does_not_start_is_one_line_naming_its_log(capsys, node, monkeypatch,
                                                              tmp_path):
    from kraftcore.spark.session import SparkStartError

    log = tmp_path / "work" / "spark.log"
    log.parent.mkdir()
    log.write_text("what the JVM said\n")

    def fails(*args, **kwargs):
        raise SparkStartError(RuntimeError("Java gateway process exited before sending its "
                                           "port number"), str(log))

    monkeypatch.setattr("kraftcore.spark.session.build_session", fails)
    status, out, err = _run(capsys, "--snapshots", node, "--quiet")
    assert status == verify_cli.EXIT_SPARK and out == ""
    _one_line_error(err, "Spark did not start", "Java gateway process exited", str(log))
    assert "Traceback" in log.read_text()  # the details went to the log
