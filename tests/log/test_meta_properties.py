"""`meta.properties`: Kafka's bytes, atomic replacement, formatting every directory of a node
(refusing formatted ones), and the startup check (missing, corrupt, disagreeing dirs)."""

import os
import random

import pytest

from kraftcore.errors import ConfigError
from kraftcore.log import fileio
from kraftcore.log import meta_properties as mp
from kraftcore.log.meta_properties import (AlreadyFormattedError, MetaProperties,
                                           MetaPropertiesError, NotFormattedError,
                                           check_formatted, format_directories,
                                           parse_properties, read_meta_properties,
                                           store_properties, validate_cluster_id,
                                           write_meta_properties)
from kraftcore.types import Uuid
from kraftcore.runtime.config import NodeConfig

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER_CLUSTER = "J8aAPcfLQt2bqs1JT_rMgQ"
DIRECTORY_ID = Uuid(bytes(range(16)))  # AAECAwQFBgcICQoLDA0ODw
NOW_MS = 1_730_197_071_000  # Tue Oct 29 10:17:51 UTC 2024


def node(tmp_path, log_dirs=("data",), metadata_log_dir=None, node_id=1, source=None):
    properties = {
        "node.id": str(node_id), "process.roles": "controller",
        "controller.quorum.voters": f"{node_id}@localhost:9093",
        "listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
        "log.dirs": ",".join(str(tmp_path / d) for d in log_dirs),
    }
    if metadata_log_dir:
        properties["metadata.log.dir"] = str(tmp_path / metadata_log_dir)
    return NodeConfig.from_mapping(properties, source=source)


# ------------------------------------------------------------------ bytes


def test_bytes_as_kafka_writes_them():
    meta = MetaProperties(cluster_id=CLUSTER, node_id=1, directory_id=DIRECTORY_ID)
    assert meta.to_bytes(NOW_MS) == (
        b"#\n"
        b"#Tue Oct 29 10:17:51 UTC 2024\n"
        b"cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n"
        b"directory.id=AAECAwQFBgcICQoLDA0ODw\n"
        b"node.id=1\n"
        b"version=1\n")


def test_date_line_pads_like_java():
    # Date.toString: "EEE MMM dd HH:mm:ss zzz yyyy" with two-digit day.
    text = store_properties({}, 0)
    assert text == "#\n#Thu Jan 01 00:00:00 UTC 1970\n"
    assert store_properties({"k": "v"}, 86_400_000 * 34 + 3_723_000, comment="c") == \
        "#c\n#Wed Feb 04 01:02:03 UTC 1970\nk=v\n"


def test_round_trip():
    meta = MetaProperties(cluster_id=CLUSTER, node_id=2147483647, directory_id=DIRECTORY_ID)
    assert MetaProperties.from_bytes(meta.to_bytes(NOW_MS)) == meta
    legacy = MetaProperties(cluster_id=CLUSTER, node_id=0)
    assert b"directory.id" not in legacy.to_bytes(NOW_MS)
    assert MetaProperties.from_bytes(legacy.to_bytes(NOW_MS)) == legacy


def test_reads_files_written_by_kafka():
    # JDK 17 writes the entries in hash order; Kafka before 3.7 wrote no directory.id.
    jdk17 = (b"#\n#Thu Jan 19 14:53:53 UTC 2023\nnode.id=3\ndirectory.id=4B5W4I0dQiy1Sc4H7mYTQw\n"
             b"version=1\ncluster.id=J8aAPcfLQt2bqs1JT_rMgQ\n")
    meta = MetaProperties.from_bytes(jdk17)
    assert (meta.cluster_id, meta.node_id, str(meta.directory_id), meta.version) == \
        (OTHER_CLUSTER, 3, "4B5W4I0dQiy1Sc4H7mYTQw", 1)
    old = MetaProperties.from_bytes(b"#\n#x\r\nversion=1\r\ncluster.id=abc\r\nnode.id=0\r\n")
    assert (old.cluster_id, old.node_id, old.directory_id) == ("abc", 0, None)


