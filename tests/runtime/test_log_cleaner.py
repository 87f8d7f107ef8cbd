"""The broker's log cleaner (`kraftcore.runtime.log_cleaner.LogCleaner`) over real
`ReplicaManager`s: it cleans the dirtiest compacted partition in its worker thread and logs
the bytes before and after; a partition whose segment is corrupt in the dirty range is
logged as an error, left as it was and not cleaned again; closing aborts a clean in
progress. And the broker settings it reads (Kafka's log.cleaner.* keys)."""

import asyncio
import logging
import os
import re

import pytest

from kraftcore import codec
from kraftcore.errors import ConfigError
from kraftcore.log import cleaner as kraftcore_cleaner
from kraftcore.runtime.config import DEFAULTS, NodeConfig
from kraftcore.runtime.log_cleaner import LogCleaner

from tests.apis.helpers import call, create_topics
from tests.broker.test_replicas import Cluster
from tests.runtime.test_config import BROKER

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1024"}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("dirty", -1, -1, {0: [1]},
                                  dict(COMPACTED, **{"min.cleanable.dirty.ratio": "0.1"})),
                                 ("dirtier", -1, -1, {0: [1]}, COMPACTED),
                                 ("plain", -1, -1, {0: [1]})), 7)
    c.sync()
    yield c
    c.close()


def fill(cluster, topic, count, keys):
    broker = cluster.brokers[1]
    for i in range(count):
        data = codec.encode_batch([b"value %d" % i], keys=[b"k%d" % (i % keys)], timestamp=1)
        broker.produce(topic, 0, data, 1)
    return broker.get(topic, 0)


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_dirtiest_log_is_cleaned_first_and_the_clean_is_logged(cluster, caplog):
    dirty = fill(cluster, "dirty", 60, keys=20)
    kraftcore_cleaner.clean(dirty.log, 0)  # cleaned once: a little dirt from here on
    dirty = fill(cluster, "dirty", 20, keys=20)
    dirtier = fill(cluster, "dirtier", 60, keys=2)  # never cleaned: all dirt
    fill(cluster, "plain", 60, keys=1)
    cleaner = LogCleaner(1, cluster.brokers[1], lambda: cluster.now)

    async def main():
        cleaner.start()
        try:
            first = await cleaner.clean_once()
            second = await cleaner.clean_once()
            third = await cleaner.clean_once()
        finally:
            await cleaner.close()
        return first, second, third

    before = dirtier.log.size_bytes
    with caplog.at_level(logging.INFO, logger="kraftcore.runtime"):
        assert run(main()) == (True, True, False)
    lines = [r.getMessage() for r in caplog.records if "cleaned" in r.getMessage()]
    assert lines[0].startswith("broker 1: cleaned dirtier-0: offsets [0, ")
    written = re.search(r"(\d+) bytes -> (\d+) bytes", lines[0])
    assert before - int(written[1]) + int(written[2]) == dirtier.log.size_bytes
    assert lines[1].startswith("broker 1: cleaned dirty-0")
    assert cleaner.cleans == 2 and dirty.log.cleaner_offset is not None


def test_a_corrupt_segment_stops_that_partitions_clean_with_an_error(cluster, caplog):
    partition = fill(cluster, "dirty", 60, keys=3)
    log = partition.log
    victim = os.path.join(log.path, f"{log.segment_base_offsets[1]:020d}.log")
    with open(victim, "r+b") as f:
        f.seek(64)
        byte = f.read(1)
        f.seek(64)
        f.write(bytes([byte[0] ^ 1]))
    files = {n: open(os.path.join(log.path, n), "rb").read() for n in os.listdir(log.path)
             if n.endswith((".log", ".index", ".timeindex"))}
    cleaner = LogCleaner(1, cluster.brokers[1], lambda: cluster.now)

    async def main():
        cleaner.start()
        try:
            return await cleaner.clean_once(), await cleaner.clean_once()
        finally:
            await cleaner.close()

    with caplog.at_level(logging.INFO, logger="kraftcore.runtime"):
        assert run(main()) == (False, False)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors  # not tried again
    assert errors[0].startswith("broker 1: cleaning dirty-0 failed") and "CRC" in errors[0]
    assert os.path.basename(victim) in errors[0]
    assert {n: open(os.path.join(log.path, n), "rb").read() for n in os.listdir(log.path)
            if n.endswith((".log", ".index", ".timeindex"))} == files
    assert log.cleaner_offset is None


def test_closing_the_logs_waits_for_a_clean_in_progress(cluster):
    partition = fill(cluster, "dirty", 200, keys=3)
    cleaner = LogCleaner(1, cluster.brokers[1], lambda: cluster.now)

    async def main():
        cleaner.start()
        task = asyncio.ensure_future(cleaner.clean_once())
        await asyncio.sleep(0)
        await cleaner.close()  # aborts it if it is still running
        return await task

    run(main())
    assert not partition.log.cleaning
    cluster.brokers[1].close()
    assert not any(n.endswith((".cleaned", ".swap", ".deleted"))
                   for n in os.listdir(partition.log.path))


def test_the_brokers_cleaner_settings_are_kafkas():
    base = BROKER
    c = NodeConfig.from_mapping(base)
    assert (c.log_cleaner_enable, c.log_cleaner_backoff_ms) == (True, 15_000)
    assert c.cleaner_settings() == {"delete_retention_ms": 86_400_000,
                                    "min_compaction_lag_ms": 0,
                                    "offset_map_bytes": 128 * 1024 * 1024}
    assert DEFAULTS["log.cleaner.enable"] == "true"
    assert DEFAULTS["log.cleaner.backoff.ms"] == "15000"
    c = NodeConfig.from_mapping({**base, "log.cleaner.enable": "false",
                                 "log.cleaner.backoff.ms": "200",
                                 "log.cleaner.delete.retention.ms": "5"})
    assert (c.log_cleaner_enable, c.log_cleaner_backoff_ms) == (False, 200)
    assert c.cleaner_settings()["delete_retention_ms"] == 5
    with pytest.raises(ConfigError, match="^log.cleaner.backoff.ms"):
        NodeConfig.from_mapping({**base, "log.cleaner.backoff.ms": "-1"})
