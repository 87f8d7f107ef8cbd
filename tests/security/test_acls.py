"""`kraftcore.security.acls`: Kafka's enum codes, filter matching and the checks of a new
ACL and of a filter."""

import pytest

from kraftcore.errors import ControllerError
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.security.acls import (AclBinding, AclBindingFilter, AclOperation,
                                     AclPermissionType, PatternType, ResourceType,
                                     check_filter, check_new_acl, parse_enum)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE = AclOperation.READ, AclOperation.WRITE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(rtype=T, name="orders", ptype=LIT, principal="User:alice", host="*", op=READ,
        perm=ALLOW):
    return AclBinding(rtype, name, ptype, principal, host, op, perm)


def test_codes_are_kafkas():
    assert [(m.name, int(m)) for m in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [int(m) for m in PatternType] == [0, 1, 2, 3, 4]
    assert [m.name for m in PatternType] == ["UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"]
    assert AclOperation.DESCRIBE == 8 and AclOperation.IDEMPOTENT_WRITE == 12
    assert AclOperation.DESCRIBE_TOKENS == 14 and len(AclOperation) == 15
    assert [int(m) for m in AclPermissionType] == [0, 1, 2, 3]
    assert ResourceType.of(99) is ResourceType.UNKNOWN
    assert AclOperation.of(-1) is AclOperation.UNKNOWN


def test_parse_enum():
    assert parse_enum(AclOperation, "describe-configs") is AclOperation.DESCRIBE_CONFIGS
    assert parse_enum(ResourceType, "Topic") is T
    assert parse_enum(PatternType, "3") is LIT
    with pytest.raises(ValueError, match="not a AclOperation"):
        parse_enum(AclOperation, "reed")


def test_literal_and_prefixed_filters_match_exactly():
    f = AclBindingFilter(T, "orders", LIT)
    assert f.matches(acl())
    assert not f.matches(acl(name="orders2"))
    assert not f.matches(acl(ptype=PRE))
    assert not f.matches(acl(name="*"))
    assert AclBindingFilter(T, "ord", PRE).matches(acl(name="ord", ptype=PRE))
    assert not AclBindingFilter(T, "ord", PRE).matches(acl(name="orders", ptype=PRE))


def test_any_filter_matches_the_name_in_any_pattern():
    f = AclBindingFilter(ResourceType.ANY, "orders", PatternType.ANY)
    assert f.matches(acl()) and f.matches(acl(ptype=PRE)) and f.matches(acl(rtype=G))
    assert not f.matches(acl(name="*"))
    assert not f.matches(acl(name="ord", ptype=PRE))
    assert AclBindingFilter.ANY.matches(acl(name="x", rtype=C))


def test_match_filter_finds_the_acls_that_apply_to_a_resource():
    f = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert f.matches(acl())
    assert f.matches(acl(name="*"))
    assert f.matches(acl(name="ord", ptype=PRE))
    assert f.matches(acl(name="orders", ptype=PRE))
    assert not f.matches(acl(name="orders-x", ptype=PRE))
    assert not f.matches(acl(name="ord"))
    assert not f.matches(acl(rtype=G))
    assert AclBindingFilter(T, None, PatternType.MATCH).matches(acl(name="anything", ptype=PRE))


def test_entry_filter():
    assert AclBindingFilter(principal="User:alice").matches(acl())
    assert not AclBindingFilter(principal="User:bob").matches(acl())
    assert not AclBindingFilter(host="10.0.0.1").matches(acl())
    assert AclBindingFilter(host="*").matches(acl())
    assert AclBindingFilter(operation=READ).matches(acl())
    assert not AclBindingFilter(operation=WRITE).matches(acl())
    assert not AclBindingFilter(permission=DENY).matches(acl())
    assert AclBindingFilter(permission=ALLOW, operation=AclOperation.ANY).matches(acl())


@pytest.mark.parametrize("binding, message", [
    (acl(rtype=C, name="other"), "The only valid name for the CLUSTER resource is "
     "kafka-cluster"),
    (acl(name=""), "Invalid empty resource name"),
    (acl(rtype=ResourceType.ANY), "Invalid resourceType ANY"),
    (acl(rtype=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl(ptype=PatternType.MATCH), "Invalid patternType MATCH"),
    (acl(ptype=PatternType.ANY), "Invalid patternType ANY"),
    (acl(op=AclOperation.ANY), "Invalid operation ANY"),
    (acl(op=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(perm=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl(principal="alice"), "Invalid principal 'alice'"),
    (acl(principal=":alice"), "Invalid principal"),
])
def test_a_new_acl_is_checked_as_kafka_checks_it(binding, message):
    with pytest.raises(ControllerError) as info:
        check_new_acl(binding)
    assert info.value.code == E.INVALID_REQUEST
    assert str(info.value).startswith(message)


def test_valid_new_acls():
    for binding in (acl(), acl(name="*"), acl(ptype=PRE, name="ord"),
                    acl(rtype=C, name="kafka-cluster", op=AclOperation.ALTER),
                    acl(principal="User:*", perm=DENY, op=AclOperation.ALL),
                    acl(principal="User:CN=a,O=b:c")):
        check_new_acl(binding)


def test_filter_check():
    check_filter(AclBindingFilter.ANY)
    for bad, message in ((AclBindingFilter(ResourceType.UNKNOWN), "Unknown patternFilter."),
                         (AclBindingFilter(pattern_type=PatternType.UNKNOWN),
                          "Unknown patternFilter."),
                         (AclBindingFilter(operation=AclOperation.UNKNOWN),
                          "Unknown entryFilter."),
                         (AclBindingFilter(permission=AclPermissionType.UNKNOWN),
                          "Unknown entryFilter.")):
        assert bad.is_unknown()
        with pytest.raises(ControllerError, match=message):
            check_filter(bad)
