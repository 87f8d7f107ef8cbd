"""The ACL and SCRAM credential RPCs, for both roles: the handlers of DescribeAcls (29),
CreateAcls (30), DeleteAcls (31), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

| API (key) | versions | answer |
|---|---|---|
| DescribeAcls (29) | 0-3 | the image's ACLs that pass the filter, grouped by pattern |
| CreateAcls (30) | 0-3 | `QuorumController.create_acls`: one result per creation, in order |
| DeleteAcls (31) | 0-3 | `QuorumController.delete_acls`: per filter, the ACLs it deleted |
| DescribeUserScramCredentials (50) | 0 | the image's credentials: mechanisms, iterations |
| AlterUserScramCredentials (51) | 0 | `alter_user_scram_credentials`: one result per user |

The controller serves all five (`kraftcore.apis.controller`); a broker answers the two
reads from its own image and forwards the three writes to the active controller
(`kraftcore.apis.broker`). The reads want of the facade only `image`; the writes
`submit` (as the controller's other writes). Codes outside Kafka's enums read as UNKNOWN,
which the controller refuses per item with INVALID_REQUEST.

A node without an authorizer (`facade.authorizer_enabled` false: no
`authorizer.class.name`) answers the three ACL APIs with SECURITY_DISABLED, as Kafka does:
ACLs nobody enforces would only give a false sense of safety. The credential APIs are
served either way (SASL needs no authorizer). DescribeUserScramCredentials is served by the controller too (Kafka's
controller does not), so `--bootstrap-controller` tools can read credentials.
"""

import asyncio
import concurrent.futures

from kraftcore.errors import ControllerError
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.security.acls import (AclBinding, AclBindingFilter, PatternType,
                                     binding_of_record, check_filter)

__all__ = ["SECURITY_HANDLERS", "SECURITY_READS", "SECURITY_WRITES", "describe_acls",
           "create_acls", "delete_acls", "describe_user_scram_credentials",
           "alter_user_scram_credentials"]

_E = ErrorCode
_DUPLICATE_USER = ("Cannot describe SCRAM credentials for the same user twice in a single "
                   "request: ")
_MISSING_USER = "Attempt to describe a user credential that does not exist: "


async def call(facade, method, *args):
    """`QuorumController.<method>(*args)` through the facade (these requests carry no
    timeout: the wait is the listener's and the client's)."""
    future = facade.submit(method, *args)
    if isinstance(future, concurrent.futures.Future):
        future = asyncio.wrap_future(future)
    return await future


def _filter_of(item, version):
    pattern = item.pattern_type_filter if version >= 1 else int(PatternType.LITERAL)
    return AclBindingFilter.of(item.resource_type_filter, item.resource_name_filter,
                               pattern, item.principal_filter, item.host_filter,
                               item.operation, item.permission_type)


_NO_AUTHORIZER = ("no authorizer is configured on this node: set authorizer.class.name="
                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer to use ACLs")


def _check_authorizer(facade):
    if not facade.authorizer_enabled:
        raise ControllerError(_E.SECURITY_DISABLED, _NO_AUTHORIZER)


async def describe_acls(facade, version, body):
    cls = m.DescribeAclsResponse
    _check_authorizer(facade)
    acl_filter = _filter_of(body, version)
    try:
        check_filter(acl_filter)
    except ControllerError as exc:
        return cls(throttle_time_ms=0, error_code=exc.code, error_message=str(exc))
    by_pattern = {}
    for record in facade.image.acls.values():
        binding = binding_of_record(record)
        if acl_filter.matches(binding):
            key = (binding.resource_type, binding.name, binding.pattern_type)
            by_pattern.setdefault(key, set()).add(binding)
    resources = []
    for (rtype, name, ptype), bindings in sorted(by_pattern.items()):
        resources.append(cls.DescribeAclsResource(
            resource_type=int(rtype), resource_name=name, pattern_type=int(ptype),
            acls=[cls.AclDescription(principal=b.principal, host=b.host,
                                     operation=int(b.operation),
                                     permission_type=int(b.permission))
                  for b in sorted(bindings)]))
    return cls(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


async def create_acls(facade, version, body):
    cls = m.CreateAclsResponse
    _check_authorizer(facade)
    bindings = [AclBinding.of(c.resource_type, c.resource_name,
                              c.resource_pattern_type if version >= 1 else PatternType.LITERAL,
                              c.principal, c.host, c.operation, c.permission_type)
                for c in body.creations]
    results = await call(facade, "create_acls", bindings) if bindings else []
    return cls(throttle_time_ms=0, results=[
        cls.AclCreationResult(error_code=code, error_message=message)
        for code, message in results])


async def delete_acls(facade, version, body):
    cls = m.DeleteAclsResponse
    _check_authorizer(facade)
    filters = [_filter_of(f, version) for f in body.filters]
    results = await call(facade, "delete_acls", filters) if filters else []
    out = []
    for code, message, bindings in results:
        out.append(cls.DeleteAclsFilterResult(error_code=code, error_message=message,
                                              matching_acls=[
            cls.DeleteAclsMatchingAcl(error_code=0, error_message=None,
                                      resource_type=int(b.resource_type),
                                      resource_name=b.name, pattern_type=int(b.pattern_type),
                                      principal=b.principal, host=b.host,
                                      operation=int(b.operation),
                                      permission_type=int(b.permission))
            for b in bindings]))
    return cls(throttle_time_ms=0, filter_results=out)


async def describe_user_scram_credentials(facade, version, body):
    cls = m.DescribeUserScramCredentialsResponse
    by_user = {}
    for (user, mechanism), record in facade.image.scram.items():
        by_user.setdefault(user, []).append((mechanism, record.iterations))
    if body.users:
        asked = {}
        for u in body.users:
            asked[u.name] = u.name in asked
    else:
        asked = dict.fromkeys(sorted(by_user), False)
    results = []
    for user, twice in asked.items():
        if twice:
            results.append(cls.DescribeUserScramCredentialsResult(
                user=user, error_code=_E.DUPLICATE_RESOURCE,
                error_message=_DUPLICATE_USER + user))
        elif user not in by_user:
            results.append(cls.DescribeUserScramCredentialsResult(
                user=user, error_code=_E.RESOURCE_NOT_FOUND,
                error_message=_MISSING_USER + user))
        else:
            results.append(cls.DescribeUserScramCredentialsResult(
                user=user, error_code=0, credential_infos=[
                    cls.CredentialInfo(mechanism=mech, iterations=iterations)
                    for mech, iterations in sorted(by_user[user])]))
    return cls(throttle_time_ms=0, error_code=0, error_message=None, results=results)


async def alter_user_scram_credentials(facade, version, body):
    cls = m.AlterUserScramCredentialsResponse
    deletions = [(d.name, d.mechanism) for d in body.deletions]
    upsertions = [(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                  for u in body.upsertions]
    results = []
    if deletions or upsertions:
        results = await call(facade, "alter_user_scram_credentials", deletions, upsertions)
    return cls(throttle_time_ms=0, results=[
        cls.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user, code, message in results])


SECURITY_READS = {29: describe_acls, 50: describe_user_scram_credentials}
"""What any node answers from its own image."""
SECURITY_WRITES = {30: create_acls, 31: delete_acls, 51: alter_user_scram_credentials}
"""What the active controller does (a broker forwards them)."""
SECURITY_HANDLERS = {**SECURITY_READS, **SECURITY_WRITES}
