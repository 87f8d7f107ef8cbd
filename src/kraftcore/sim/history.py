"""The operation history of the controller workload and its linearizability check.

`History` records every operation a client (or a broker registering) sends to the
controllers: when it was invoked, when its answer arrived (simulated ms) and what the
answer said. An operation that was never answered (a timeout, a crash) or that failed
with `NOT_CONTROLLER` has an *unknown* outcome: its records may or may not have been
committed (a controller that loses its leadership fails its parked futures, but what it
had already appended may still commit), so it may take effect at any point after its
invocation, or never.

`check(final_states)` decides whether the history is linearizable against a sequential
model of the metadata it touches (Herlihy & Wing; the search is Wing & Gong's, as in
Lowe's and Knossos' checkers): is there one order of the operations, each placed between
its invocation and its answer, in which every answered operation gets the answer it got
and the final state is the one the cluster holds at the end? The model is split by key —
a topic name, a cluster config name, a broker id — since operations on different keys do
not interact (P-compositionality), which keeps each search small.

The model (`step(state, op)` returns every state the operation can leave, [] when its
recorded answer is impossible from `state`):

* topic `name`: `(exists, configs)`. create: OK when absent (then present, no configs);
  TOPIC_ALREADY_EXISTS when present; any other refusal (replication factor, placement)
  only when absent, without effect. delete: OK when present (then absent; its configs go
  with it); UNKNOWN_TOPIC_OR_PARTITION when absent. A topic config set: OK when present;
  UNKNOWN_TOPIC_OR_PARTITION when absent.
* cluster config `name`: its value; a set is always OK.
* broker `id`: `(incarnation id, broker epoch)` of its registration. Registering the same
  incarnation keeps the epoch; a new incarnation gets a larger epoch (the offset of its
  record), or DUPLICATE_BROKER_REGISTRATION while another incarnation holds the id (its
  session is alive: time the model does not track, so the refusal is always allowed then).
* the final state of every key is read from the image at the end of the run, after every
  answered operation.

A violation names the key, the operations on it and why no order fits.
"""

import dataclasses

from kraftcore.limits import SIM_HISTORY_SEARCH_STATES_MAX
from kraftcore.protocol.error_codes import ErrorCode


UNKNOWN_EPOCH = -1
"""The epoch of a registration whose answer was lost: some epoch above the previous one."""


@dataclasses.dataclass
class Operation:
    """One operation: `kind` and `arg` say what, `key` what it touches, `answer` is
    `("ok", value)`, `("error", code)` or None (unknown outcome)."""

    index: int
    key: tuple
    kind: str
    arg: object
    invoked_ms: int
    answered_ms: int = None
    answer: tuple = None
    source: int = None

    def describe(self):
        answer = "unknown" if self.answer is None else (
            "ok" if self.answer[0] == "ok" and self.answer[1] is None
            else f"{self.answer[0]} {self.answer[1]}")
        arg = "" if self.arg is None else f" {self.arg}"
        end = "..." if self.answered_ms is None else self.answered_ms
        return (f"#{self.index} {self.kind}{arg} from {self.source} "
                f"[{self.invoked_ms}, {end}] -> {answer}")


class History:
    def __init__(self):
        self.operations = []

    def __len__(self):
        return len(self.operations)

    def invoke(self, key, kind, arg, now_ms, source=None):
        op = Operation(len(self.operations), key, kind, arg, now_ms, source=source)
        self.operations.append(op)
        return op

    @staticmethod
    def answer(op, answer, now_ms):
        """Record `op`'s answer (None keeps it unknown); a second answer is ignored."""
        if op.answered_ms is None and answer is not None:
            op.answer = answer
            op.answered_ms = now_ms

    def check(self, final_states):
        """Raise `LinearizabilityError` unless every key's operations linearize and end in
        `final_states[key]` (keys absent from it end in their initial state)."""
        by_key = {}
        for op in self.operations:
            by_key.setdefault(op.key, []).append(op)
        for key in final_states:
            by_key.setdefault(key, [])
        for key in sorted(by_key, key=repr):
            final = final_states.get(key, initial_state(key))
            ops = by_key[key]
            if not linearizable(ops, initial_state(key), final):
                shown = "\n    ".join(op.describe() for op in ops[-40:])
                raise LinearizabilityError(
                    f"linearizability: the {len(ops)} operations on {key} fit no sequential "
                    f"order ending in state {final!r}:\n    {shown}")


class LinearizabilityError(Exception):
    """The history has no linearization; the message shows the key's operations."""


