"""`kraftcore.security.authorizer`: StandardAuthorizer's rules (super users, DENY over
ALLOW, literal / wildcard / prefixed patterns, principal and host wildcards, implied
operations, the no-ACL default), kept current from a metadata image."""

import random

import pytest

from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import MetadataImage
from kraftcore.security.acls import (AclBinding, AclBindingFilter, AclOperation as Op,
                                     AclPermissionType, PatternType, ResourceType)
from kraftcore.security.authorizer import Authorizer, parse_super_users
from kraftcore.security.principal import KafkaPrincipal
from kraftcore.types import Uuid

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = KafkaPrincipal("User", "alice")
HOST = "10.0.0.7"


def acl(name="orders", op=Op.READ, perm=ALLOW, principal="User:alice", host="*", ptype=LIT,
        rtype=T):
    return AclBinding(rtype, name, ptype, principal, host, op, perm)


def auth(*bindings, **kwargs):
    return Authorizer(acls=list(bindings), **kwargs)


def can(a, op=Op.READ, name="orders", principal=ALICE, host=HOST, rtype=T):
    return a.authorize(principal, host, op, rtype, name)


def test_no_acls_follows_allow_everyone_if_no_acl_found():
    assert not can(auth())
    assert can(auth(allow_everyone_if_no_acl_found=True))


def test_an_acl_on_the_resource_for_someone_else_denies_by_default():
    # "no ACL found" means no ACL on the resource at all, whoever it names
    a = auth(acl(principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert not can(a)
    assert can(a, name="payments")  # no ACL applies to this one
    a = auth(acl(op=Op.WRITE, host="10.9.9.9"), allow_everyone_if_no_acl_found=True)
    assert not can(a)


def test_super_users_are_allowed_everything():
    a = auth(acl(op=Op.ALL, perm=DENY), super_users="User:admin; User:alice")
    assert can(a)
    assert can(a, Op.ALTER, rtype=C, name="kafka-cluster")
    assert not can(a, principal="User:bob")
    assert parse_super_users("User:a;;User:b ;") == {"User:a", "User:b"}
    assert parse_super_users(None) == frozenset()
    assert parse_super_users([ALICE]) == {"User:alice"}
    with pytest.raises(ValueError, match="not a principal"):
        parse_super_users("alice")


def test_allow_and_deny():
    assert can(auth(acl()))
    assert not can(auth(acl(), acl(perm=DENY)))
    assert not can(auth(acl(op=Op.ALL), acl(perm=DENY, name="ord", ptype=PRE)))
    assert not can(auth(acl(), acl(perm=DENY, name="*", principal="User:*")))
    assert not can(auth(acl(op=Op.WRITE)))


def test_patterns():
    assert can(auth(acl(name="*")), name="anything")
    assert can(auth(acl(name="ord", ptype=PRE)))
    assert can(auth(acl(name="orders", ptype=PRE)))
    assert not can(auth(acl(name="orders-x", ptype=PRE)))
    assert not can(auth(acl(name="ord")))  # a literal is not a prefix
    assert not can(auth(acl(name="*", ptype=PRE)))  # '*' prefixes only names starting '*'
    assert can(auth(acl(name="*", ptype=PRE)), name="*x")
    assert not can(auth(acl(rtype=G)))  # another resource type


def test_principal_and_host():
    assert can(auth(acl(principal="User:*")))
    assert not can(auth(acl(principal="User:bob")))
    assert not can(auth(acl(principal="Group:alice")))
    assert can(auth(acl(host=HOST)))
    assert not can(auth(acl(host="10.0.0.8")))
    assert can(auth(acl()), principal="User:alice")


@pytest.mark.parametrize("granted, asked, allowed", [
    (Op.READ, Op.DESCRIBE, True), (Op.WRITE, Op.DESCRIBE, True),
    (Op.DELETE, Op.DESCRIBE, True), (Op.ALTER, Op.DESCRIBE, True),
    (Op.CREATE, Op.DESCRIBE, False), (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
    (Op.ALTER_CONFIGS, Op.DESCRIBE, False), (Op.DESCRIBE, Op.READ, False),
    (Op.ALL, Op.IDEMPOTENT_WRITE, True), (Op.ALL, Op.DESCRIBE_CONFIGS, True),
])
def test_implied_operations_of_allow(granted, asked, allowed):
    assert can(auth(acl(op=granted)), asked) is allowed


def test_deny_implies_nothing_but_deny_all_denies_all():
    a = auth(acl(op=Op.ALL), acl(op=Op.READ, perm=DENY))
    assert not can(a, Op.READ)
    assert can(a, Op.DESCRIBE)  # a DENY of READ does not deny DESCRIBE
    a = auth(acl(op=Op.ALL), acl(op=Op.ALL, perm=DENY, name="ord", ptype=PRE))
    assert not any(can(a, op) for op in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS))


def test_bad_checks_are_refused():
    a = auth()
    with pytest.raises(ValueError, match="concrete operation"):
        can(a, Op.ANY)
    with pytest.raises(ValueError, match="resource type ANY"):
        can(a, rtype=ResourceType.ANY)
    with pytest.raises(TypeError, match="principal"):
        can(a, principal="alice")


def test_authorize_any():
    a = auth(acl(name="ord", ptype=PRE, op=Op.WRITE))
    assert a.authorize_any(ALICE, HOST, Op.WRITE, T)
    assert not a.authorize_any(ALICE, HOST, Op.READ, T)
    assert not a.authorize_any("User:bob", HOST, Op.WRITE, T)
    # a DENY of a shorter prefix dominates
    a = auth(acl(name="ord", ptype=PRE, op=Op.WRITE), acl(name="o", ptype=PRE, op=Op.WRITE,
                                                          perm=DENY))
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T)
    # a literal allowed and denied; another literal allowed
    a = auth(acl(op=Op.WRITE), acl(op=Op.WRITE, perm=DENY))
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T)
    assert a.authorize_any(ALICE, HOST, Op.WRITE, T) is False
    a = auth(acl(op=Op.WRITE), acl(op=Op.WRITE, perm=DENY), acl(name="x", op=Op.ALL))
    assert a.authorize_any(ALICE, HOST, Op.WRITE, T)
    # wildcard deny wins over a wildcard allow, whatever the order
    a = auth(acl(name="*", op=Op.WRITE), acl(name="*", op=Op.WRITE, perm=DENY))
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T)
    assert auth(allow_everyone_if_no_acl_found=True).authorize_any(ALICE, HOST, Op.WRITE, T)
    assert auth(super_users="User:alice").authorize_any(ALICE, HOST, Op.CREATE, C)


