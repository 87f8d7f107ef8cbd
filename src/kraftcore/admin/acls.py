"""`SecurityAdmin`: ACLs and SCRAM credentials of a cluster, as Kafka's admin client
manages them (`createAcls`, `describeAcls`, `deleteAcls`, `describeUserScramCredentials`,
`alterUserScramCredentials`). The `kraftcore acls` and `kraftcore scram` commands print
what it returns.

    async with SecurityAdmin([("127.0.0.1", 9092)]) as admin:            # brokers
        await admin.create_acls([AclBinding(...)])
        acls = await admin.list_acls(AclBindingFilter(ResourceType.TOPIC, "orders"))

    SecurityAdmin([("127.0.0.1", 9093)], controller=True)                # a controller

Where requests go:

* brokers (`--bootstrap-server`): every request to the first bootstrap broker that can be
  reached; the broker answers the reads from its image and forwards the writes to the
  active controller itself;
* a controller (`--bootstrap-controller`): as `kraftcore.admin.client.AdminClient` routes
  requests: writes to the active controller (following NOT_CONTROLLER), reads from it.

What the operations return is plain data (dicts with snake_case keys, enum members by
name); a refusal is an `AdminError` saying what failed and why.
"""

import os

from kraftcore.admin.client import (TIMEOUT_MS_DEFAULT, AdminClient, AdminConnections,
                                    address_text, error_text)
from kraftcore.errors import AdminError, KraftcoreError
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.security import scram_keys
from kraftcore.security.acls import AclBinding, AclBindingFilter, PatternType

__all__ = ["SecurityAdmin", "binding_doc", "SALT_BYTES"]

SALT_BYTES = 32
"""Random salt of a credential the client makes."""


def binding_doc(binding):
    """An `AclBinding` as a dict of names."""
    return {"resource_type": binding.resource_type.name, "name": binding.name,
            "pattern_type": binding.pattern_type.name, "principal": binding.principal,
            "host": binding.host, "operation": binding.operation.name,
            "permission": binding.permission.name}


def _not_controller(items):
    return lambda r: any(x.error_code == ErrorCode.NOT_CONTROLLER for x in getattr(r, items))


