"""Shared fixtures: every kernel test runs against each implementation that loads.

The session refuses to run when the native extension did not load and KRAFTCORE_PURE is
unset: a silently pure-Python run would hide a broken build.
"""

import types

import pytest

from kraftcore import codec

IMPLEMENTATIONS = codec.implementations()


def pytest_sessionstart(session):
    if not codec.PURE_REQUESTED and codec.IMPLEMENTATION != "c":
        pytest.exit(
            "kraftcore's native extension did not load (set KRAFTCORE_PURE=1 to test the "
            f"pure-Python kernels on purpose): {codec.EXTENSION_ERROR}",
            returncode=3,
        )


def _namespace(name):
    crc, varint, records, segment, protocol, appends = IMPLEMENTATIONS[name]
    return types.SimpleNamespace(
        name=name, crc32c=crc, varint=varint, records=records, segment=segment,
        protocol=protocol, appends=appends,
    )


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request):
    """One implementation: .crc32c, .varint, .records, .segment, .protocol and .appends
    modules, and its .name."""
    return _namespace(request.param)


@pytest.fixture
def impls():
    """Every implementation that loads, by name."""
    return {name: _namespace(name) for name in IMPLEMENTATIONS}
