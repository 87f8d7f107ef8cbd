"""The sans-I/O KRaft core: roles and transitions (`quorum`), the leader's replica tracking
and high watermark (`leader`), the RPC bodies (`rpc`), the storage interface (`storage`),
and `RaftCore` (`core`), which ties them into handle / poll / propose / take_ready."""

from kraftcore.raft.config import RaftConfig
from kraftcore.raft.core import RaftCore
from kraftcore.raft.storage import RaftStorage, SnapshotDownload
from kraftcore.raft.types import (CommittedBatch, LeaderAndEpoch, RaftMessage, Ready,
                                  SnapshotId)

__all__ = ["RaftConfig", "RaftCore", "RaftStorage", "SnapshotDownload", "CommittedBatch",
           "LeaderAndEpoch", "RaftMessage", "Ready", "SnapshotId"]
