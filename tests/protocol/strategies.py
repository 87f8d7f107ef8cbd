"""Hypothesis strategies that build a valid instance of any schema class at a version.

Fields the version does not carry keep their defaults; tagged fields are sometimes left at
their default; flexible structs sometimes carry unknown tagged fields, which a round trip
must preserve.
"""

from hypothesis import strategies as st

from kraftcore import kernel_api as K
from kraftcore.protocol.schema import in_range
from kraftcore.types import Uuid

_INTS = {
    K.INT8: (-(1 << 7), (1 << 7) - 1), K.INT16: (-(1 << 15), (1 << 15) - 1),
    K.INT32: (-(1 << 31), (1 << 31) - 1), K.INT64: (-(1 << 63), (1 << 63) - 1),
    K.UINT16: (0, (1 << 16) - 1), K.UINT32: (0, (1 << 32) - 1),
}
_SMALL = st.integers(0, 3)


def _scalar(kind, nullable):
    if kind in _INTS:
        low, high = _INTS[kind]
        base = st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, -1 if low else 1]))
    elif kind == K.BOOL:
        base = st.booleans()
    elif kind == K.FLOAT64:
        base = st.floats(allow_nan=False)
    elif kind == K.UUID:
        base = st.binary(min_size=16, max_size=16).map(Uuid)
    elif kind == K.STRING:
        base = st.text(max_size=12)
    elif kind == K.BYTES:
        base = st.binary(max_size=20)
    elif kind == K.RECORDS:
        base = st.binary(max_size=40)
    else:  # pragma: no cover - every kind is listed
        raise AssertionError(kind)
    return st.one_of(st.none(), base) if nullable else base


def _field(op):
    attr, kind, flags, default, sub, tag, label, slot = op
    nullable = bool(flags & K.NULLABLE)
    if kind == K.STRUCT:
        value = instance_of(sub)
    elif kind == K.ARRAY:
        value = st.lists(_scalar(sub, False), max_size=4)
    elif kind == K.ARRAY_STRUCT:
        value = st.lists(instance_of(sub), max_size=3)
    else:
        return _scalar(kind, nullable)
    return st.one_of(st.none(), value) if nullable else value


@st.composite
def _unknown_tags(draw, prog):
    tags = draw(st.sets(st.integers(0, 40), max_size=2))
    tags = sorted(t for t in tags if t not in prog[3])
    return [(t, draw(st.binary(max_size=6))) for t in tags] or None


def instance_of(prog):
    """A strategy of instances of program `prog`'s class (prog = cls.program(version))."""
    cls = prog[0]
    fields = {}
    for op in prog[1]:
        if not op[2] & K.ABSENT:
            fields[op[0]] = _field(op)
    for op in prog[2]:
        fields[op[0]] = _field(op)

    @st.composite
    def build(draw):
        obj = cls(**{name: draw(strategy) for name, strategy in fields.items()})
        if prog[4]:
            obj._unknown_tags = draw(st.one_of(st.none(), _unknown_tags(prog)))
        return obj

    return build()


def message_at(cls, version):
    """An instance of message class `cls` valid at `version`."""
    assert in_range(version, cls.valid_versions)
    return instance_of(cls.program(version))
