"""The fixtures of the tests of `kraftcore.apis`: a one-voter quorum, its facade, and a
cluster of three unfenced brokers."""

import pytest

from kraftcore.controller.local import LocalQuorum

from tests.apis.helpers import LocalFacade, add_broker


@pytest.fixture
def quorum():
    return LocalQuorum()


@pytest.fixture
def facade(quorum):
    return LocalFacade(quorum)


@pytest.fixture
def cluster(facade):
    """Brokers 1, 2, 3 registered and unfenced; returns the facade and their epochs."""
    epochs = {b: add_broker(facade, b) for b in (1, 2, 3)}
    return facade, epochs
