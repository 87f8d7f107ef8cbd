"""Responses whose records are `FileRegion`s: the listener sends them from the file with
sendfile, in request order with the answers around them, closes every region it was given
(sent or dropped), and closes a connection whose region was truncated before it went out,
without disturbing the others."""

import asyncio
import os

from kraftcore.net import Connection, Listener
from kraftcore.protocol import framing
from kraftcore.types import FileRegion

from .helpers import (HOST, RawClient, epoch_of, fetch, fetch_response, open_raw, run, vote,
                      vote_response, wait_until)

DATA = bytes(range(256)) * 4096  # 1 MiB


def _file(tmp_path, data=DATA):
    path = tmp_path / "segment"
    path.write_bytes(data)
    return path


class RegionHandler:
    """Answers a Fetch for offset N with the region [N, N + length) of `path` (the whole
    rest of the file by default), and a Vote at once; remembers the regions it made."""

    def __init__(self, path, length=None):
        self.path = path
        self.length = length
        self.regions = []

    def __call__(self, request, peer):
        if request.api_key != 1:
            return vote_response(epoch_of(request.body))
        offset = request.body.topics[0].partitions[0].fetch_offset
        size = os.path.getsize(self.path)
        length = size - offset if self.length is None else self.length
        region = FileRegion(open(self.path, "rb", buffering=0), offset, length)
        self.regions.append(region)
        return fetch_response(region)


def _records(response):
    return bytes(response.responses[0].partitions[0].records)


def test_a_region_arrives_as_the_file_bytes_and_is_closed(tmp_path):
    async def test():
        handler = RegionHandler(_file(tmp_path))
        listener = await Listener.start(HOST, 0, handler)
        conn = await Connection.open(HOST, listener.port)
        for offset in (0, 1, 4095, 700_000):
            response = await conn.send(fetch(offset))
            assert _records(response) == DATA[offset:]
        assert handler.regions and all(r.file.closed for r in handler.regions)
        await conn.close()
        await listener.close()
    run(test)


def test_answers_around_a_region_keep_the_request_order(tmp_path):
    """Pipelined: vote, fetch (a region), vote, fetch, vote — the correlation ids and the
    bodies come back in that order, byte for byte."""
    async def test():
        handler = RegionHandler(_file(tmp_path))
        listener = await Listener.start(HOST, 0, handler)
        raw = await RawClient.open(listener.port)
        kinds = ["vote", "fetch", "vote", "fetch", "vote"]
        for i, kind in enumerate(kinds):
            body = vote(10 + i) if kind == "vote" else fetch(1000 * i)
            await raw.request(body, 2 if kind == "vote" else 12, correlation_id=500 + i)
        for i, kind in enumerate(kinds):
            if kind == "vote":
                cid, body = await raw.read_response(52, 2)
                assert body.topics[0].partitions[0].leader_epoch == 10 + i
            else:
                cid, body = await raw.read_response(1, 12)
                assert _records(body) == DATA[1000 * i:]
            assert cid == 500 + i
        assert all(r.file.closed for r in handler.regions)
        await raw.close()
        await listener.close()
    run(test)


def test_a_region_truncated_before_it_is_sent_closes_only_that_connection(tmp_path):
    async def test():
        path = _file(tmp_path)
        handler = RegionHandler(path, length=len(DATA))
        listener = await Listener.start(HOST, 0, handler)
        other = await Connection.open(HOST, listener.port)
        raw = await RawClient.open(listener.port)
        os.truncate(path, 1000)  # the region says 1 MiB; the file now holds 1000 bytes
        await raw.request(fetch(0), 12, correlation_id=7)
        assert await asyncio.wait_for(raw.closed_by_peer(), 10)
        assert all(r.file.closed for r in handler.regions)
        # the listener goes on: another connection is answered (a region within the file)
        handler.length = 500
        assert _records(await other.send(fetch(100))) == DATA[100:600]
        await raw.close()
        await other.close()
        await listener.close()
    run(test)


def test_regions_of_a_connection_that_goes_away_mid_send_are_closed(tmp_path):
    """A client that asks for many large answers, reads a little of the first and
    disconnects: every region is closed (sent, being sent, or still queued)."""
    async def test():
        handler = RegionHandler(_file(tmp_path, DATA * 8))
        listener = await Listener.start(HOST, 0, handler)
        raw = await open_raw(listener.port, rcvbuf=4096)
        for i in range(4):
            await raw.request(fetch(i), 12, correlation_id=i)
        await wait_until(lambda: len(handler.regions) >= 1)
        await raw.reader.readexactly(1000)
        await raw.close()
        await wait_until(lambda: listener.connection_count == 0)
        await wait_until(lambda: all(r.file.closed for r in handler.regions))
        await listener.close()
    run(test)


def test_a_frame_with_regions_counts_them_in_its_size(tmp_path):
    """`encode_response` of a body with a region: the parts joined with the region's bytes
    are the frame of the same body with those bytes inline."""
    path = _file(tmp_path)
    region = FileRegion(open(path, "rb", buffering=0), 10, 5000)
    try:
        for version in (4, 11, 12, 16):
            parts = framing.encode_response(fetch_response(region), version, 99)
            assert [type(p) for p in parts] == [bytes, FileRegion, bytes]
            inline = framing.encode_response(fetch_response(DATA[10:5010]), version, 99)
            assert parts[0] + DATA[10:5010] + parts[2] == inline
        plain = framing.encode_response(fetch_response(b"abc"), 12, 1)
        assert isinstance(plain, bytes)
    finally:
        region.close()
