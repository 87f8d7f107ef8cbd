"""Access control lists as Kafka has them: the enums with their wire codes, an ACL
(`AclBinding`: a resource pattern and an access control entry), a filter over ACLs
(`AclBindingFilter`, what DescribeAcls and DeleteAcls send), and the checks the cluster
makes before it stores an ACL or uses a filter.

    binding = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
    check_new_acl(binding)              # ControllerError(INVALID_REQUEST) when it may not be
    AclBindingFilter.ANY.matches(binding)

A filter matches an ACL (Kafka's ResourcePatternFilter / AccessControlEntryFilter rules):

* resource type: ANY, or equal;
* pattern type ANY: any ACL whose name equals the filter's name; LITERAL / PREFIXED: that
  pattern type and name equal; MATCH: the ACLs that would apply to a resource of that name
  (LITERAL equal or the wildcard `*`, PREFIXED a prefix of the name);
* a null name, principal or host matches any; operation and permission ANY match any.

This module owns these rules; the decision whether a request is allowed is
`kraftcore.security.authorizer`'s. Codes a peer sends that Kafka does not know read as
UNKNOWN, as Kafka's `fromCode` reads them.
"""

import enum
from typing import NamedTuple

from kraftcore.errors import ControllerError
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.security.principal import parse_principal

__all__ = ["ResourceType", "PatternType", "AclOperation", "AclPermissionType", "AclBinding",
           "AclBindingFilter", "WILDCARD_RESOURCE", "WILDCARD_PRINCIPAL", "WILDCARD_HOST",
           "CLUSTER_NAME", "check_new_acl", "check_filter", "binding_of_record",
           "parse_enum"]

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"
"""The only name of the CLUSTER resource."""


class _Coded(enum.IntEnum):
    @classmethod
    def of(cls, code):
        """The member with wire code `code`; UNKNOWN for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def parse_enum(cls, text):
    """The member of `cls` named `text` (any case, `-` for `_`: "describe-configs"), or
    written as its code; ValueError naming the choices otherwise."""
    if isinstance(text, cls):
        return text
    if isinstance(text, int):
        return cls(text)
    key = str(text).strip().upper().replace("-", "_")
    if key.isdigit():
        return cls(int(key))
    try:
        return cls[key]
    except KeyError:
        names = ", ".join(m.name for m in cls)
        raise ValueError(f"{text!r} is not a {cls.__name__} (one of {names})") from None


class AclBinding(NamedTuple):
    """One ACL: who (`principal`, `host`) may or may not (`permission`) do `operation` on
    the resources `resource_type` + `name` + `pattern_type` name."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(cls, resource_type, name, pattern_type, principal, host, operation, permission):
        """A binding from wire codes (or members): unknown codes become UNKNOWN."""
        return cls(ResourceType.of(resource_type), name, PatternType.of(pattern_type),
                   principal, host, AclOperation.of(operation),
                   AclPermissionType.of(permission))

    def __str__(self):
        return (f"(pattern=ResourcePattern(resourceType={self.resource_type.name}, "
                f"name={self.name}, patternType={self.pattern_type.name}), "
                f"entry=(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, "
                f"permissionType={self.permission.name}))")


def binding_of_record(record):
    """The `AclBinding` of an `AccessControlEntryRecord`."""
    return AclBinding.of(record.resource_type, record.resource_name, record.pattern_type,
                         record.principal, record.host, record.operation,
                         record.permission_type)


class AclBindingFilter(NamedTuple):
    """A filter over ACLs (see the module docstring); None for `name`, `principal` or
    `host` matches any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str = None
    pattern_type: PatternType = PatternType.ANY
    principal: str = None
    host: str = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type, name, pattern_type, principal, host, operation, permission):
        """A filter from wire codes (or members): unknown codes become UNKNOWN."""
        return cls(ResourceType.of(resource_type), name, PatternType.of(pattern_type),
                   principal, host, AclOperation.of(operation),
                   AclPermissionType.of(permission))

    def is_unknown(self):
        """Whether any part of the filter is UNKNOWN (`check_filter` refuses it)."""
        return (self.resource_type == ResourceType.UNKNOWN
                or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN
                or self.permission == AclPermissionType.UNKNOWN)

    def matches(self, binding):
        """Whether `binding` (an `AclBinding`) passes this filter."""
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def matches_pattern(self, binding):
        rtype, ptype = self.resource_type, self.pattern_type
        if rtype != ResourceType.ANY and rtype != binding.resource_type:
            return False
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != binding.pattern_type:
            return False
        name = self.name
        if name is None:
            return True
        if ptype == PatternType.ANY or ptype == binding.pattern_type:
            return name == binding.name
        # MATCH: the ACLs that apply to a resource named `name`
        if binding.pattern_type == PatternType.LITERAL:
            return name == binding.name or binding.name == WILDCARD_RESOURCE
        if binding.pattern_type == PatternType.PREFIXED:
            return name.startswith(binding.name)
        return False

    def matches_entry(self, binding):
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return (self.permission == AclPermissionType.ANY
                or self.permission == binding.permission)


AclBindingFilter.ANY = AclBindingFilter()
"""The filter that matches every ACL."""


def _invalid(message):
    return ControllerError(ErrorCode.INVALID_REQUEST, message)


def check_new_acl(binding):
    """Raise `ControllerError` (INVALID_REQUEST, 42) unless `binding` may be stored: what
    Kafka's broker and controller check before they create an ACL (a concrete resource
    type, LITERAL or PREFIXED, a concrete operation, ALLOW or DENY, a non-empty name,
    `kafka-cluster` for the CLUSTER resource) and a principal written `Type:name`."""
    if binding.resource_type == ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        raise _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.name:
        raise _invalid("Invalid empty resource name")
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise _invalid(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _invalid(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise _invalid(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise _invalid(f"Invalid permissionType {binding.permission.name}")
    try:
        parse_principal(binding.principal)
    except (TypeError, ValueError):
        raise _invalid(f"Invalid principal {binding.principal!r}: expected "
                       "principalType:principalName (e.g. User:alice)") from None


def check_filter(acl_filter):
    """Raise `ControllerError` (INVALID_REQUEST) for a filter with an UNKNOWN part, as
    Kafka's controller refuses it in DeleteAcls."""
    if acl_filter.resource_type == ResourceType.UNKNOWN \
            or acl_filter.pattern_type == PatternType.UNKNOWN:
        raise _invalid("Unknown patternFilter.")
    if acl_filter.operation == AclOperation.UNKNOWN \
            or acl_filter.permission == AclPermissionType.UNKNOWN:
        raise _invalid("Unknown entryFilter.")
