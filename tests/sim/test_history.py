"""The linearizability checker of the controller workload (kraftcore.sim.history)."""

import pytest

from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.sim.history import (UNKNOWN_EPOCH, History, LinearizabilityError,
                                   linearizable)

OK = ("ok", None)
EXISTS = ("error", ErrorCode.TOPIC_ALREADY_EXISTS)
MISSING = ("error", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
DUPLICATE = ("error", ErrorCode.DUPLICATE_BROKER_REGISTRATION)
PRESENT = (True, frozenset())
ABSENT = (False, frozenset())


def history(*ops):
    """ops: (key, kind, arg, invoked, answered or None, answer or None)."""
    h = History()
    for key, kind, arg, invoked, answered, answer in ops:
        op = h.invoke(key, kind, arg, invoked)
        if answer is not None:
            h.answer(op, answer, answered)
    return h


T = ("topic", "t")


def test_sequential_create_delete_create_is_linearizable():
    h = history((T, "create", None, 0, 1, OK), (T, "delete", None, 2, 3, OK),
                (T, "create", None, 4, 5, OK), (T, "create", None, 6, 7, EXISTS))
    h.check({T: PRESENT})


def test_a_lost_acknowledged_create_is_caught():
    # The client was told "created", nothing deleted it, yet the cluster ends without it.
    h = history((T, "create", None, 0, 1, OK))
    with pytest.raises(LinearizabilityError, match="fit no sequential order"):
        h.check({})


def test_a_stale_refusal_after_a_completed_create_is_caught():
    # "does not exist" answered after a create had completed, with no delete in between.
    h = history((T, "create", None, 0, 1, OK), (T, "delete", None, 5, 6, MISSING))
    with pytest.raises(LinearizabilityError):
        h.check({T: PRESENT})


def test_overlapping_operations_may_take_effect_in_either_order():
    # The delete was invoked before the create answered: it may have gone first.
    h = history((T, "create", None, 0, 10, OK), (T, "delete", None, 2, 8, MISSING))
    h.check({T: PRESENT})


def test_an_unanswered_operation_may_or_may_not_take_effect():
    unknown_create = (T, "create", None, 0, None, None)
    history(unknown_create).check({T: PRESENT})
    history(unknown_create).check({})


def test_an_unanswered_operation_cannot_take_effect_before_it_was_invoked():
    h = history((T, "delete", None, 0, 1, MISSING), (T, "create", None, 5, None, None),
                (T, "delete", None, 2, 3, OK))
    with pytest.raises(LinearizabilityError):
        h.check({})


def test_topic_configs_need_the_topic_and_go_with_it():
    cfg = ("min.insync.replicas", "2")
    h = history((T, "topic-config", cfg, 0, 1, MISSING), (T, "create", None, 2, 3, OK),
                (T, "topic-config", cfg, 4, 5, OK))
    h.check({T: (True, frozenset({cfg}))})
    with pytest.raises(LinearizabilityError):
        h.check({T: PRESENT})  # the set was acknowledged; the config must be there
    h2 = history((T, "create", None, 0, 1, OK), (T, "topic-config", cfg, 2, 3, OK),
                 (T, "delete", None, 4, 5, OK), (T, "create", None, 6, 7, OK))
    h2.check({T: PRESENT})  # a re-created topic starts without the old configs


def test_cluster_configs_end_with_the_last_acknowledged_value():
    key = ("cluster-config", "unclean.leader.election.enable")
    h = history((key, "cluster-config", "true", 0, 1, OK),
                (key, "cluster-config", "false", 2, 3, OK))
    h.check({key: "false"})
    with pytest.raises(LinearizabilityError):
        h.check({key: "true"})


def test_broker_registrations_keep_or_grow_the_epoch():
    key = ("broker", 4)
    fine = history((key, "register", "inc-a", 0, 1, ("ok", 10)),
                   (key, "register", "inc-a", 2, 3, ("ok", 10)),
                   (key, "register", "inc-b", 4, 5, DUPLICATE),
                   (key, "register", "inc-b", 6, 7, ("ok", 20)))
    fine.check({key: ("inc-b", 20)})
    lower = history((key, "register", "inc-a", 0, 1, ("ok", 10)),
                    (key, "register", "inc-b", 2, 3, ("ok", 5)))
    with pytest.raises(LinearizabilityError):
        lower.check({key: ("inc-b", 5)})
    changed = history((key, "register", "inc-a", 0, 1, ("ok", 10)),
                      (key, "register", "inc-a", 2, 3, ("ok", 11)))
    with pytest.raises(LinearizabilityError):
        changed.check({key: ("inc-a", 11)})


def test_a_registration_whose_answer_was_lost_takes_the_epoch_the_image_shows():
    key = ("broker", 4)
    h = history((key, "register", "inc-a", 0, None, None))
    h.check({key: ("inc-a", 42)})
    h.check({})
    assert UNKNOWN_EPOCH < 0


def test_keys_present_at_the_end_but_never_created_are_caught():
    with pytest.raises(LinearizabilityError):
        History().check({T: PRESENT})


def test_many_identical_unanswered_retries_stay_cheap():
    # A broker retrying its registration through a long outage: 60 unanswered, identical
    # operations would be 2^60 subsets without the search's reductions.
    key = ("broker", 4)
    ops = [(key, "register", "inc-a", i, None, None) for i in range(60)]
    ops.append((key, "register", "inc-a", 100, 101, ("ok", 7)))
    history(*ops).check({key: ("inc-a", 7)})


def test_linearizable_is_false_for_an_impossible_answer():
    [op] = history((T, "delete", None, 0, 1, OK)).operations
    assert not linearizable([op], ABSENT, ABSENT)
