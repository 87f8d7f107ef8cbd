"""`kraftcore format --add-scram`: the bootstrap.checkpoint it writes, and bad values."""

import base64
import os

import pytest

from kraftcore.cli.main import main
from kraftcore.log.bootstrap import read_bootstrap_file
from kraftcore.log.metadata_dir import find_metadata_dir
from kraftcore.metadata import records as R
from kraftcore.metadata.bootstrap import decode_bootstrap, read_bootstrap_records
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.controller.config import DEFAULT_METADATA_VERSION
from kraftcore.security.scram import credential_from_salted_password, make_credential

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
SALT = "MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E="
SALTED = "mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE="


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.voters=1@localhost:19093\n"
        "listeners=PLAINTEXT://:19092,CONTROLLER://:19093\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'data'}\n"
        f"metadata.log.dir={tmp_path / 'meta'}\n")
    return path


def _format(capsys, config_file, *scram):
    args = ["format", "-c", str(config_file), "-t", CLUSTER]
    for value in scram:
        args += ["--add-scram", value]
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_add_scram_writes_the_bootstrap_file(capsys, config_file, tmp_path):
    status, out, err = _format(
        capsys, config_file,
        "SCRAM-SHA-256=[name=alice,password=alice-secret]",
        "SCRAM-SHA-512=[name=alice,iterations=8192,password=\"a,b\"]",
        f'SCRAM-SHA-256=[name=bob,salt="{SALT}",saltedpassword="{SALTED}"]')
    assert status == 0, err
    assert "SCRAM credentials: alice (SCRAM-SHA-256), alice (SCRAM-SHA-512), bob " \
           "(SCRAM-SHA-256)" in out
    records = read_bootstrap_records(str(tmp_path / "meta"))
    assert records[0] == R.FeatureLevelRecord(name=METADATA_VERSION,
                                              feature_level=DEFAULT_METADATA_VERSION)
    scram = {(r.name, r.mechanism): r for r in records[1:]}
    assert sorted(scram) == [("alice", 1), ("alice", 2), ("bob", 1)]
    alice = scram["alice", 1]
    assert alice.iterations == 4096 and len(alice.salt) == 32
    want = make_credential("SCRAM-SHA-256", "alice-secret", alice.salt, 4096)
    assert (alice.stored_key, alice.server_key) == (want.stored_key, want.server_key)
    alice512 = scram["alice", 2]
    want = make_credential("SCRAM-SHA-512", "a,b", alice512.salt, 8192)
    assert alice512.iterations == 8192 and alice512.stored_key == want.stored_key
    bob = scram["bob", 1]
    want = credential_from_salted_password("SCRAM-SHA-256", base64.b64decode(SALTED),
                                           base64.b64decode(SALT), 4096)
    assert (bob.salt, bob.stored_key, bob.server_key) == (want.salt, want.stored_key,
                                                          want.server_key)
    # Kafka puts the file beside meta.properties in every directory it formats.
    assert decode_bootstrap(read_bootstrap_file(str(tmp_path / "data"))) == records
    assert sorted(os.listdir(tmp_path / "meta")) == ["bootstrap.checkpoint",
                                                     "meta.properties"]


def test_plain_format_writes_the_metadata_version_only(capsys, config_file, tmp_path):
    status, out, err = _format(capsys, config_file)
    assert status == 0, err and "Bootstrap" not in out
    assert read_bootstrap_records(str(tmp_path / "meta")) == (
        R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=DEFAULT_METADATA_VERSION),)


def test_the_bootstrap_file_does_not_hide_the_metadata_log(capsys, config_file, tmp_path):
    _format(capsys, config_file)
    os.makedirs(tmp_path / "meta" / "__cluster_metadata-0")
    directory, _ = find_metadata_dir(str(tmp_path / "meta"))
    assert directory.endswith("__cluster_metadata-0")


def test_no_bootstrap_file_reads_as_none(tmp_path):
    assert read_bootstrap_records(str(tmp_path)) == ()


@pytest.mark.parametrize("value, fragment", [
    ("SCRAM-SHA-1=[name=a,password=b]", "not supported"),
    ("SCRAM-SHA-256", "MECHANISM=[key=value"),
    ("SCRAM-SHA-256=name=a,password=b", "must be [key=value"),
    ("SCRAM-SHA-256=[password=b]", "'name' is required"),
    ("SCRAM-SHA-256=[name=a]", "exactly one of 'password' and 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,password=b,saltedpassword=YCE=,salt=N3E=]", "exactly one"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=YCE=]", "'saltedpassword' needs 'salt'"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=4095]", "[4096, 16384]"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=16385]", "[4096, 16384]"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=many]", "must be a number"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=***]", "'salt' is not base64"),
    ("SCRAM-SHA-256=[name=a,salt=N3E=,saltedpassword=!]", "'saltedpassword' is not base64"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "unknown key 'colour'"),
    ("SCRAM-SHA-256=[name=a,password=b,name=c]", "given twice"),
    ("SCRAM-SHA-256=[name=a,password]", "is not key=value"),
])
def test_bad_add_scram_values(capsys, config_file, tmp_path, value, fragment):
    status, out, err = _format(capsys, config_file, value)
    assert status == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kraftcore format: error: --add-scram")
    assert fragment in lines[0]
    assert not os.path.exists(tmp_path / "meta")  # nothing written
