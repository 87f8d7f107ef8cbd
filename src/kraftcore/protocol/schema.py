"""Declarative message schemas: fields with version ranges, and their compilation into
programs the codec kernel interprets (`kraftcore._py.protocol` documents the program form).

A schema is written once per message, in Kafka's terms (kafka-facts §1.2, §5, §6):

    VoteRequest = message("VoteRequest", api_key=52, kind="request", valid="0-2",
                          flexible="0+", fields=[
        Field("ClusterId", "string", nullable="0+", default=None),
        Field("VoterId", "int32", versions="1+", default=-1, ignorable=True),
        Field("Topics", "[]TopicData", fields=[...]),
    ])

* Field names are Kafka's; the Python attribute is their snake_case form (`ClusterId` ->
  `cluster_id`) and the JSON name their camelCase form (`clusterId`), as Kafka prints it.
* Types: bool, int8, int16, int32, int64, uint16, uint32, float64, uuid, string, bytes,
  records; `[]T` is an array of T; any other name is a struct, whose `fields` are given
  with its first use (later uses of the same name in the message may omit them).
* Version ranges are Kafka's: "0+", "1-3", "2", "none".
* `tag=n` makes the field tagged (in the versions `tagged`, default: all its versions).
* `ignorable=True` lets a version that lacks the field drop a non-default value; without it,
  encoding such a value is an `EncodeError`.
* `flexible="none"` keeps a field's classic encoding inside flexible versions (the client
  id of request header v2).

Each generated class holds its fields in `__slots__`, takes them as keyword arguments (the
others get their defaults), compares by value, and keeps unknown tagged fields in
`_unknown_tags` so that a decode / encode round trip preserves them.
"""

import keyword
import re
import sys

from kraftcore import kernel_api as K
from kraftcore.errors import EncodeError, UnsupportedVersionError
from kraftcore.types import ZERO_UUID, Uuid

_SCALARS = {name: K.KINDS[name] for name in (
    "bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "uuid",
    "string", "bytes", "records")}
_FIXED_BYTES = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2,
                "uint32": 4, "float64": 8, "uuid": 16}
_TYPE_DEFAULTS = {"bool": False, "float64": 0.0, "uuid": ZERO_UUID, "string": "",
                  "bytes": b"", "records": None}
_UNSET = object()
_NONE = (1, 0)  # an empty version range


def parse_versions(text):
    """Kafka's version range text -> (low, high) inclusive; high None = open; "none" empty."""
    text = text.strip()
    if text == "none":
        return _NONE
    if text.endswith("+"):
        return (int(text[:-1]), None)
    if "-" in text:
        low, high = text.split("-")
        return (int(low), int(high))
    return (int(text), int(text))


_codec = None  # kraftcore.codec once loaded: it imports this module, so not at the top


def _load_codec():
    """kraftcore.codec, imported once: a `from` import in each encode and decode costs an
    import-system call per message."""
    global _codec
    from kraftcore import codec

    _codec = codec
    return codec


def in_range(version, versions):
    low, high = versions
    return version >= low and (high is None or version <= high)


def _snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class Field:
    """One field of a struct: its name, type, versions and default (see the module doc)."""

    __slots__ = ("name", "attr", "json_name", "type", "element", "versions", "nullable",
                 "tag", "tagged", "default", "ignorable", "flexible", "fields", "struct")

    def __init__(self, name, type, versions="0+", *, nullable="none", tag=None, tagged=None,
                 default=_UNSET, ignorable=False, flexible="0+", fields=None):
        self.name = name
        self.attr = sys.intern(_snake(name))
        self.json_name = name[0].lower() + name[1:]
        self.type = type
        self.element = type[2:] if type.startswith("[]") else None
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.tagged = parse_versions(tagged) if tagged is not None else self.versions
        self.ignorable = ignorable
        self.flexible = parse_versions(flexible)
        self.fields = fields
        self.struct = None  # the struct class, for struct and struct-array fields
        if isinstance(default, list) and default:
            raise ValueError(f"{name}: an array's default is empty or null")
        self.default = default

    @property
    def is_array(self):
        return self.element is not None

    @property
    def struct_name(self):
        base = self.element if self.is_array else self.type
        return None if base in _SCALARS else base

    def default_value(self):
        """A fresh default for this field (lists and structs are new objects each time)."""
        if self.default is not _UNSET:
            return list(self.default) if isinstance(self.default, list) else self.default
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct()
        return _TYPE_DEFAULTS.get(self.type, 0)

    def __repr__(self):
        return f"Field({self.name!r}, {self.type!r})"