class SecurityAdmin(AdminConnections):
    """See the module docstring. `bootstrap`: [(host, port)]; `controller`: whether they
    are controllers' listeners."""

    def __init__(self, bootstrap, *, controller=False, timeout_ms=TIMEOUT_MS_DEFAULT,
                 connection_options=None):
        super().__init__(timeout_ms, connection_options)
        self.bootstrap = [tuple(a) for a in bootstrap]
        if not self.bootstrap:
            raise ValueError("SecurityAdmin needs at least one bootstrap address")
        self._controller = AdminClient(self.bootstrap[0], timeout_ms,
                                       connection_options) if controller else None

    async def close(self):
        if self._controller is not None:
            await self._controller.close()
        await super().close()

    async def _send(self, request_cls, build, not_controller=None):
        if self._controller is not None:
            if not_controller is None:
                return await self._controller.read(request_cls, build)
            return await self._controller.write(request_cls, build, not_controller)
        last = None
        for address in self.bootstrap:
            try:
                conn = await self._conn(address)
            except (KraftcoreError, OSError) as exc:
                last = f"{address_text(address)}: {exc}"
                continue
            version = conn.choose_version(request_cls)
            return await conn.send(build(version), version)
        raise AdminError(f"no bootstrap broker could be reached ({last})")

    # ------------------------------------------------------------------ ACLs

    async def create_acls(self, bindings):
        """Create `bindings`; [(binding, None or error text)] in order."""
        cls = m.CreateAclsRequest
        bindings = list(bindings)

        def build(version):
            if version == 0 and any(b.pattern_type != PatternType.LITERAL for b in bindings):
                raise AdminError("the server takes CreateAcls v0 only, which has no "
                                 "PREFIXED patterns")
            return cls(creations=[cls.AclCreation(
                resource_type=int(b.resource_type), resource_name=b.name,
                resource_pattern_type=int(b.pattern_type), principal=b.principal,
                host=b.host, operation=int(b.operation), permission_type=int(b.permission))
                for b in bindings])

        response = await self._send(cls, build, _not_controller("results"))
        if len(response.results) != len(bindings):
            raise AdminError(f"the answer has {len(response.results)} results for "
                             f"{len(bindings)} ACLs")
        return [(b, error_text(r.error_code, r.error_message) if r.error_code else None)
                for b, r in zip(bindings, response.results)]

    async def list_acls(self, acl_filter=AclBindingFilter.ANY):
        """The `AclBinding`s that pass `acl_filter`."""
        cls = m.DescribeAclsRequest

        def build(version):
            return cls(resource_type_filter=int(acl_filter.resource_type),
                       resource_name_filter=acl_filter.name,
                       pattern_type_filter=int(acl_filter.pattern_type),
                       principal_filter=acl_filter.principal, host_filter=acl_filter.host,
                       operation=int(acl_filter.operation),
                       permission_type=int(acl_filter.permission))

        response = await self._send(cls, build)
        if response.error_code:
            raise AdminError(f"cannot list ACLs: "
                             f"{error_text(response.error_code, response.error_message)}")
        return [AclBinding.of(r.resource_type, r.resource_name, r.pattern_type, a.principal,
                              a.host, a.operation, a.permission_type)
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters):
        """Delete the ACLs each of `filters` matches; the deleted `AclBinding`s (each once).
        A filter the server refuses is an `AdminError`."""
        cls = m.DeleteAclsRequest
        filters = list(filters)

        def build(version):
            return cls(filters=[cls.DeleteAclsFilter(
                resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                host_filter=f.host, operation=int(f.operation),
                permission_type=int(f.permission)) for f in filters])

        response = await self._send(cls, build, _not_controller("filter_results"))
        deleted = {}
        for result in response.filter_results:
            if result.error_code:
                raise AdminError(f"cannot delete ACLs: "
                                 f"{error_text(result.error_code, result.error_message)}")
            for a in result.matching_acls:
                b = AclBinding.of(a.resource_type, a.resource_name, a.pattern_type,
                                  a.principal, a.host, a.operation, a.permission_type)
                deleted[b] = None
        return list(deleted)

    # ------------------------------------------------------------------ SCRAM

    async def describe_scram(self, users=None):
        """{user: [(mechanism name, iterations)]} of `users` (all users when None); a user
        without credentials is an `AdminError`."""
        cls = m.DescribeUserScramCredentialsRequest
        users = list(users) if users else None

        def build(version):
            return cls(users=[cls.UserName(name=u) for u in users] if users else None)

        response = await self._send(cls, build)
        if response.error_code:
            raise AdminError(f"cannot describe credentials: "
                             f"{error_text(response.error_code, response.error_message)}")
        out = {}
        for r in response.results:
            if r.error_code:
                raise AdminError(f"user {r.user!r}: "
                                 f"{error_text(r.error_code, r.error_message)}")
            out[r.user] = [(scram_keys.MECHANISM_NAMES.get(c.mechanism, str(c.mechanism)),
                            c.iterations) for c in r.credential_infos]
        return out

    async def alter_scram(self, upserts=(), deletes=(), rng=None):
        """Set credentials `upserts` [(user, mechanism, password, iterations)] (a random salt
        each, from `rng.randbytes` or the OS) and delete `deletes` [(user, mechanism)];
        {user: None or error text}."""
        cls = m.AlterUserScramCredentialsRequest
        upsertions = []
        for user, mechanism, password, iterations in upserts:
            salt = rng.randbytes(SALT_BYTES) if rng is not None else os.urandom(SALT_BYTES)
            upsertions.append(cls.ScramCredentialUpsertion(
                name=user, mechanism=mechanism, iterations=iterations, salt=salt,
                salted_password=scram_keys.salted_password(mechanism, password, salt,
                                                           iterations)))
        body = cls(upsertions=upsertions, deletions=[
            cls.ScramCredentialDeletion(name=u, mechanism=mech) for u, mech in deletes])
        response = await self._send(cls, lambda version: body, _not_controller("results"))
        return {r.user: error_text(r.error_code, r.error_message) if r.error_code else None
                for r in response.results}
