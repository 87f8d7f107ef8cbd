"""The pure-Python twins load only when `kraftcore.codec` selects them: with the native
kernels, the log, Raft, protocol and runtime packages import no `kraftcore._py` module, and
the Raft driver no pure twin of its compiled helper; with the pure ones, the reverse."""

import subprocess
import sys

import pytest

from kraftcore import codec

_PROBE = """
import sys
import kraftcore.codec, kraftcore.log, kraftcore.raft, kraftcore.protocol
import kraftcore.log.reader, kraftcore.runtime.raft_storage, kraftcore.runtime.raft_driver
print(kraftcore.codec.IMPLEMENTATION)
print(" ".join(sorted(m for m in sys.modules if m.startswith("kraftcore._py")
                      or m in ("kraftcore.runtime.appends", "kraftcore.runtime._appends"))))
"""


def _probe(env_pure):
    env = {"PATH": "/usr/bin:/bin"}
    if env_pure:
        env["KRAFTCORE_PURE"] = "1"
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    implementation, *loaded = out.stdout.splitlines()
    return implementation, (loaded[0].split() if loaded else [])


@pytest.mark.skipif("c" not in codec.implementations(), reason="the extension is not built")
def test_the_native_kernels_load_no_pure_twin():
    implementation, loaded = _probe(env_pure=False)
    assert implementation == "c" and loaded == ["kraftcore.runtime._appends"]


def test_the_pure_kernels_load_when_selected():
    implementation, loaded = _probe(env_pure=True)
    assert implementation == "py" and "kraftcore._py.records" in loaded
    assert "kraftcore.runtime.appends" in loaded and "kraftcore.runtime._appends" not in loaded
