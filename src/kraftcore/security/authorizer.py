"""`Authorizer`: whether a principal may do an operation on a resource, by the rules of
Kafka's StandardAuthorizer, over the ACLs of a metadata image.

    authorizer = Authorizer(super_users="User:admin;User:broker",
                            allow_everyone_if_no_acl_found=False)
    authorizer.update(image)            # again whenever the image changes: cheap if the
                                        # image's ACLs are the ones it already indexed
    authorizer.authorize(principal, "10.0.0.7", AclOperation.READ, ResourceType.TOPIC,
                         "orders")      # -> bool

The rules, in order:

1. a super user (`super.users`, `User:a;User:b`) is allowed everything;
2. the ACLs that apply to the resource are those of its type whose pattern is LITERAL with
   its name, LITERAL `*`, or PREFIXED with a prefix of its name;
3. of those, an ACL counts for the request when its principal is the request's or
   `User:*`, its host is the client's address or `*`, and its operation is the requested
   one, or ALL, or (for an ALLOW ACL only) implies it: READ, WRITE, DELETE and ALTER imply
   DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
4. a DENY that counts denies; else an ALLOW that counts allows;
5. else, when no ACL applies to the resource at all (for any principal, host or
   operation), the answer is `allow.everyone.if.no.acl.found`; otherwise denied.

ACLs are indexed by resource type, pattern type and name, so a check looks up the name,
the wildcard and each prefix length present, and never scans every ACL. An Authorizer is
not safe to update from one thread while another checks: update it where the image is
published (or build a new one and swap it in).
"""

import bisect

from kraftcore.security.acls import (WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
                                     AclBindingFilter, AclOperation, AclPermissionType,
                                     PatternType, ResourceType, binding_of_record)
from kraftcore.security.principal import KafkaPrincipal

__all__ = ["Authorizer", "parse_super_users"]

_IMPLIES_DESCRIBE = frozenset((AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER))
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS,
                                       AclOperation.ALTER_CONFIGS))
_CONCRETE_OPS = frozenset(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY}
_CONCRETE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}


def parse_super_users(value):
    """`super.users` as a set of principal strings: `User:a;User:b` (semicolons, spaces
    around each trimmed, empty items dropped), or an iterable of strings / principals."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        items = value.split(";")
    else:
        items = [str(v) for v in value]
    out = set()
    for item in items:
        item = item.strip()
        if not item:
            continue
        if ":" not in item or item.startswith(":"):
            raise ValueError(f"super.users entry {item!r} is not a principal Type:name "
                             "(e.g. User:admin); separate entries with ';'")
        out.add(item)
    return frozenset(out)


class _Acl:
    """An indexed ACL: what a check compares, with the binding it came from."""

    __slots__ = ("binding", "principal", "host", "operation", "allow")

    def __init__(self, binding):
        self.binding = binding
        self.principal = binding.principal
        self.host = binding.host
        self.operation = binding.operation
        self.allow = binding.permission == AclPermissionType.ALLOW


class _TypeIndex:
    """The ACLs of one resource type: LITERAL ones by name, PREFIXED ones by prefix, with
    the prefix lengths present (sorted) so a check tries only those."""

    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self):
        self.literal = {}
        self.prefixed = {}
        self.prefix_lengths = []

    def add(self, acl):
        b = acl.binding
        if b.pattern_type == PatternType.LITERAL:
            self.literal.setdefault(b.name, []).append(acl)
        elif b.pattern_type == PatternType.PREFIXED:
            if b.name not in self.prefixed:
                self.prefixed[b.name] = []
                length = len(b.name)
                i = bisect.bisect_left(self.prefix_lengths, length)
                if i == len(self.prefix_lengths) or self.prefix_lengths[i] != length:
                    self.prefix_lengths.insert(i, length)
            self.prefixed[b.name].append(acl)

    def applying(self, name):
        """The ACL lists that apply to a resource named `name`."""
        lists = []
        found = self.literal.get(name)
        if found:
            lists.append(found)
        if name != WILDCARD_RESOURCE:
            found = self.literal.get(WILDCARD_RESOURCE)
            if found:
                lists.append(found)
        prefixed = self.prefixed
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found = prefixed.get(name[:length])
            if found:
                lists.append(found)
        return lists


def _counts(acl, principals, host, operation):
    """Whether `acl` counts for the request (rule 3 of the module docstring)."""
    if acl.principal not in principals:
        return False
    if acl.host != WILDCARD_HOST and acl.host != host:
        return False
    op = acl.operation
    if op == AclOperation.ALL or op == operation:
        return True
    if not acl.allow:
        return False
    if operation == AclOperation.DESCRIBE:
        return op in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return op in _IMPLIES_DESCRIBE_CONFIGS
    return False


def _principal_text(principal):
    if isinstance(principal, KafkaPrincipal):
        return str(principal)
    if isinstance(principal, str) and ":" in principal:
        return principal
    raise TypeError(f"a principal is a KafkaPrincipal or text such as 'User:alice', "
                    f"not {principal!r}")


class Authorizer:
    """Kafka's StandardAuthorizer over a metadata image's ACLs (see the module docstring).
    `super_users`: `super.users` (`parse_super_users`); `allow_everyone_if_no_acl_found`:
    the answer for a resource no ACL applies to."""

    def __init__(self, super_users=None, allow_everyone_if_no_acl_found=False, acls=None):
        self.super_users = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self._source = None  # the {id: AccessControlEntryRecord} indexed last
        self._index = {}  # ResourceType -> _TypeIndex
        self._count = 0
        self.rebuilds = 0
        if acls is not None:
            self.update_acls(acls)

    @classmethod
    def from_image(cls, image, super_users=None, allow_everyone_if_no_acl_found=False):
        """An Authorizer over `image`'s ACLs."""
        return cls(super_users, allow_everyone_if_no_acl_found, acls=image.acls)

    def __repr__(self):
        return (f"Authorizer({self._count} ACLs, super users {sorted(self.super_users)}, "
                f"allow_everyone_if_no_acl_found={self.allow_everyone_if_no_acl_found})")

    def __len__(self):
        return self._count

    # ------------------------------------------------------------------ keeping current

    def update(self, image):
        """Index `image.acls` unless they are the map indexed last (an image that changed
        something else shares its predecessor's ACL map, so this is one identity check)."""
        self.update_acls(image.acls)

    def update_acls(self, acls):
        """Index `acls` ({id: AccessControlEntryRecord}, or an iterable of `AclBinding`s)
        unless it is the object indexed last."""
        if acls is self._source:
            return
        index = {}
        count = 0
        values = acls.values() if hasattr(acls, "values") else acls
        for item in values:
            binding = item if hasattr(item, "permission") else binding_of_record(item)
            entry = index.get(binding.resource_type)
            if entry is None:
                entry = index[binding.resource_type] = _TypeIndex()
            entry.add(_Acl(binding))
            count += 1
        self._index, self._count, self._source = index, count, acls
        self.rebuilds += 1

    # ------------------------------------------------------------------ checks

    def authorize(self, principal, host, operation, resource_type, resource_name):
        """Whether `principal` (a `KafkaPrincipal` or `Type:name`) connected from `host`
        (the client's address, e.g. "10.0.0.7") may do `operation` on the resource
        `resource_type` + `resource_name` (a literal name: a topic, a group,
        `kafka-cluster`, ...)."""
        operation = AclOperation(operation)
        resource_type = ResourceType(resource_type)
        if operation not in _CONCRETE_OPS:
            raise ValueError(f"cannot authorize operation {operation.name}: name a concrete "
                             "operation")
        if resource_type not in _CONCRETE_TYPES:
            raise ValueError(f"cannot authorize on resource type {resource_type.name}")
        if resource_name is None:
            raise ValueError("cannot authorize on a resource without a name")
        text = _principal_text(principal)
        if text in self.super_users:
            return True
        index = self._index.get(resource_type)
        lists = index.applying(resource_name) if index is not None else ()
        if not lists:
            return self.allow_everyone_if_no_acl_found
        principals = (text, WILDCARD_PRINCIPAL)
        allowed = False
        for acls in lists:
            for acl in acls:
                if _counts(acl, principals, host, operation):
                    if not acl.allow:
                        return False
                    allowed = True
        return allowed

    def authorize_any(self, principal, host, operation, resource_type):
        """Whether `principal` may do `operation` on at least one resource of
        `resource_type` (Kafka's `authorizeByResourceType`, asked e.g. for
        IDEMPOTENT_WRITE or CREATE without a name yet): a super user, an allowed check on an
        arbitrary name (the no-ACL default and `*` ACLs), or an ALLOW ACL of the principal
        for the operation whose pattern no DENY ACL covers."""
        operation = AclOperation(operation)
        resource_type = ResourceType(resource_type)
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        principal = _principal_text(principal)
        index = self._index.get(resource_type)
        if index is None:
            return False
        principals = (principal, WILDCARD_PRINCIPAL)

        def relevant(acl):
            return (acl.principal in principals
                    and (acl.host == WILDCARD_HOST or acl.host == host)
                    and acl.operation in (operation, AclOperation.ALL))

        deny_literal, deny_prefixed, allow_literal, allow_prefixed = set(), set(), set(), set()
        wildcard_allow = False
        for literal, table in ((True, index.literal), (False, index.prefixed)):
            for name, acls in table.items():
                for acl in acls:
                    if not relevant(acl):
                        continue
                    if not acl.allow:
                        if literal and name == WILDCARD_RESOURCE:
                            return False
                        (deny_literal if literal else deny_prefixed).add(name)
                    elif literal and name == WILDCARD_RESOURCE:
                        wildcard_allow = True
                    else:
                        (allow_literal if literal else allow_prefixed).add(name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False

    # ------------------------------------------------------------------ reads

    def acls(self, acl_filter=AclBindingFilter.ANY):
        """The `AclBinding`s that pass `acl_filter`."""
        return [acl.binding for entry in self._index.values()
                for table in (entry.literal, entry.prefixed)
                for acls in table.values() for acl in acls if acl_filter.matches(acl.binding)]
