"""A hand-driven Raft stand-in for controller tests: `FakeRaft` keeps the proposed batches
in a list and commits them when the test says so, so a test decides exactly when records
commit, when leadership moves and when a propose fails."""

import random

from kraftcore import codec
from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.controller import QuorumController
from kraftcore.errors import NotLeaderError
from kraftcore.raft import control
from kraftcore.raft.types import CommittedBatch, LeaderAndEpoch


class FakeRaft:
    def __init__(self, node_id=1, leader_id=1, epoch=1):
        self.node_id = node_id
        self.leader = LeaderAndEpoch(leader_id, epoch)
        self.batches = []  # CommittedBatch, committed or not
        self.committed = 0  # how many of `batches` are committed
        self.fail_propose = False
        self.resigned = 0
        self.start_offset = None
        if leader_id == node_id:
            self._leader_change_record()

    def _leader_change_record(self):
        offset = self.next_offset()
        self.start_offset = offset
        data = control.encode_control_batch(
            [control.LeaderChangeMessage(version=0, leader_id=self.node_id, voters=[],
                                         granting_voters=[])],
            base_offset=offset, leader_epoch=self.leader.epoch, timestamp=0)
        self.batches.append(CommittedBatch(offset, offset, self.leader.epoch, True, data))

    def next_offset(self):
        return self.batches[-1].last_offset + 1 if self.batches else 0

    def leader_and_epoch(self):
        return self.leader

    def epoch_start_offset(self):
        return self.start_offset if self.leader.leader_id == self.node_id else None

    def propose(self, values, *, timestamp_ms=None):
        if self.leader.leader_id != self.node_id or self.fail_propose:
            raise NotLeaderError(self.node_id, self.leader.leader_id, self.leader.epoch)
        base = self.next_offset()
        data = codec.encode_batch(values, base_offset=base, leader_epoch=self.leader.epoch,
                                  timestamp=base if timestamp_ms is None else timestamp_ms)
        self.batches.append(CommittedBatch(base, base + len(values) - 1, self.leader.epoch,
                                           False, data))
        return base + len(values) - 1

    def resign(self):
        """As the core does: the leader steps down and no longer knows a leader."""
        self.resigned += 1
        if self.leader.leader_id == self.node_id:
            self.leader = LeaderAndEpoch(None, self.leader.epoch)
            self.start_offset = None

    def take_commits(self, count=None):
        end = len(self.batches) if count is None else self.committed + count
        out = self.batches[self.committed:end]
        self.committed = end
        return out

    def lose_leadership(self, new_leader, epoch=None):
        self.leader = LeaderAndEpoch(new_leader, epoch or self.leader.epoch + 1)
        self.start_offset = None
        # uncommitted batches are dropped, as a new leader would truncate them
        del self.batches[self.committed:]

    def win_leadership(self, epoch=None):
        self.leader = LeaderAndEpoch(self.node_id, epoch or self.leader.epoch + 1)
        self._leader_change_record()


class Harness:
    """A controller over a FakeRaft, with time."""

    def __init__(self, node_id=1, leader_id=1, config=None, seed=0, **config_args):
        self.raft = FakeRaft(node_id, leader_id)
        self.now = 0
        self.config = config or ControllerConfig(**config_args)
        self.controller = QuorumController(self.raft, config=self.config,
                                           rng=random.Random(seed), now_ms=0)
        self.controller.on_leader_change()
        self.commit()

    def run(self):
        return self.controller.run(self.now)

    def commit(self, count=None):
        """Commit (all or `count` more) proposed batches and run the controller."""
        self.run()
        commits = self.raft.take_commits(count)
        self.controller.on_commits(commits)
        self.run()

    def advance(self, ms):
        self.now += ms
        self.run()

    def call(self, method, *args, commit=True, **kwargs):
        """Run an operation; with `commit`, commit what it wrote and return the result."""
        future = getattr(self.controller, method)(*args, **kwargs)
        self.run()
        if commit:
            self.commit()
            return future.result(timeout=0)
        return future

    @property
    def image(self):
        return self.controller.image
