"""The Raft core stands on protocol and the kernels alone: it imports and runs (a one-voter
quorum over its own memory storage elects itself and commits) in a process where `fcntl`
does not exist, as on Windows, and without loading the file log, the runtime or the
metadata layer. The layers as a whole are checked by import-linter (pyproject.toml)."""

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys

    class NoFcntl:
        def find_spec(self, name, path=None, target=None):
            if name == "fcntl":
                raise ImportError("fcntl does not exist on this platform")

    sys.modules.pop("fcntl", None)
    sys.meta_path.insert(0, NoFcntl())

    import random
    from kraftcore.raft import RaftConfig, RaftCore
    from kraftcore.raft.memory import MemoryElectionStore, MemoryStorage

    storage, store = MemoryStorage(), MemoryElectionStore()
    core = RaftCore(1, [1], storage, store.read(), RaftConfig(), random.Random(1), 0)
    last = None
    for now in range(0, 10_000, 100):
        core.poll(now)
        if core.role == "leader" and last is None:
            last = core.propose([b"one", b"two"], now)
        ready = core.take_ready()
        while ready is not None:
            if ready.election_state is not None:
                store.write(ready.election_state)
            if ready.flush_offset is not None:
                storage.flush()
            core.on_persisted(ready.number)
            ready = core.take_ready()
        if last is not None and core.high_watermark > last:
            break
    assert last is not None and core.high_watermark > last, (core, last)
    assert store.read().leader_id == 1
    loaded = sorted(m for m in sys.modules if m.split(".")[:2] in (
        ["kraftcore", "log"], ["kraftcore", "runtime"], ["kraftcore", "metadata"],
        ["kraftcore", "net"]))
    assert not loaded, loaded
    assert "fcntl" not in sys.modules and "asyncio" not in sys.modules
    print("ok")
""")


def test_the_raft_core_runs_where_fcntl_does_not_exist():
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr
