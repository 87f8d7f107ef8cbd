"""The ACL and SCRAM credential RPCs (`kraftcore.apis.security`) against a real
`QuorumController` over a one-voter `LocalQuorum`, through the wire at every version: on
the controller, and on a broker that answers reads from its image and forwards writes."""

import pytest

from kraftcore.apis.broker import BROKER_API_KEYS, FORWARDED_API_KEYS
from kraftcore.apis.controller import CONTROLLER_API_KEYS
from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.local import LocalQuorum
from kraftcore.metadata import records as R
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.security import scram_keys as K
from kraftcore.security.acls import (AclOperation as Op, AclPermissionType, PatternType,
                                     ResourceType)

from tests.apis.helpers import LocalFacade, StandbyFacade, call, versions
from tests.apis.test_broker import BrokerFacade, answer

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def creation(name="orders", rtype=T, ptype=LIT, principal="User:alice", host="*",
             op=Op.READ, perm=ALLOW):
    return m.CreateAclsRequest.AclCreation(
        resource_type=rtype, resource_name=name, resource_pattern_type=ptype,
        principal=principal, host=host, operation=op, permission_type=perm)


def create(*creations):
    return m.CreateAclsRequest(creations=list(creations))


def acl_filter(cls, rtype=ResourceType.ANY, name=None, ptype=PatternType.ANY, principal=None,
               host=None, op=Op.ANY, perm=AclPermissionType.ANY):
    return cls(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=ptype,
               principal_filter=principal, host_filter=host, operation=op,
               permission_type=perm)


def describe(**kwargs):
    return acl_filter(m.DescribeAclsRequest, **kwargs)


def delete(*filters):
    return m.DeleteAclsRequest(filters=[acl_filter(m.DeleteAclsRequest.DeleteAclsFilter, **f)
                                        for f in filters])


def described(response):
    return [(r.resource_type, r.resource_name, r.pattern_type,
             [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls])
            for r in response.resources]


@pytest.fixture
def facade():
    return LocalFacade(LocalQuorum())


def test_the_roles_serve_the_apis():
    assert {29, 30, 31, 50, 51} <= CONTROLLER_API_KEYS
    assert {29, 30, 31, 50, 51} <= BROKER_API_KEYS
    assert {30, 31, 51} <= FORWARDED_API_KEYS and not {29, 50} & FORWARDED_API_KEYS


@pytest.mark.parametrize("version", versions(m.CreateAclsRequest))
def test_create_describe_delete_every_version(facade, version):
    body = create(creation(), creation(op=Op.WRITE, perm=DENY, host="10.0.0.1"),
                  creation(name="kafka-cluster", rtype=C, op=Op.ALTER,
                           principal="User:admin"))
    response = call(facade, body, version)
    assert [(r.error_code, r.error_message) for r in response.results] == [(0, None)] * 3
    records = list(facade.image.acls.values())
    assert len(records) == 3 and len({r.id for r in records}) == 3
    assert {(r.resource_name, r.operation, r.permission_type) for r in records} == {
        ("orders", Op.READ, ALLOW), ("orders", Op.WRITE, DENY), ("kafka-cluster", Op.ALTER,
                                                                ALLOW)}
    ptype = PatternType.ANY if version >= 1 else LIT
    listing = call(facade, describe(ptype=ptype), version)
    assert listing.error_code == 0
    assert described(listing) == [
        (T, "orders", LIT, [("User:alice", "*", Op.READ, ALLOW),
                            ("User:alice", "10.0.0.1", Op.WRITE, DENY)]),
        (C, "kafka-cluster", LIT, [("User:admin", "*", Op.ALTER, ALLOW)])]
    gone = call(facade, delete(dict(rtype=T, ptype=ptype)), version)
    assert [r.error_code for r in gone.filter_results] == [0]
    assert sorted(a.operation for a in gone.filter_results[0].matching_acls) == [Op.READ,
                                                                                 Op.WRITE]
    assert [r.resource_name for r in facade.image.acls.values()] == ["kafka-cluster"]


def test_create_results_are_per_creation_and_duplicates_write_once(facade):
    response = call(facade, create(creation(), creation(name="x", rtype=C), creation(name=""),
                                   creation(ptype=PatternType.MATCH), creation(op=Op.ANY),
                                   creation(perm=AclPermissionType.ANY),
                                   creation(principal="alice"), creation(), creation(rtype=99)),
                    3)
    assert [r.error_code for r in response.results] == [0, 42, 42, 42, 42, 42, 42, 0, 42]
    assert response.results[1].error_message == ("The only valid name for the CLUSTER "
                                                 "resource is kafka-cluster")
    assert response.results[3].error_message == "Invalid patternType MATCH"
    assert response.results[8].error_message == "Invalid resourceType UNKNOWN"
    assert len(facade.image.acls) == 1
    again = call(facade, create(creation()), 3)
    assert [r.error_code for r in again.results] == [0]
    assert len(facade.image.acls) == 1


def test_describe_filters(facade):
    call(facade, create(creation(), creation(name="ord", ptype=PRE),
                        creation(name="*", principal="User:*"), creation(name="g", rtype=G),
                        creation(name="payments")), 3)
    match = call(facade, describe(rtype=T, name="orders", ptype=PatternType.MATCH), 3)
    assert [(r.resource_name, r.pattern_type) for r in match.resources] == [
        ("*", LIT), ("ord", PRE), ("orders", LIT)]
    literal = call(facade, describe(rtype=T, name="orders", ptype=LIT), 3)
    assert [r.resource_name for r in literal.resources] == ["orders"]
    who = call(facade, describe(principal="User:*"), 3)
    assert [r.resource_name for r in who.resources] == ["*"]
    unknown = call(facade, describe(op=Op.UNKNOWN), 3)
    assert (unknown.error_code, unknown.error_message) == (E.INVALID_REQUEST,
                                                           "Unknown entryFilter.")


def test_delete_filters_overlap_and_unknown(facade):
    call(facade, create(creation(), creation(op=Op.WRITE), creation(name="pay")), 3)
    response = call(facade, delete(dict(name="orders"), dict(op=Op.READ),
                                   dict(rtype=ResourceType.UNKNOWN), dict(name="none")), 3)
    codes = [(r.error_code, len(r.matching_acls)) for r in response.filter_results]
    assert codes == [(0, 2), (0, 2), (42, 0), (0, 0)]
    assert response.filter_results[2].error_message == "Unknown patternFilter."
    assert [r.resource_name for r in facade.image.acls.values()] == []


def test_a_standby_answers_not_controller_per_item(facade):
    standby = StandbyFacade(facade.image)
    r = call(standby, create(creation(), creation(name="b")), 3)
    assert [x.error_code for x in r.results] == [E.NOT_CONTROLLER] * 2
    r = call(standby, delete(dict(), dict(name="x")), 3)
    assert [x.error_code for x in r.filter_results] == [E.NOT_CONTROLLER] * 2
    r = call(standby, alter(upsert("a"), upsert("a"), deletion("b")), 0)
    assert [(x.user, x.error_code) for x in r.results] == [("b", E.NOT_CONTROLLER),
                                                          ("a", E.NOT_CONTROLLER)]
    assert call(standby, describe(), 3).error_code == 0  # reads are the image's


# ------------------------------------------------------------------------------ SCRAM

SALT = b"0123456789abcdef"


def upsert(user, mechanism=K.SCRAM_SHA_512, iterations=4096, password="secret"):
    salted = (K.salted_password(mechanism, password, SALT, iterations)
              if mechanism in K.MECHANISMS else b"x" * 32)
    return m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user, mechanism=mechanism, iterations=iterations, salt=SALT,
        salted_password=salted)


def deletion(user, mechanism=K.SCRAM_SHA_512):
    return m.AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=user,
                                                                      mechanism=mechanism)


def alter(*items):
    cls = m.AlterUserScramCredentialsRequest
    return cls(upsertions=[i for i in items if isinstance(i, cls.ScramCredentialUpsertion)],
               deletions=[i for i in items if isinstance(i, cls.ScramCredentialDeletion)])


def results(response):
    return [(r.user, r.error_code) for r in response.results]


def scram_describe(*users):
    cls = m.DescribeUserScramCredentialsRequest
    return cls(users=[cls.UserName(name=u) for u in users] if users else None)