class Struct:
    """Base of every generated struct class; `_fields` lists its `Field`s in wire order."""

    __slots__ = ("_unknown_tags",)
    _fields = ()
    _programs = None

    def __init__(self, **values):
        for field in self._fields:
            value = values.pop(field.attr, _UNSET)
            setattr(self, field.attr, field.default_value() if value is _UNSET else value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(values))}; "
                            f"its fields are {', '.join(f.attr for f in self._fields)}")
        self._unknown_tags = None

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.attr) == getattr(other, f.attr) for f in self._fields) and (
            (self._unknown_tags or None) == (other._unknown_tags or None))

    __hash__ = None

    def __repr__(self):
        inner = ", ".join(f"{f.attr}={getattr(self, f.attr)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes):
        """A copy with some fields changed (nested values are shared, not copied)."""
        values = {f.attr: getattr(self, f.attr) for f in self._fields}
        values.update(changes)
        copy = type(self)(**values)
        copy._unknown_tags = self._unknown_tags
        return copy

    @classmethod
    def program(cls, version):
        """The kernel program of this struct at `version` (compiled once, then cached)."""
        prog = cls._programs.get(version)
        if prog is None:
            prog = cls._programs[version] = _compile(cls, version)
        return prog

    def to_json(self, version=None):
        """A JSON-ready dict in Kafka's style (camelCase names, uuids in base64 text, bytes
        as base64). With `version`, only the fields that version carries."""
        return _to_json(self, version)

    @classmethod
    def from_json(cls, doc, version):
        """The inverse of `to_json(version)`: build an instance from a parsed JSON object.
        Fields the version carries may be absent (they get their defaults); a value of the
        wrong type or range raises ValueError naming the field. Unknown keys are ignored."""
        return _from_json(cls, doc, version)


class Message(Struct):
    """A top-level message: a request, a response, a header or a metadata record."""

    __slots__ = ("_version",)
    api_key = None
    kind = None
    valid_versions = (0, 0)
    flexible_versions = _NONE

    def __init__(self, **values):
        super().__init__(**values)
        self._version = None

    @property
    def decoded_version(self):
        """The version this message was decoded from (None when built in Python)."""
        return getattr(self, "_version", None)

    @classmethod
    def check_version(cls, version):
        low, high = cls.valid_versions  # `in_range` inline: every encode and decode asks
        if not isinstance(version, int) or version < low or (high is not None and version > high):
            raise UnsupportedVersionError(
                f"{cls.__name__} has versions {low}-{high}, not {version!r}")

    @classmethod
    def is_flexible(cls, version):
        return in_range(version, cls.flexible_versions)

    @property
    def highest_version(self):
        return self.valid_versions[1]

    def encode(self, version):
        """This message's body at `version`, as bytes."""
        codec = _codec or _load_codec()
        self.check_version(version)
        return codec.encode_struct(self._programs.get(version) or self.program(version), self)

    def encode_parts(self, version):
        """This message's body at `version` as a list of parts: bytes, and the
        `kraftcore.types.FileRegion`s its records fields hold, in wire order (one bytes
        when it holds none)."""
        codec = _codec or _load_codec()
        self.check_version(version)
        return codec.encode_struct_parts(self._programs.get(version) or self.program(version),
                                         self)

    @classmethod
    def decode(cls, buffer, version):
        """Decode a whole body at `version`; trailing bytes are a `ProtocolError`."""
        codec = _codec or _load_codec()
        cls.check_version(version)
        obj = codec.decode_message(cls.program(version), buffer)
        obj._version = version
        return obj


def _compile(cls, version):
    flexible = cls._flexible_at(version)
    ops, tagged = [], []
    min_bytes = 1 if flexible else 0
    for f in cls._fields:
        present = in_range(version, f.versions)
        flags = 0
        if in_range(version, f.nullable):
            flags |= K.NULLABLE
        if flexible and in_range(version, f.flexible):
            flags |= K.COMPACT
        if f.ignorable:
            flags |= K.IGNORABLE
        default = f.default_value()
        if isinstance(default, list):
            flags |= K.FRESH
            default = None
        elif isinstance(default, Struct):
            flags |= K.FRESH
            default = f.struct
        struct_name = f.struct_name
        if struct_name is not None:
            sub = f.struct.program(version)
            kind = K.ARRAY_STRUCT if f.is_array else K.STRUCT
        elif f.is_array:
            sub, kind = _SCALARS[f.element], K.ARRAY
        else:
            sub, kind = None, _SCALARS[f.type]
        is_tagged = f.tag is not None and flexible and in_range(version, f.tagged)
        if not present:
            flags |= K.ABSENT
        op = (f.attr, kind, flags, default, sub, f.tag if is_tagged else -1,
              f"{cls.__name__}.{f.attr}", cls.__dict__[f.attr])
        if present and is_tagged:
            tagged.append(op)
            continue
        ops.append(op)
        if present:
            if kind == K.STRUCT:
                min_bytes += sub[6]
            elif f.is_array or f.type in ("bytes", "records"):
                min_bytes += 1 if flags & K.COMPACT else 4
            elif f.type == "string":
                min_bytes += 1 if flags & K.COMPACT else 2
            else:
                min_bytes += _FIXED_BYTES[f.type]
    tagged.sort(key=lambda op: op[5])
    tagmap = {op[5]: op for op in tagged}
    return (cls, tuple(ops), tuple(tagged), tagmap, flexible, cls.__name__, min_bytes)


def _json_value(value, version):
    if isinstance(value, Struct):
        return _to_json(value, version)
    if isinstance(value, list):
        return [_json_value(v, version) for v in value]
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _to_json(obj, version):
    out = {}
    for f in obj._fields:
        if version is not None and not in_range(version, f.versions):
            continue
        out[f.json_name] = _json_value(getattr(obj, f.attr), version)
    return out


_JSON_INTS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
_JSON_UINTS = {"uint16": 16, "uint32": 32}


def _scalar_from_json(kind, value, where):
    if value is None:
        raise ValueError(f"{where} holds a null element")
    if kind in _JSON_INTS or kind in _JSON_UINTS:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{where} must be an integer, not {value!r}")
        low, high = ((-(1 << _JSON_INTS[kind]), (1 << _JSON_INTS[kind]) - 1) if kind in _JSON_INTS
                     else (0, (1 << _JSON_UINTS[kind]) - 1))
        if not low <= value <= high:
            raise ValueError(f"{where} = {value} is out of the {kind} range")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, not {value!r}")
        return value
    if kind == "float64":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{where} must be a number, not {value!r}")
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, not {value!r}")
        return value
    if kind == "uuid":
        try:
            return Uuid.from_str(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    import base64
    import binascii

    try:
        return base64.b64decode(value, validate=True)
    except (TypeError, binascii.Error):
        raise ValueError(f"{where} must be base64 text, not {value!r}") from None


def _from_json(cls, doc, version):
    if not isinstance(doc, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object, not {type(doc).__name__}")
    values = {}
    for f in cls._fields:
        if f.json_name not in doc or not in_range(version, f.versions):
            continue
        value, where = doc[f.json_name], f"{cls.__name__}.{f.json_name}"
        if value is None:
            if not in_range(version, f.nullable):
                raise ValueError(f"{where} is null but the field is not nullable")
            values[f.attr] = None
        elif f.struct is not None:
            if f.is_array:
                if not isinstance(value, list):
                    raise ValueError(f"{where} must be a list")
                values[f.attr] = [_from_json(f.struct, v, version) for v in value]
            else:
                values[f.attr] = _from_json(f.struct, value, version)
        elif f.is_array:
            if not isinstance(value, list):
                raise ValueError(f"{where} must be a list")
            values[f.attr] = [_scalar_from_json(f.element, v, where) for v in value]
        else:
            values[f.attr] = _scalar_from_json(f.type, value, where)
    return cls(**values)


def _make_struct(name, fields, base, owner_structs, namespace):
    for f in fields:
        struct_name = f.struct_name
        if struct_name is None:
            continue
        if f.fields is not None:
            if struct_name in owner_structs:
                raise ValueError(f"struct {struct_name} is defined twice in one message")
            owner_structs[struct_name] = _make_struct(struct_name, f.fields, Struct,
                                                      owner_structs, {})
        elif struct_name not in owner_structs:
            raise ValueError(f"struct {struct_name} is used before its fields are given")
        f.struct = owner_structs[struct_name]
        if f.default is not _UNSET and f.default is not None and not isinstance(f.default, list):
            raise ValueError(f"{f.name}: a struct field's default is its fields' defaults")
    attrs = {f.attr for f in fields}
    if len(attrs) != len(fields):
        raise ValueError(f"{name} has two fields with one name")
    body = dict(namespace)
    body.update({"__slots__": tuple(f.attr for f in fields), "_fields": tuple(fields),
                 "_programs": {}})
    init = _make_init(name, fields, base is Message)
    if init is not None:
        body["__init__"] = init
    return type(name, (base,), body)


def _make_init(name, fields, is_message):
    """The `__init__` of a generated class, written for its fields: the same as
    `Struct.__init__` (and `Message.__init__`), without a loop over the fields, a dict pop
    and a `setattr` for each. A default that is a fresh object each time (a list, a
    struct) is made by the field; any other is the same value every time. None when a
    field's name cannot be a parameter (the generic one serves)."""
    attrs = [f.attr for f in fields]
    if any(not a.isidentifier() or keyword.iskeyword(a) or a.startswith("_") or a == "self"
           for a in attrs):
        return None
    env = {"_UNSET": _UNSET, "_no_fields": _no_fields}
    lines = []
    for i, f in enumerate(fields):
        fresh = f.is_array or isinstance(f.default, list) or (
            f.default is _UNSET and f.struct is not None)
        if fresh:
            env[f"_d{i}"] = f.default_value
            default = f"_d{i}()"
        else:
            env[f"_d{i}"] = f.default_value()
            default = f"_d{i}"
        lines.append(f"    self.{f.attr} = {default} if {f.attr} is _UNSET else {f.attr}")
    params = "".join(f"{a}=_UNSET, " for a in attrs)
    source = "\n".join([f"def __init__(self, {'*, ' if attrs else ''}{params}**_unknown):",
                        "    if _unknown:", "        _no_fields(self, _unknown)", *lines,
                        "    self._unknown_tags = None"]
                       + (["    self._version = None"] if is_message else []))
    exec(compile(source, f"<{name}.__init__>", "exec"), env)  # noqa: S102 - our own text
    return env["__init__"]


def _no_fields(obj, values):
    raise TypeError(f"{type(obj).__name__} has no field(s) {', '.join(sorted(values))}; "
                    f"its fields are {', '.join(f.attr for f in obj._fields)}")


def message(name, *, fields, api_key=None, kind="data", valid="0", flexible="0+"):
    """Build the class of a top-level message from its schema (see the module doc)."""
    structs = {}
    valid_versions = parse_versions(valid)
    flexible_versions = parse_versions(flexible)
    namespace = {"api_key": api_key, "kind": kind, "valid_versions": valid_versions,
                 "flexible_versions": flexible_versions}
    cls = _make_struct(name, fields, Message, structs, namespace)
    for struct_name, struct_cls in structs.items():
        struct_cls._flexible_at = staticmethod(lambda v, fv=flexible_versions: in_range(v, fv))
        struct_cls.__qualname__ = f"{name}.{struct_name}"
        setattr(cls, struct_name, struct_cls)
    cls._flexible_at = staticmethod(lambda v: in_range(v, flexible_versions))
    for f in fields:
        if f.tag is not None and not f.tagged[0] >= flexible_versions[0]:
            raise ValueError(f"{name}.{f.name} is tagged in a non-flexible version")
    return cls


def adopt(cls, module):
    """Name `module` as the home of a class `message` built and of its struct classes, for
    repr, pickling and documentation (`message` runs here, so they would name this one)."""
    cls.__module__ = module
    for f in cls._fields:
        if f.struct is not None and f.struct.__module__ != module:
            adopt(f.struct, module)


__all__ = ["Field", "Struct", "Message", "message", "adopt", "parse_versions", "in_range",
           "EncodeError"]
