"""`RaftSide`: the read half of the Raft interface a `QuorumController` expects (see
`kraftcore.controller.controller`), over an owner's `self.core` (a `RaftCore`). The owner —
the runtime's driver, the simulator's node, the in-process `LocalQuorum` — adds `node_id`,
`propose(values)` and `resign()`, which drive its core in its own way."""

from kraftcore.raft.types import LeaderAndEpoch


class RaftSide:
    def leader_and_epoch(self):
        return LeaderAndEpoch(self.core.leader_id, self.core.epoch)

    def epoch_start_offset(self):
        return self.core.epoch_start_offset

    def next_offset(self):
        return self.core.log_end_offset
