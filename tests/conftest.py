"""Shared fixtures: every kernel test runs against each implementation that loads.

The session refuses to run when the native extension did not load and KRAFTCORE_PURE is
unset: a silently pure-Python run would hide a broken build.
"""

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


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request):
    """One implementation of the kernels, a `kraftcore.codec.Kernels`: its .name and its
    .crc32c, .varint, .records, .segment and .protocol modules."""
    return IMPLEMENTATIONS[request.param]


@pytest.fixture
def impls():
    """Every implementation that loads, by name."""
    return dict(IMPLEMENTATIONS)
