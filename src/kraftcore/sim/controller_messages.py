"""The messages of the simulator's controller workload (`kraftcore.sim.controller`): who is
who, and what travels between the client, the brokers and the controllers.

Every request to a controller and every answer travels through the simulated network as a
message (`ControllerCall`, `ControllerAnswer`), so drops, delays, partitions and crashes
hit them as they hit Raft's messages; a request without an answer within its timeout has
an unknown outcome. `answer_of` reads an answer as the history (`kraftcore.sim.history`)
records it.
"""

from typing import NamedTuple

from kraftcore.errors import ControllerError, NotControllerError
from kraftcore.sim.invariants import SimViolation

__all__ = ["ControllerCall", "ControllerAnswer", "answer_of", "CLIENT_ID", "CLUSTER_ID"]

CLIENT_ID = 0  # the client's node id on the simulated network; it never crashes
CLUSTER_ID = "kraftcore-sim"


class ControllerCall(NamedTuple):
    """A request to a controller: its method and arguments."""

    method: str
    args: tuple
    kwargs: dict


class ControllerAnswer(NamedTuple):
    """The controller's answer: the operation's result, or the exception it failed with."""

    result: object
    error: object


def answer_of(kind, body):
    """The history's answer for an operation of `kind` from a `ControllerAnswer`: ("ok",
    value), ("error", code), or None when the outcome is unknown (NOT_CONTROLLER: records
    may still commit)."""
    error = body.error
    if isinstance(error, NotControllerError):
        return None
    if isinstance(error, ControllerError):
        return ("error", error.code)
    if error is not None:
        raise SimViolation(f"a controller failed a {kind} with {type(error).__name__}: {error}")
    result = body.result
    if kind == "register":
        return ("ok", result.broker_epoch)
    code = result[0].error_code if kind in ("create", "delete") else result[0][0]
    return ("ok", None) if code == 0 else ("error", code)
