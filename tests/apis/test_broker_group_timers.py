"""A group's deadlines act before the next membership request is answered, whatever the
coordinator's periodic `tick` has done: a member's heartbeat that comes after another
member's session ended is told to rejoin at once (REBALANCE_IN_PROGRESS), as Kafka's exact
timers would tell it, instead of one heartbeat interval later. Members of one rebalance
heartbeat in step (each starts its interval at the same SyncGroup answer), so a survivor's
heartbeat often lands just after a dead member's deadline, before the next tick."""

from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.test_broker_data import answer_async
from tests.apis.test_broker_groups import A
from tests.apis.test_broker_membership import (SESSION_MS, broker, describe,  # noqa: F401
                                               form_group, heartbeat, run)


def test_a_heartbeat_after_another_members_session_ended_is_told_to_rejoin(broker):  # noqa: F811
    by_id, leader = run(form_group(broker, A, 2))
    generation = next(iter(by_id.values())).generation_id
    alive = next(mid for mid in by_id if mid != leader)
    synced_at = broker.now
    broker.advance(SESSION_MS // 2)
    assert run(answer_async(broker, heartbeat(A, generation, alive), 4)).error_code == 0
    # the leader's session ends; no tick runs before the live member's next heartbeat
    broker.now = synced_at + SESSION_MS + 1
    answer = run(answer_async(broker, heartbeat(A, generation, alive), 4))
    assert answer.error_code == E.REBALANCE_IN_PROGRESS
    (g,) = describe(broker, A)
    assert (g.group_state, [x.member_id for x in g.members]) == ("PreparingRebalance", [alive])
