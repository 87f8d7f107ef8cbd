"""The simulated network: messages in flight between nodes, with faults.

`Network` owns every `RaftMessage` between `send` and delivery. Each message gets a random
delay (so messages overtake each other: reordering), may be dropped or duplicated, and is
lost when its link is blocked at send or at arrival time, or when its destination is down
or has restarted since the message was sent (the connection it travelled on is gone).

Partitions are a set of blocked directed links `(source, destination)`: a symmetric
partition blocks both directions between two groups, a one-way partition only one. Nothing
here reads a clock or a global random generator: time is the `Scheduler`'s, randomness the
`random.Random` passed in.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class NetworkParams:
    delay_ms_min: int = 1
    delay_ms_max: int = 10
    # Chance that a message is lost / delivered twice.
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    # Chance that a message is held up for an extra delay in [0, spike_ms_max] (a slow link).
    spike_probability: float = 0.0
    spike_ms_max: int = 0

    def __post_init__(self):
        if not 0 <= self.delay_ms_min <= self.delay_ms_max:
            raise ValueError(f"need 0 <= delay_ms_min <= delay_ms_max, got "
                             f"{self.delay_ms_min}, {self.delay_ms_max}")
        for name in ("drop_probability", "duplicate_probability", "spike_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if self.spike_ms_max < 0:
            raise ValueError("spike_ms_max must be >= 0")

    def calm(self):
        """The same delays without drops, duplicates or spikes (the liveness phase)."""
        return dataclasses.replace(self, drop_probability=0.0, duplicate_probability=0.0,
                                   spike_probability=0.0)


class Network:
    """Messages in flight; `deliver(message)` is called for each one that arrives."""

    def __init__(self, scheduler, rng, params, deliver, on_event=None):
        self.scheduler = scheduler
        self.rng = rng
        self.params = params
        self._deliver = deliver
        # on_event(kind, message): "drop", "dup" notifications for the trace.
        self._on_event = on_event
        self.blocked = set()
        # node id -> incarnation number while the node is up; absent while it is down.
        self._incarnations = {}
        self.sent = 0
        self.delivered = 0
        self.dropped = 0
        self.duplicated = 0

    # ------------------------------------------------------------------ nodes

    def node_up(self, node_id, incarnation):
        self._incarnations[node_id] = incarnation

    def node_down(self, node_id):
        self._incarnations.pop(node_id, None)

    def is_up(self, node_id):
        return node_id in self._incarnations

    # ------------------------------------------------------------------ partitions

    def partition(self, groups):
        """Block every link between different groups (both directions), replacing any
        earlier partition. A node in no group keeps all its links."""
        blocked = set()
        for i, group in enumerate(groups):
            for other in groups[i + 1:]:
                for a in group:
                    for b in other:
                        blocked.add((a, b))
                        blocked.add((b, a))
        self.blocked = blocked

    def block(self, source, destination):
        """Block one direction of one link (a one-way partition)."""
        self.blocked.add((source, destination))

    def heal(self):
        self.blocked = set()

    # ------------------------------------------------------------------ traffic

    def send(self, message, duplicable=True):
        """Send `message`; `duplicable=False` for a request over a connection that never
        delivers it twice (the controller workload's client and broker requests: TCP)."""
        self.sent += 1
        link = (message.source, message.destination)
        params = self.params
        rng = self.rng
        if link in self.blocked:
            self._drop(message)
            return
        if params.drop_probability and rng.random() < params.drop_probability:
            self._drop(message)
            return
        copies = 1
        if (duplicable and params.duplicate_probability
                and rng.random() < params.duplicate_probability):
            copies = 2
            self.duplicated += 1
            if self._on_event is not None:
                self._on_event("dup", message)
        incarnation = self._incarnations.get(message.destination)
        for _ in range(copies):
            delay_ms = rng.randint(params.delay_ms_min, params.delay_ms_max)
            if params.spike_probability and rng.random() < params.spike_probability:
                delay_ms += rng.randint(0, params.spike_ms_max)
            self.scheduler.after(delay_ms, self._arrive, message, incarnation)

    def _drop(self, message):
        self.dropped += 1
        if self._on_event is not None:
            self._on_event("drop", message)

    def _arrive(self, message, incarnation):
        if (message.source, message.destination) in self.blocked:
            self._drop(message)
            return
        current = self._incarnations.get(message.destination)
        if current is None or current != incarnation:
            self._drop(message)
            return
        self.delivered += 1
        self._deliver(message)