@pytest.mark.parametrize("data, fragment", [
    (b"", "no version"),
    (b"#\n#date\n", "no version"),
    (b"version=0\nbroker.id=1\ncluster.id=x\n", "ZooKeeper-mode"),
    (b"version=2\ncluster.id=x\nnode.id=1\n", "unknown version '2'"),
    (b"version=1\nnode.id=1\n", "no cluster.id"),
    (b"version=1\ncluster.id=\nnode.id=1\n", "no cluster.id"),
    (b"version=1\ncluster.id=x\n", "no node.id"),
    (b"version=1\ncluster.id=x\nnode.id=-1\n", "node.id '-1'"),
    (b"version=1\ncluster.id=x\nnode.id=one\n", "node.id 'one'"),
    (b"version=1\ncluster.id=x\nnode.id=2147483648\n", "node.id '2147483648'"),
    (b"version=1\ncluster.id=x\nnode.id=1\ndirectory.id=short\n", "directory.id 'short'"),
    (b"version=1\ncluster.id=x\nnode.id=1\ndirectory.id=AAECAwQFBgcICQoLDA0OD!\n",
     "directory.id"),
    (b"version=1\ncluster.id=\xff\nnode.id=1\n", "not UTF-8"),
    (b"version=1\ncluster.id=\\u00\nnode.id=1\n", "malformed"),
])
def test_corrupt_files_are_refused(data, fragment):
    with pytest.raises(MetaPropertiesError) as info:
        MetaProperties.from_bytes(data, "/d/meta.properties")
    message = str(info.value)
    assert message.startswith("/d/meta.properties: ") and fragment in message, message
    assert "\n" not in message


def test_properties_escapes_round_trip():
    properties = {"a key": " lead=x:y#z!w\\", "k\tt": "line\nbreak", "plain": "café"}
    text = store_properties(properties, NOW_MS)
    assert "a\\ key=\\ lead\\=x\\:y\\#z\\!w\\\\" in text
    assert parse_properties(text) == properties


# ------------------------------------------------------------------ reading and writing


def test_read_missing(tmp_path):
    assert read_meta_properties(tmp_path) is None
    assert read_meta_properties(tmp_path / "nowhere") is None
    (tmp_path / "file").write_text("x")
    with pytest.raises(MetaPropertiesError, match="is not a directory"):
        read_meta_properties(tmp_path / "file")


