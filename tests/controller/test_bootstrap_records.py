"""The active controller writes its config's bootstrap records into an empty log."""

import pytest

from kraftcore.controller.config import ControllerConfig
from kraftcore.errors import ConfigError
from kraftcore.metadata import records as R
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.security.scram import make_credential

from tests.controller.harness import Harness


def scram_record(user, password, code=1):
    cred = make_credential(code, password, b"pepper", 4096)
    return R.UserScramCredentialRecord(name=user, mechanism=code, salt=cred.salt,
                                       stored_key=cred.stored_key,
                                       server_key=cred.server_key, iterations=4096)


def test_activation_writes_the_bootstrap_records():
    records = (R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=20),
               scram_record("alice", "pw"), scram_record("alice", "pw", 2))
    h = Harness(config=ControllerConfig().with_bootstrap_records(records))
    h.commit()
    assert h.image.metadata_version() == 20
    assert sorted(h.image.scram) == [("alice", 1), ("alice", 2)]
    assert h.image.scram["alice", 1] == records[1]


def test_without_bootstrap_records_only_the_metadata_version():
    h = Harness(bootstrap_metadata_version=19)
    h.commit()
    assert h.image.metadata_version() == 19 and h.image.scram == {}


@pytest.mark.parametrize("records, fragment", [
    ((scram_record("a", "b"),), "metadata.version once"),
    ((R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=10),
      scram_record("a", "b")), "3.5-IV2"),
    ((R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=999),), "not a known"),
])
def test_bad_bootstrap_records(records, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ControllerConfig(bootstrap_records=records)
