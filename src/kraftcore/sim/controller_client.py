"""The client of the simulator's controller workload (`kraftcore.sim.controller`): node id
`CLIENT_ID`, never crashes, sends create topic, delete topic and config changes to the
controllers, at most a few at a time, and records each operation and its answer in the
history (`kraftcore.sim.history`). It talks to the controller that answered it last, and
now and then to one picked at random (a client with an outdated view).
"""

from kraftcore.controller.replication import (MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION,
                                              NewTopic)
from kraftcore.errors import NotControllerError
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.raft.types import RaftMessage
from kraftcore.sim.controller_messages import CLIENT_ID, ControllerCall, answer_of

__all__ = ["ControllerClient"]

# The configs the client changes, and the values it sets.
CONFIG_VALUES = {MIN_INSYNC_REPLICAS: ("1", "2"), UNCLEAN_LEADER_ELECTION: ("true", "false")}
# How often the client sends to a controller picked at random rather than the one that
# answered last: a client with an outdated view, which may reach a deposed controller that
# has not yet heard of its successor.
STALE_TARGET_PROBABILITY = 0.2


class ControllerClient:
    """The client: operations on topics and configs, recorded in the history."""

    def __init__(self, sim, rng, params):
        self.sim = sim
        self.rng = rng
        self.params = params
        self.proposed = None  # no raw values: the checker's value checks are off
        self.active = False
        self.target = None
        self.outstanding = {}  # correlation id -> (operation, kind)
        self._next_call = 0
        self.proposals = 0  # operations sent
        self.answered = 0

    def start(self):
        self.active = True
        self.sim.network.node_up(CLIENT_ID, 1)
        self._schedule()

    def stop(self):
        self.active = False

    def _schedule(self):
        self.sim.scheduler.after(self.rng.randint(1, self.params.op_interval_ms_max),
                                 self._tick)

    def _tick(self):
        if not self.active:
            return
        if len(self.outstanding) < self.params.ops_inflight_max:
            self._random_operation()
        self._schedule()

    def _random_operation(self):
        rng = self.rng
        name = f"t{rng.randrange(self.params.topics)}"
        draw = rng.random()
        if draw < 0.35:
            brokers = self.sim.params.observers
            self.create_topic(name, rng.randint(1, 3), rng.randint(1, max(1, min(3, brokers))))
        elif draw < 0.6:
            op = self.sim.history.invoke(("topic", name), "delete", None, self._now(),
                                         CLIENT_ID)
            self.send("delete_topics", ([name],), op)
        elif draw < 0.85:
            config = rng.choice(sorted(CONFIG_VALUES))
            value = rng.choice(CONFIG_VALUES[config])
            op = self.sim.history.invoke(("topic", name), "topic-config", (config, value),
                                         self._now(), CLIENT_ID)
            self.send("incremental_alter_configs",
                      ([(CONFIG_TOPIC, name, [(config, "set", value)])],), op)
        else:
            config = rng.choice(sorted(CONFIG_VALUES))
            value = rng.choice(CONFIG_VALUES[config])
            op = self.sim.history.invoke(("cluster-config", config), "cluster-config", value,
                                         self._now(), CLIENT_ID)
            self.send("incremental_alter_configs",
                      ([(CONFIG_BROKER, "", [(config, "set", value)])],), op)

    def _now(self):
        return self.sim.scheduler.now_ms

    def create_topic(self, name, partitions, replication_factor):
        op = self.sim.history.invoke(("topic", name), "create", None, self._now(), CLIENT_ID)
        self.send("create_topics", ([NewTopic(name, partitions, replication_factor)],), op)
        return op

    def send(self, method, args, op):
        sim = self.sim
        voters = sim.voter_ids
        target = self.target
        if target not in voters or self.rng.random() < STALE_TARGET_PROBABILITY:
            target = voters[self.rng.randrange(len(voters))]
        self._next_call += 1
        call_id = self._next_call
        self.outstanding[call_id] = op
        self.proposals += 1
        sim.network.send(RaftMessage(CLIENT_ID, target, call_id,
                                     ControllerCall(method, args, {})), duplicable=False)
        sim.scheduler.after(self.params.request_timeout_ms, self._timeout, call_id)

    def _timeout(self, call_id):
        if self.outstanding.pop(call_id, None) is not None:
            self.target = None  # ask someone else next time

    def on_answer(self, message):
        op = self.outstanding.pop(message.correlation_id, None)
        if op is None:
            return  # answered after its timeout: the client gave up on it
        body = message.body
        if isinstance(body.error, NotControllerError):
            self.target = body.error.controller_id
        else:
            self.target = message.source
        self.sim.history.answer(op, answer_of(op.kind, body), self._now())
        self.answered += 1