def test_write_is_atomic(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append("file"), real_fsync(fd)))
    monkeypatch.setattr(fileio, "sync_dir", lambda path: synced.append(("dir", path)))
    meta = MetaProperties(cluster_id=CLUSTER, node_id=1, directory_id=DIRECTORY_ID)
    write_meta_properties(tmp_path, meta, now_ms=NOW_MS)
    assert (tmp_path / "meta.properties").read_bytes() == meta.to_bytes(NOW_MS)
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]  # the .tmp was renamed
    assert synced == ["file", ("dir", str(tmp_path))]  # file fsync, then directory fsync


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    old = MetaProperties(cluster_id=CLUSTER, node_id=1, directory_id=DIRECTORY_ID)
    write_meta_properties(tmp_path, old, now_ms=NOW_MS)

    def full_disk(fd, data, position):
        os.write(fd, bytes(data)[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio, "pwrite_all", full_disk)
    with pytest.raises(OSError):
        write_meta_properties(tmp_path, MetaProperties(cluster_id=OTHER_CLUSTER, node_id=1),
                              now_ms=NOW_MS)
    assert read_meta_properties(tmp_path) == old


def test_write_dates_with_the_wall_clock(tmp_path):
    write_meta_properties(tmp_path, MetaProperties(cluster_id=CLUSTER, node_id=1))
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#") and lines[1].endswith(" UTC " + lines[1][-4:])


# ------------------------------------------------------------------ cluster ids


@pytest.mark.parametrize("cluster_id", [
    CLUSTER, "AAAAAAAAAAAAAAAAAAAAAA", "_-_-_-_-_-_-_-_-_-_-_w", CLUSTER + "=="])
def test_cluster_ids_kafka_accepts(cluster_id):
    assert validate_cluster_id(cluster_id) == cluster_id


@pytest.mark.parametrize("cluster_id", [
    "", "abc", CLUSTER[:-1], CLUSTER + "A", CLUSTER + "=", CLUSTER + "!!",
    "MkU3OEVBNTcwNTJENDM2Q+", "MkU3OEVBNTcwNTJENDM2Q/", " " + CLUSTER,
    "6ba7b810-9dad-11d1-80b4-00c04fd430c8", None, 12])
def test_cluster_ids_kafka_refuses(cluster_id):
    with pytest.raises(ConfigError, match="is not a Kafka uuid"):
        validate_cluster_id(cluster_id)


# ------------------------------------------------------------------ format_directories


def test_format_every_directory(tmp_path):
    config = node(tmp_path, log_dirs=("a", "deep/b"), metadata_log_dir="meta")
    written = format_directories(config, CLUSTER, rng=random.Random(1), now_ms=NOW_MS)
    assert [d for d, _ in written] == [str(tmp_path / "a"), str(tmp_path / "deep/b"),
                                       str(tmp_path / "meta")]
    ids = set()
    for directory, meta in written:
        assert read_meta_properties(directory) == meta
        assert (meta.cluster_id, meta.node_id, meta.version) == (CLUSTER, 1, 1)
        assert not str(meta.directory_id).startswith("-")
        ids.add(meta.directory_id)
    assert len(ids) == 3
    assert check_formatted(config) == CLUSTER


def test_format_the_metadata_dir_once_when_it_is_a_log_dir(tmp_path):
    config = node(tmp_path, log_dirs=("a", "b"), metadata_log_dir="b")
    written = format_directories(config, CLUSTER, rng=random.Random(1))
    assert [d for d, _ in written] == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_directory_ids_come_from_the_rng(tmp_path):
    one = format_directories(node(tmp_path / "1"), CLUSTER, rng=random.Random(5))
    two = format_directories(node(tmp_path / "2"), CLUSTER, rng=random.Random(5))
    assert one[0][1].directory_id == two[0][1].directory_id


def test_directory_ids_never_repeat(tmp_path):
    class Repeating(random.Random):
        """Returns the same 128 bits twice, then others."""
        values = [7, 7, 7, 9]

        def getrandbits(self, k):
            return self.values.pop(0) << 64

    written = format_directories(node(tmp_path, log_dirs=("a", "b")), CLUSTER, rng=Repeating())
    assert written[0][1].directory_id != written[1][1].directory_id


def test_refuses_to_reformat(tmp_path):
    config = node(tmp_path, log_dirs=("a", "b"))
    format_directories(config, CLUSTER)
    before = {d: (tmp_path / d / "meta.properties").read_bytes() for d in ("a", "b")}
    with pytest.raises(AlreadyFormattedError) as info:
        format_directories(config, OTHER_CLUSTER)
    message = str(info.value)
    assert f"{tmp_path / 'a'} is already formatted" in message and CLUSTER in message
    assert "\n" not in message
    assert {d: (tmp_path / d / "meta.properties").read_bytes() for d in ("a", "b")} == before


def test_refuses_before_writing_anything(tmp_path):
    # Only the last directory is formatted: the first ones must not be written either.
    (tmp_path / "c").mkdir()
    write_meta_properties(tmp_path / "c", MetaProperties(cluster_id=CLUSTER, node_id=1))
    config = node(tmp_path, log_dirs=("a", "b", "c"))
    with pytest.raises(AlreadyFormattedError, match=f"{tmp_path / 'c'} is already formatted"):
        format_directories(config, CLUSTER)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_corrupt_meta_properties_counts_as_formatted(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.properties").write_bytes(b"garbage")
    with pytest.raises(MetaPropertiesError, match="no version"):
        format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)
    assert (tmp_path / "a" / "meta.properties").read_bytes() == b"garbage"


def test_ignore_formatted(tmp_path):
    config = node(tmp_path, log_dirs=("a",))
    first = format_directories(config, CLUSTER)
    wider = node(tmp_path, log_dirs=("a", "b"))
    written = format_directories(wider, CLUSTER, ignore_formatted=True)
    assert [d for d, _ in written] == [str(tmp_path / "b")]
    assert read_meta_properties(tmp_path / "a") == first[0][1]  # untouched
    assert written[0][1].directory_id != first[0][1].directory_id
    assert format_directories(wider, CLUSTER, ignore_formatted=True) == []
    with pytest.raises(AlreadyFormattedError, match=f"cluster.id {CLUSTER}, node.id 1, not "
                       f"cluster.id {OTHER_CLUSTER}"):
        format_directories(wider, OTHER_CLUSTER, ignore_formatted=True)
    with pytest.raises(AlreadyFormattedError, match="node.id 1, not cluster.id .* node.id 2"):
        format_directories(node(tmp_path, log_dirs=("a", "b"), node_id=2), CLUSTER,
                           ignore_formatted=True)


def test_format_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "a").write_text("not a directory")
    with pytest.raises(MetaPropertiesError, match="exists and is not a directory"):
        format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)


