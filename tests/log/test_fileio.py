"""`kraftcore.log.fileio.pwrite_all` with pieces: one `pwritev` in the common case, and
every byte in order when the kernel writes less than asked or there are more pieces than
one call takes."""

import os

import pytest

from kraftcore.log import fileio

pytestmark = pytest.mark.smoke


@pytest.mark.parametrize("iov_max", [3, 1024])
@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_pieces_are_written_back_to_back_through_short_writes(tmp_path, monkeypatch, step,
                                                              iov_max):
    real = os.pwritev
    calls = []

    def short_pwritev(fd, buffers, position):
        calls.append(len(buffers))
        joined = b"".join(bytes(b) for b in buffers)[:step]  # the kernel takes <= step bytes
        return real(fd, [joined], position)

    monkeypatch.setattr(fileio.os, "pwritev", short_pwritev)
    monkeypatch.setattr(fileio, "_IOV_MAX", iov_max)
    pieces = [b"head", b"", bytearray(b"-middle-"), memoryview(b"0123456789")[2:], b"x",
              b"", b"tail" * 10]
    path = tmp_path / "f"
    fd = fileio.open_file(path, create=True)
    try:
        fileio.pwrite_all(fd, b"prefix", 0)
        fileio.pwrite_all(fd, pieces, 6)
        fileio.pwrite_all(fd, (), 6)  # nothing to write
    finally:
        fileio.close(fd)
    assert path.read_bytes() == b"prefix" + b"".join(bytes(p) for p in pieces)
    assert calls and max(calls) <= iov_max
    if step > 100 and iov_max > len(pieces):
        assert len(calls) == 1  # all pieces in one pwritev
