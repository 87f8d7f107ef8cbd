"""A simulated node's metadata log and snapshots written as a real node's files
(`export_node`): what the tools and the Spark job read, from a seed.
"""

from kraftcore.runtime.raft_storage import FileRaftStorage

__all__ = ["export_node"]


def export_node(storage, log_dir):
    """Write a simulated node's metadata log and snapshots (its `MemoryStorage`) into
    `log_dir` in Kafka's layout (`FileRaftStorage`): what a real node's
    `__cluster_metadata-0` would hold. Snapshots older than the log start are left out (a
    real node deletes them). Returns the snapshot ids written."""
    start = storage.log_start_offset
    ids = storage.snapshot_ids()
    files = FileRaftStorage.open(log_dir)
    written = []
    try:
        if start > 0:
            at_start = next(s for s in ids if s.end_offset == start)
            files.truncate_fully_and_start_at(at_start)
        data = b"".join(batch[4] for batch in storage.batches() if batch[0] >= start)
        if data:
            files.append_as_follower(data)
        files.flush()
        for snapshot_id in ids:
            if start <= snapshot_id.end_offset <= files.log_end_offset:
                files.write_snapshot(snapshot_id, storage.snapshot_bytes(snapshot_id))
                written.append(snapshot_id)
    finally:
        files.close()
    return written
