"""The implementation switch: KRAFTCORE_PURE, KRAFTCORE_REQUIRE_EXT, and the CLI entry."""

import os
import subprocess
import sys

import pytest

from kraftcore import codec

pytestmark = pytest.mark.smoke


def _python(code, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("KRAFTCORE_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=60)


def test_this_run_uses_the_implementation_it_asked_for():
    if codec.PURE_REQUESTED:
        assert codec.IMPLEMENTATION == "py"
    else:
        assert codec.IMPLEMENTATION == "c", codec.EXTENSION_ERROR
        assert codec.encode_batch.__module__ == "kraftcore._c.records"


def test_pure_switch_selects_the_reference_kernels():
    out = _python("import kraftcore.codec as c; print(c.IMPLEMENTATION, c.encode_batch.__module__)", KRAFTCORE_PURE="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["py", "kraftcore._py.records"]


BLOCK_EXTENSION = "import sys; sys.modules['kraftcore._c.records'] = None; import kraftcore.codec as c; "


def test_a_missing_extension_falls_back_unless_required():
    out = _python(BLOCK_EXTENSION + "print(c.IMPLEMENTATION, c.EXTENSION_ERROR is not None)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["py", "True"]
    out = _python(BLOCK_EXTENSION + "print('loaded')", KRAFTCORE_REQUIRE_EXT="1")
    assert out.returncode != 0
    assert "KRAFTCORE_REQUIRE_EXT" in out.stderr and "loaded" not in out.stdout



TWIN = ("import sys; import kraftcore.codec as c; "
        "print(c.twin('kraftcore.runtime._appends', 'kraftcore.runtime.appends').__name__)")
BLOCK_TWIN = "import sys; sys.modules['kraftcore.runtime._appends'] = None; "


def test_a_twin_pair_follows_the_same_switch():
    """`codec.twin` (the Raft driver's compiled helper and its pure twin) obeys the one
    switch as the kernels do."""
    out = _python(TWIN, KRAFTCORE_PURE="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["kraftcore.runtime.appends"]
    out = _python(BLOCK_TWIN + TWIN + "; print(sorted(c.TWIN_ERRORS))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["kraftcore.runtime.appends", "['kraftcore.runtime._appends']"]
    if "c" in codec.implementations():
        out = _python(BLOCK_TWIN + TWIN, KRAFTCORE_REQUIRE_EXT="1")
        assert out.returncode != 0
        assert "KRAFTCORE_REQUIRE_EXT" in out.stderr
        assert "kraftcore.runtime._appends" in out.stderr
        out = _python(TWIN)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["kraftcore.runtime._appends"]


def test_cli_version():
    import kraftcore

    out = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout.strip() == f"kraftcore {kraftcore.__version__}"


def test_cli_demo_runs_and_checks_the_golden_vectors(capsys):
    from kraftcore.cli.main import main

    assert main(["demo", "--codec", "--batches", "3", "--records", "50"]) == 0
    out = capsys.readouterr().out
    assert "ok  73-byte batch" in out and "a flipped bit is caught" in out
    assert main(["demo", "--codec", "--batches", "0"]) == 2