def initial_state(key):
    kind = key[0]
    if kind == "topic":
        return (False, frozenset())
    return None  # a cluster config not set, a broker not registered


def _is_error(answer, *codes):
    return answer[0] == "error" and answer[1] in codes


def step(state, op):
    """Every state `op` can leave when applied to `state` (see the module docstring)."""
    kind = op.kind
    answer = op.answer
    if kind == "create":
        exists, _ = state
        if answer is None:
            return [state] if exists else [state, (True, frozenset())]
        if answer[0] == "ok":
            return [] if exists else [(True, frozenset())]
        if _is_error(answer, ErrorCode.TOPIC_ALREADY_EXISTS):
            return [state] if exists else []
        return [] if exists else [state]
    if kind == "delete":
        exists, _ = state
        if answer is None:
            return [(False, frozenset())] if exists else [state]
        if answer[0] == "ok":
            return [(False, frozenset())] if exists else []
        if _is_error(answer, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            return [] if exists else [state]
        return []
    if kind == "topic-config":
        exists, configs = state
        name, value = op.arg
        changed = (True, frozenset({**dict(configs), name: value}.items()))
        if answer is None:
            return [changed] if exists else [state]
        if answer[0] == "ok":
            return [changed] if exists else []
        if _is_error(answer, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            return [] if exists else [state]
        return []
    if kind == "cluster-config":
        if answer is None:
            return [state, op.arg]
        return [op.arg] if answer[0] == "ok" else []
    if kind == "register":
        return _register(state, op.arg, answer)
    raise ValueError(f"unknown operation kind {kind!r}")


def _register(state, incarnation, answer):
    same = state is not None and state[0] == incarnation
    if answer is None:
        if same:
            return [state]
        return [state, (incarnation, UNKNOWN_EPOCH)]
    if answer[0] == "ok":
        epoch = answer[1]
        if same:
            if state[1] in (UNKNOWN_EPOCH, epoch):
                return [(incarnation, epoch)]
            return []
        if state is not None and state[1] != UNKNOWN_EPOCH and epoch <= state[1]:
            return []
        return [(incarnation, epoch)]
    if _is_error(answer, ErrorCode.DUPLICATE_BROKER_REGISTRATION):
        return [state] if state is not None and not same else []
    return []


def _matches(state, final):
    if state == final:
        return True
    # A registration whose answer was lost: its epoch is whatever the image says.
    return (state is not None and final is not None and len(state) == 2
            and state[1] == UNKNOWN_EPOCH and state[0] == final[0]
            and isinstance(final[1], int))


def linearizable(ops, initial, final):
    """Whether `ops` (one key's) have an order, consistent with real time, in which each
    answered operation gets its answer and the state ends as `final`. Unknown operations
    may be left out (they took effect after the end, or never)."""
    ops = sorted(ops, key=lambda op: op.invoked_ms)
    count = len(ops)
    answered = 0
    # Two reductions keep the search small without losing an order (an unknown operation
    # never bounds when others may go, and may be left out):
    # * among identical unknown operations (a broker retrying its registration), only the
    #   earliest not yet placed may go next: a later one's window lies inside its window;
    # * an unknown operation that would not change the state is not placed at all.
    earlier_twin = [0] * count
    last_unknown = {}
    for i, op in enumerate(ops):
        if op.answer is not None:
            answered |= 1 << i
        else:
            signature = (op.kind, op.arg)
            if signature in last_unknown:
                earlier_twin[i] = 1 << last_unknown[signature]
            last_unknown[signature] = i
    seen = set()
    stack = [(initial, 0)]
    while stack:
        state, done = stack.pop()
        if (state, done) in seen:
            continue
        seen.add((state, done))
        if len(seen) > SIM_HISTORY_SEARCH_STATES_MAX:
            raise LinearizabilityError(
                f"the linearizability search of {count} operations visited more than "
                f"{SIM_HISTORY_SEARCH_STATES_MAX} states; run a smaller workload")
        if answered & ~done == 0 and _matches(state, final):
            return True
        # An operation may go next only if no operation still to place was answered before
        # it was invoked.
        horizon = min((op.answered_ms for i, op in enumerate(ops)
                       if not done >> i & 1 and op.answer is not None), default=None)
        for i, op in enumerate(ops):
            if done >> i & 1:
                continue
            if horizon is not None and op.invoked_ms > horizon:
                break
            unknown = op.answer is None
            if unknown and earlier_twin[i] & ~done:
                continue
            for nxt in step(state, op):
                if not (unknown and nxt == state):
                    stack.append((nxt, done | 1 << i))
    return False