def _image(*bindings):
    delta = MetadataDelta(MetadataImage())
    rng = random.Random(1)
    for b in bindings:
        delta.replay(R.AccessControlEntryRecord(
            id=Uuid.random(rng), resource_type=b.resource_type, resource_name=b.name,
            pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission))
    return delta.apply(len(bindings), 1, 0)


def test_kept_current_from_the_image():
    image = _image(acl(), acl(name="pay", ptype=PRE, op=Op.WRITE))
    a = Authorizer.from_image(image)
    assert len(a) == 2 and a.rebuilds == 1
    assert can(a) and can(a, Op.WRITE, name="payments")
    # an image that changes something else keeps the ACL map: no rebuild
    delta = MetadataDelta(image)
    delta.replay(R.FeatureLevelRecord(name="metadata.version", feature_level=20))
    later = delta.apply(10, 1, 0)
    assert later.acls is image.acls
    a.update(later)
    assert a.rebuilds == 1
    # removing the READ ACL
    delta = MetadataDelta(later)
    acl_id = next(i for i, r in later.acls.items() if r.operation == Op.READ)
    delta.replay(R.RemoveAccessControlEntryRecord(id=acl_id))
    a.update(delta.apply(11, 1, 0))
    assert a.rebuilds == 2 and len(a) == 1
    assert not can(a)
    assert [b.name for b in a.acls(AclBindingFilter(pattern_type=PRE))] == ["pay"]


def test_many_acls_are_indexed():
    rng = random.Random(5)
    bindings = [acl(name=f"t{i}", principal=f"User:u{rng.randrange(50)}") for i in range(3000)]
    bindings.append(acl(name="t1", ptype=PRE, principal="User:alice", op=Op.WRITE))
    a = auth(*bindings)
    assert can(a, Op.WRITE, name="t1234")
    assert not can(a, Op.READ, name="t1234")
    assert not can(a, Op.WRITE, name="t2")
