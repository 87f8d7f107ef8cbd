"""`kraftcore format` and `kraftcore random-uuid`: the directories written, Kafka's short
options, and every user error as one `kraftcore format: error:` line with a non-zero exit
and no traceback (once through a real subprocess)."""

import os
import subprocess
import sys

import pytest

from kraftcore.cli.main import main
from kraftcore.log.meta_properties import check_formatted, read_meta_properties
from kraftcore.types import Uuid
from kraftcore.runtime.config import NodeConfig

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "# a combined node\n"
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.voters=1@localhost:19093\n"
        "listeners=PLAINTEXT://:19092,CONTROLLER://:19093\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'data-a'},{tmp_path / 'data-b'}\n"
        f"metadata.log.dir={tmp_path / 'meta'}\n")
    return path


def _run(capsys, *args):
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def _one_error_line(err, *fragments):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kraftcore format: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err


def test_random_uuid(capsys):
    seen = set()
    for _ in range(20):
        status, out, err = _run(capsys, "random-uuid")
        assert status == 0 and err == ""
        text = out.strip()
        assert out == text + "\n" and len(text) == 22
        assert str(Uuid.from_str(text)) == text
        assert not text.startswith("-")
        seen.add(text)
    assert len(seen) == 20


def test_format(capsys, config_file, tmp_path):
    status, out, err = _run(capsys, "format", "--config", config_file, "--cluster-id", CLUSTER)
    assert status == 0, err
    assert err == ""
    lines = out.splitlines()
    assert [line.split(" with ")[0] for line in lines] == [
        f"Formatted data directory {tmp_path / 'data-a'}",
        f"Formatted data directory {tmp_path / 'data-b'}",
        f"Formatted metadata directory {tmp_path / 'meta'}"]
    for name in ("data-a", "data-b", "meta"):
        meta = read_meta_properties(tmp_path / name)
        assert (meta.cluster_id, meta.node_id) == (CLUSTER, 1)
        assert f"directory.id {meta.directory_id}." in out
    assert check_formatted(NodeConfig.from_file(config_file)) == CLUSTER


def test_format_with_kafka_short_options(capsys, config_file, tmp_path):
    status, out, _ = _run(capsys, "format", "-c", config_file, "-t", CLUSTER)
    assert status == 0
    assert read_meta_properties(tmp_path / "meta").cluster_id == CLUSTER


def test_random_uuid_formats(capsys, config_file, tmp_path):
    _, cluster_id, _ = _run(capsys, "random-uuid")
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", cluster_id.strip())
    assert status == 0, err
    assert read_meta_properties(tmp_path / "data-a").cluster_id == cluster_id.strip()


def test_refuses_to_reformat(capsys, config_file, tmp_path):
    assert _run(capsys, "format", "-c", config_file, "-t", CLUSTER)[0] == 0
    before = (tmp_path / "meta" / "meta.properties").read_bytes()
    status, out, err = _run(capsys, "format", "-c", config_file, "-t", "J8aAPcfLQt2bqs1JT_rMgQ")
    assert status == 1 and out == ""
    _one_error_line(err, f"{tmp_path / 'data-a'} is already formatted", "--ignore-formatted")
    assert (tmp_path / "meta" / "meta.properties").read_bytes() == before


def test_ignore_formatted(capsys, config_file, tmp_path):
    assert _run(capsys, "format", "-c", config_file, "-t", CLUSTER)[0] == 0
    status, out, err = _run(capsys, "format", "-c", config_file, "-t", CLUSTER, "-g")
    assert (status, err) == (0, "")
    assert out == "All of the log directories are already formatted.\n"
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", "J8aAPcfLQt2bqs1JT_rMgQ",
                          "--ignore-formatted")
    assert status == 1
    _one_error_line(err, "already formatted for cluster.id " + CLUSTER)


def test_missing_config_file(capsys, tmp_path):
    status, out, err = _run(capsys, "format", "-c", tmp_path / "nope.properties", "-t", CLUSTER)
    assert status == 2 and out == ""
    _one_error_line(err, f"cannot read config file {tmp_path / 'nope.properties'}",
                    "No such file")


def test_bad_config_value(capsys, config_file, tmp_path):
    config_file.write_text(config_file.read_text().replace("node.id=1", "node.id=one"))
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", CLUSTER)
    assert status == 2
    _one_error_line(err, f"{config_file}: node.id: 'one' is not an integer")
    assert not (tmp_path / "meta").exists()


def test_invalid_config(capsys, config_file):
    config_file.write_text(config_file.read_text().replace("1@localhost", "2@localhost"))
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", CLUSTER)
    assert status == 2
    _one_error_line(err, "controller.quorum.voters: node 1 is a controller")


@pytest.mark.parametrize("cluster_id", ["my-cluster", CLUSTER + "x", "", "a+b/" * 5 + "AA"])
def test_bad_cluster_id(capsys, config_file, tmp_path, cluster_id):
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", cluster_id)
    assert status == 2
    _one_error_line(err, "--cluster-id", "is not a Kafka uuid", "kraftcore random-uuid")
    assert not (tmp_path / "data-a").exists()


def test_unknown_keys_are_a_warning(capsys, config_file, tmp_path):
    config_file.write_text(config_file.read_text() + "zookeeper.connect=zk:2181\n")
    status, out, err = _run(capsys, "format", "-c", config_file, "-t", CLUSTER)
    assert status == 0
    assert err == (f"kraftcore format: warning: {config_file}: keys kraftcore does not use: "
                   "zookeeper.connect\n")


def test_a_file_in_the_way(capsys, config_file, tmp_path):
    (tmp_path / "data-b").write_text("x")
    status, _, err = _run(capsys, "format", "-c", config_file, "-t", CLUSTER)
    assert status == 1
    _one_error_line(err, f"{tmp_path / 'data-b'} (data directory) exists and is not a "
                    "directory")
    assert not (tmp_path / "data-a").exists()


def test_arguments_are_required(capsys, config_file):
    with pytest.raises(SystemExit) as info:
        main(["format", "-c", str(config_file)])
    assert info.value.code == 2
    assert "--cluster-id" in capsys.readouterr().err


def test_subprocess_has_no_traceback(config_file, tmp_path):
    """The real command line: errors are one line, statuses as documented."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "kraftcore.cli.main", *map(str, args)],
                              capture_output=True, text=True, timeout=120, env=env,
                              cwd=tmp_path)

    uuid = run("random-uuid")
    assert uuid.returncode == 0 and len(uuid.stdout.strip()) == 22
    cluster_id = uuid.stdout.strip()
    done = run("format", "--config", config_file, "--cluster-id", cluster_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Formatted ") == 3
    for args, status, fragment in [
            (("format", "-c", config_file, "-t", cluster_id), 1, "is already formatted"),
            (("format", "-c", tmp_path / "missing", "-t", cluster_id), 2, "cannot read config"),
            (("format", "-c", config_file, "-t", "nope"), 2, "is not a Kafka uuid")]:
        result = run(*args)
        assert result.returncode == status, result.stderr
        assert result.stdout == ""
        assert "Traceback" not in result.stderr
        _one_error_line(result.stderr, fragment)