def test_alter_and_describe_credentials(facade):
    r = call(facade, alter(upsert("alice"), upsert("alice", K.SCRAM_SHA_256, 8192),
                           upsert("bob", K.SCRAM_SHA_256)), 0)
    assert results(r) == [("alice", E.DUPLICATE_RESOURCE), ("bob", 0)]
    assert r.results[0].error_message == ("A user credential cannot be altered twice in the "
                                          "same request")
    record = facade.image.scram[("bob", K.SCRAM_SHA_256)]
    salted = K.salted_password(K.SCRAM_SHA_256, "secret", SALT, 4096)
    assert (record.salt, record.iterations) == (SALT, 4096)
    assert record.stored_key == K.stored_key(K.SCRAM_SHA_256, salted)
    assert record.server_key == K.server_key(K.SCRAM_SHA_256, salted)
    assert ("alice", K.SCRAM_SHA_512) not in facade.image.scram
    call(facade, alter(upsert("alice")), 0)
    call(facade, alter(upsert("bob", K.SCRAM_SHA_512, 10000)), 0)
    d = call(facade, scram_describe(), 0)
    assert d.error_code == 0
    assert [(x.user, x.error_code, [(c.mechanism, c.iterations) for c in x.credential_infos])
            for x in d.results] == [("alice", 0, [(2, 4096)]),
                                    ("bob", 0, [(1, 4096), (2, 10000)])]
    d = call(facade, scram_describe("bob", "carol", "alice", "alice"), 0)
    assert [(x.user, x.error_code) for x in d.results] == [
        ("bob", 0), ("carol", E.RESOURCE_NOT_FOUND), ("alice", E.DUPLICATE_RESOURCE)]
    assert d.results[1].error_message == ("Attempt to describe a user credential that does "
                                          "not exist: carol")
    broker = BrokerFacade(facade)
    assert answer(broker, scram_describe("bob"), 0) == call(facade, scram_describe("bob"), 0)


def test_alter_credentials_refusals(facade):
    call(facade, alter(upsert("alice"), upsert("d")), 0)
    r = call(facade, alter(deletion("nobody"), deletion("alice", K.SCRAM_SHA_256),
                           upsert(""), upsert("low", iterations=4095),
                           upsert("high", iterations=16385), upsert("mech", mechanism=3),
                           deletion("d"), deletion("d"), upsert("ok", iterations=16384)), 0)
    assert results(r) == [("nobody", E.RESOURCE_NOT_FOUND), ("alice", E.RESOURCE_NOT_FOUND),
                          ("d", E.DUPLICATE_RESOURCE), ("", E.UNACCEPTABLE_CREDENTIAL),
                          ("low", E.UNACCEPTABLE_CREDENTIAL),
                          ("high", E.UNACCEPTABLE_CREDENTIAL),
                          ("mech", E.UNSUPPORTED_SASL_MECHANISM), ("ok", 0)]
    assert [x.error_message for x in r.results][3:6] == [
        "Username must not be empty", "Too few iterations", "Too many iterations"]
    r = call(facade, alter(deletion("alice")), 0)
    assert results(r) == [("alice", 0)]
    assert sorted(facade.image.scram) == [("d", K.SCRAM_SHA_512), ("ok", K.SCRAM_SHA_512)]


def test_scram_needs_metadata_version_3_5_iv2():
    config = ControllerConfig(bootstrap_metadata_version=R.METADATA_VERSION_LEVELS["3.5-IV1"])
    facade = LocalFacade(LocalQuorum(config=config))
    r = call(facade, alter(upsert("alice")), 0)
    assert results(r) == [("alice", E.UNSUPPORTED_VERSION)]


# ------------------------------------------------------------------------------ broker

def test_the_broker_forwards_writes_and_reads_its_image(facade):
    broker = BrokerFacade(facade)
    r = answer(broker, create(creation()), 3)
    assert [x.error_code for x in r.results] == [0]
    r = answer(broker, alter(upsert("alice")), 0)
    assert results(r) == [("alice", 0)]
    assert broker.forwarded == [30, 51]
    broker.image = facade.image
    assert described(answer(broker, describe(), 3)) == described(call(facade, describe(), 3))
    r = answer(broker, delete(dict()), 3)
    assert [len(x.matching_acls) for x in r.filter_results] == [1]
    assert broker.forwarded == [30, 51, 31]
    assert facade.image.acls == {}


def test_without_an_authorizer_the_acl_apis_are_disabled(facade):
    class Unsecured(LocalFacade):
        authorizer_enabled = False

    plain = Unsecured(facade.quorum)
    creation = m.CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="orders", resource_pattern_type=3,
        principal="User:alice", host="*", operation=3, permission_type=3)
    answer = call(plain, m.CreateAclsRequest(creations=[creation]), 3)
    assert [r.error_code for r in answer.results] == [E.SECURITY_DISABLED]
    assert "authorizer.class.name" in answer.results[0].error_message
    assert call(plain, m.DescribeAclsRequest(resource_type_filter=1, pattern_type_filter=1,
                                             operation=1, permission_type=1),
                3).error_code == E.SECURITY_DISABLED
    assert not facade.image.acls  # nothing was written
