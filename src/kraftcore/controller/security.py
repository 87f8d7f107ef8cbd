"""`SecurityControl`: the active controller's ACL and SCRAM credential operations (Kafka's
AclControlManager and ScramControlManager). Each reads the controller's working image and
returns the records to write and the result the request is answered with on commit:

* `create_acls(image, bindings)`: one `AccessControlEntryRecord` (a fresh id from the
  controller's seeded random) per valid binding not already stored; per binding (0, None)
  or (INVALID_REQUEST, why). A binding stored already, or given twice, succeeds and writes
  nothing more.
* `delete_acls(image, filters)`: one `RemoveAccessControlEntryRecord` per ACL any filter
  matches (once, however many filters match it); per filter (0, None, [bindings]) or
  (INVALID_REQUEST, why, []). Atomic: all of them commit or none.
* `alter_scram(image, deletions, upsertions)`: `RemoveUserScramCredentialRecord` and
  `UserScramCredentialRecord` (stored and server keys computed from the salted password);
  one result (user, code, message) per user named, in request order. A user named twice is
  DUPLICATE_RESOURCE (92) and nothing changes for it; deleting a credential that does not
  exist is RESOURCE_NOT_FOUND (91); an unknown mechanism UNSUPPORTED_SASL_MECHANISM (33);
  an empty name or iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL (93); before
  metadata.version 3.5-IV2 UNSUPPORTED_VERSION (35).

The controller calls these from its write events (`QuorumController.create_acls`, ...);
the wire side is `kraftcore.apis.security`.
"""

from kraftcore.errors import ControllerError
from kraftcore.metadata import records as R
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.security import scram_keys
from kraftcore.security.acls import binding_of_record, check_filter, check_new_acl
from kraftcore.types import Uuid

__all__ = ["SecurityControl", "SCRAM_LEVEL"]

_E = ErrorCode
SCRAM_LEVEL = R.METADATA_VERSION_LEVELS["3.5-IV2"]
"""The first metadata.version with SCRAM credential records."""
_DUPLICATE = "A user credential cannot be altered twice in the same request"


class SecurityControl:
    def __init__(self, controller):
        self.controller = controller
        self._existing = (None, frozenset())  # (image.acls it was built from, bindings)

    def _stored(self, image):
        acls, bindings = self._existing
        if acls is not image.acls:
            bindings = frozenset(map(binding_of_record, image.acls.values()))
            self._existing = (image.acls, bindings)
        return bindings

    # ------------------------------------------------------------------ ACLs

    def create_acls(self, image, bindings):
        rng = self.controller.rng
        stored = set(self._stored(image))
        ids = set()
        records, results = [], []
        for binding in bindings:
            try:
                check_new_acl(binding)
            except ControllerError as exc:
                results.append((exc.code, str(exc)))
                continue
            if binding not in stored:
                stored.add(binding)
                acl_id = Uuid.random(rng)
                while acl_id in image.acls or acl_id in ids:
                    acl_id = Uuid.random(rng)
                ids.add(acl_id)
                records.append(R.AccessControlEntryRecord(
                    id=acl_id, resource_type=int(binding.resource_type),
                    resource_name=binding.name, pattern_type=int(binding.pattern_type),
                    principal=binding.principal, host=binding.host,
                    operation=int(binding.operation), permission_type=int(binding.permission)))
            results.append((0, None))
        return records, results

    def delete_acls(self, image, filters):
        removed = {}  # ACL id -> record, in the order first matched
        results = []
        for acl_filter in filters:
            try:
                check_filter(acl_filter)
            except ControllerError as exc:
                results.append((exc.code, str(exc), []))
                continue
            matched = []
            for acl_id, record in image.acls.items():
                binding = binding_of_record(record)
                if acl_filter.matches(binding):
                    matched.append(binding)
                    removed.setdefault(acl_id, R.RemoveAccessControlEntryRecord(id=acl_id))
            results.append((0, None, matched))
        return list(removed.values()), results

    # ------------------------------------------------------------------ SCRAM

    def alter_scram(self, image, deletions, upsertions):
        """`deletions`: [(user, mechanism)]; `upsertions`: [(user, mechanism, iterations,
        salt, salted password)]."""
        level = image.metadata_version()
        supported = level is not None and level >= SCRAM_LEVEL
        order = []  # users in request order
        errors = {}  # user -> (code, message)
        deletes = {}  # user -> (user, mechanism)
        upserts = {}  # user -> upsertion
        for user, mechanism in deletions:
            order.append(user)
            if user in errors:
                continue
            if deletes.pop(user, None) is not None:
                errors[user] = (_E.DUPLICATE_RESOURCE, _DUPLICATE)
            elif not supported:
                errors[user] = (_E.UNSUPPORTED_VERSION,
                                "The current metadata.version does not support SCRAM")
            else:
                error = _check_user_and_mechanism(user, mechanism)
                if error is None and (user, mechanism) not in image.scram:
                    error = (_E.RESOURCE_NOT_FOUND,
                             "Attempt to delete a user credential that does not exist")
                if error is None:
                    deletes[user] = (user, mechanism)
                else:
                    errors[user] = error
        for upsertion in upsertions:
            user = upsertion[0]
            order.append(user)
            if user in errors:
                continue
            if deletes.pop(user, None) is not None or upserts.pop(user, None) is not None:
                errors[user] = (_E.DUPLICATE_RESOURCE, _DUPLICATE)
            elif not supported:
                errors[user] = (_E.UNSUPPORTED_VERSION,
                                "The current metadata.version does not support SCRAM")
            else:
                error = _check_upsertion(upsertion)
                if error is None:
                    upserts[user] = upsertion
                else:
                    errors[user] = error
        records = [R.RemoveUserScramCredentialRecord(name=user, mechanism=mechanism)
                   for user, mechanism in deletes.values()]
        for user, mechanism, iterations, salt, salted in upserts.values():
            records.append(R.UserScramCredentialRecord(
                name=user, mechanism=mechanism, salt=bytes(salt),
                stored_key=scram_keys.stored_key(mechanism, salted),
                server_key=scram_keys.server_key(mechanism, salted), iterations=iterations))
        results = []
        for user in dict.fromkeys(order):
            code, message = errors.get(user, (0, None))
            results.append((user, code, message))
        return records, results


def _check_user_and_mechanism(user, mechanism):
    if not user:
        return _E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in scram_keys.MECHANISMS:
        return _E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(upsertion):
    user, mechanism, iterations = upsertion[:3]
    error = _check_user_and_mechanism(user, mechanism)
    if error is not None:
        return error
    if iterations < scram_keys.ITERATIONS_MIN:
        return _E.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > scram_keys.ITERATIONS_MAX:
        return _E.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None
