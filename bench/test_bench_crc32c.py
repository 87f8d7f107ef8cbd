"""CRC-32C benchmarks: kraftcore's native checksum (hardware instructions when the CPU has
them), google-crc32c, and kraftcore's portable table-driven path, on 1 KiB, 64 KiB and 1 MiB
of random bytes. Each timed call checksums one `bytes` object from the start.
"""

import random

import pytest

from kraftcore import codec

SIZES = {"1KiB": 1024, "64KiB": 64 * 1024, "1MiB": 1024 * 1024}
SEED = 0x3263_7263


@pytest.fixture(scope="module")
def blobs():
    rng = random.Random(SEED)
    return {name: rng.randbytes(size) for name, size in SIZES.items()}


def _native_crc32c():
    native = codec.implementations().get("c")
    if native is None:
        pytest.skip("kraftcore's native kernels are not built")
    return native.crc32c


def crc_kraftcore_c():
    return _native_crc32c().crc32c


def crc_google():
    return pytest.importorskip("google_crc32c").value


def crc_kraftcore_c_portable():
    return _native_crc32c()._crc32c_portable


PEERS = {
    "kraftcore-c": crc_kraftcore_c,
    "google-crc32c": crc_google,
    "kraftcore-c-portable": crc_kraftcore_c_portable,
}


def _run(benchmark, blobs, size, peer):
    data = blobs[size]
    crc = PEERS[peer]()
    benchmark.extra_info.update(peer=peer, bytes=len(data))
    benchmark(crc, data)


@pytest.mark.benchmark(group="crc32c-1KiB")
@pytest.mark.parametrize("peer", list(PEERS))
def test_crc32c_1kib(benchmark, blobs, peer):
    _run(benchmark, blobs, "1KiB", peer)


@pytest.mark.benchmark(group="crc32c-64KiB")
@pytest.mark.parametrize("peer", list(PEERS))
def test_crc32c_64kib(benchmark, blobs, peer):
    _run(benchmark, blobs, "64KiB", peer)


@pytest.mark.benchmark(group="crc32c-1MiB")
@pytest.mark.parametrize("peer", list(PEERS))
def test_crc32c_1mib(benchmark, blobs, peer):
    _run(benchmark, blobs, "1MiB", peer)


@pytest.mark.parametrize("size", list(SIZES))
def test_crc32c_peers_agree(blobs, size):
    """All three compute the same checksum, equal to the pure-Python reference (checked on
    1 KiB only for the reference: it is byte-at-a-time Python)."""
    data = blobs[size]
    results = {peer: factory()(data) for peer, factory in PEERS.items()}
    assert len(set(results.values())) == 1, results
    if size == "1KiB":
        reference = codec.implementations()["py"].crc32c.crc32c
        assert results["kraftcore-c"] == reference(data)
    assert PEERS["kraftcore-c"]()(b"123456789") == 0xE3069283  # the CRC-32C check value
