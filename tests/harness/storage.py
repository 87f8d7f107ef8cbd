"""Raft storages of either kind for the contract tests (`tests/raft/test_storage_contract.py`)
and the tests of one implementation: `Storages` makes `MemoryStorage`s or
`FileRaftStorage`s and restarts them; `batch`, `follower_log` fill them; `state` is
everything observable, to check that a refused call changed nothing."""

from kraftcore import codec
from kraftcore.raft.memory import MemoryStorage
from kraftcore.runtime.raft_storage import FileRaftStorage

PARTITION = "__cluster_metadata-0"
KINDS = ("memory", "file")


def batch(count=2, base_offset=0, epoch=0, control=False, size=1):
    values = [bytes([65 + i]) * size for i in range(count)]
    return codec.encode_batch(values, base_offset=base_offset, leader_epoch=epoch,
                              control=control, timestamp=1000)


def log_state(storage):
    """The log and snapshots as the contract and the inspection helpers show them."""
    return (storage.log_start_offset, storage.log_end_offset, storage.batches(),
            storage.epoch_entries(), storage.last_fetched_epoch(), storage.snapshot_ids())


def state(storage):
    """Everything observable: `log_state` and the durable end offset."""
    return log_state(storage) + (storage.durable_end_offset,)


class Storages:
    """Builds storages of one kind; `restart(storage)` is a clean stop and start (for
    memory: flush, then a crash that has nothing to lose)."""

    def __init__(self, kind, tmp_path):
        if kind not in KINDS:
            raise ValueError(f"no storage kind {kind!r}")
        self.kind = kind
        self.tmp_path = tmp_path
        self.opened = []

    def new(self, **settings):
        if self.kind == "memory":
            if settings:
                raise TypeError(f"a MemoryStorage takes no settings: {settings}")
            return MemoryStorage()
        return self.open(self.tmp_path / f"{len(self.opened)}" / PARTITION, **settings)

    def open(self, path, **settings):
        storage = FileRaftStorage.open(path, **settings)
        self.opened.append(storage)
        return storage

    def restart(self, storage):
        if self.kind == "memory":
            storage.flush()
            storage.crash()
            return storage
        storage.close()
        return self.open(storage.log.path)

    def close_all(self):
        for storage in self.opened:
            storage.close()


def follower_log(storages, *spec, **settings):
    """A storage filled by follower appends of (count, epoch) batches."""
    storage = storages.new(**settings)
    for count, epoch in spec:
        storage.append_as_follower(batch(count, storage.log_end_offset, epoch))
    return storage