def test_format_reports_a_directory_it_cannot_create(tmp_path, monkeypatch):
    def refuse(path, exist_ok=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "makedirs", refuse)
    with pytest.raises(MetaPropertiesError) as info:
        format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)
    assert str(info.value) == f"cannot format metadata directory {tmp_path / 'a'}: Permission denied"


def test_format_checks_the_cluster_id(tmp_path):
    with pytest.raises(ConfigError, match="not a Kafka uuid"):
        format_directories(node(tmp_path), "my-cluster")
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------ check_formatted


def test_not_formatted(tmp_path):
    with pytest.raises(NotFormattedError) as info:
        check_formatted(node(tmp_path))
    assert str(info.value) == (f"metadata directory {tmp_path / 'data'} is not formatted: "
                               "run kraftcore format --config FILE --cluster-id ID")
    with pytest.raises(NotFormattedError, match="--config /etc/n1.properties --cluster-id ID$"):
        check_formatted(node(tmp_path, source="/etc/n1.properties"))


def test_partly_formatted(tmp_path):
    format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)
    with pytest.raises(NotFormattedError) as info:
        check_formatted(node(tmp_path, log_dirs=("a",), metadata_log_dir="meta"))
    assert str(info.value) == (
        f"metadata directory {tmp_path / 'meta'} is not formatted (the node's other "
        f"directories belong to cluster {CLUSTER}): run kraftcore format --config FILE "
        f"--cluster-id {CLUSTER} --ignore-formatted")


def test_directories_of_different_clusters(tmp_path):
    format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)
    format_directories(node(tmp_path, log_dirs=("b",)), OTHER_CLUSTER)
    with pytest.raises(MetaPropertiesError) as info:
        check_formatted(node(tmp_path, log_dirs=("a", "b")))
    assert str(info.value).startswith(
        f"{tmp_path / 'b'} belongs to cluster {OTHER_CLUSTER} but {tmp_path / 'a'} to "
        f"cluster {CLUSTER}")


def test_directories_of_another_node(tmp_path):
    format_directories(node(tmp_path, node_id=2), CLUSTER)
    with pytest.raises(MetaPropertiesError, match=f"{tmp_path / 'data'} was formatted for "
                       "node.id 2 but node.id is 1"):
        check_formatted(node(tmp_path, node_id=1))


def test_copied_directory_ids(tmp_path):
    format_directories(node(tmp_path, log_dirs=("a",)), CLUSTER)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "meta.properties").write_bytes(
        (tmp_path / "a" / "meta.properties").read_bytes())
    with pytest.raises(MetaPropertiesError, match="have the same directory.id"):
        check_formatted(node(tmp_path, log_dirs=("a", "b")))


def test_check_formatted_reports_a_corrupt_file(tmp_path):
    format_directories(node(tmp_path), CLUSTER)
    path = tmp_path / "data" / "meta.properties"
    path.write_bytes(path.read_bytes().replace(b"version=1", b"version=9"))
    with pytest.raises(MetaPropertiesError, match=f"^{path}: unknown version '9'"):
        check_formatted(node(tmp_path))


def test_check_formatted_accepts_files_without_directory_ids(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        write_meta_properties(tmp_path / d, MetaProperties(cluster_id=CLUSTER, node_id=1))
    assert check_formatted(node(tmp_path, log_dirs=("a", "b"))) == CLUSTER


def test_node_directories_dedupes_paths(tmp_path):
    config = node(tmp_path, log_dirs=("a", "b"), metadata_log_dir="a/")
    assert mp.node_directories(config) == [str(tmp_path / "a"), str(tmp_path / "b")]
