"""Helpers of the network tests: run a coroutine with a time bound and check nothing is
left behind, raw sockets that speak (or break) the framing, and handlers that answer on cue.

Everything listens on 127.0.0.1 with port 0. No test asserts on a duration: the bound in
`run` only stops a hung test.
"""

import asyncio
import socket
import struct

from kraftcore.protocol import framing
from kraftcore.protocol.messages import (FetchRequest, FetchResponse, VoteRequest,
                                         VoteResponse)

HOST = "127.0.0.1"
TEST_TIMEOUT_S = 60  # a hung test fails instead of hanging the suite

_SIZE = struct.Struct(">i")


def run(test, timeout_s=TEST_TIMEOUT_S):
    """Run `test()` (a coroutine function) in a fresh event loop and fail if it leaves a
    task behind: every listener, connection and pool must be closed by the test."""
    async def main():
        result = await asyncio.wait_for(test(), timeout_s)
        for _ in range(3):  # let callbacks scheduled by the closes run
            await asyncio.sleep(0)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not left, f"tasks left behind: {left}"
        return result
    return asyncio.run(main())


async def wait_until(predicate, step_s=0.001):
    """Poll `predicate()` until it is true (bounded by `run`'s timeout)."""
    while not predicate():
        await asyncio.sleep(step_s)


# ------------------------------------------------------------------------------ messages


def vote(epoch, candidate=1):
    """A Vote request whose epoch identifies it (the handlers below echo it)."""
    part = VoteRequest.PartitionData(partition_index=0, replica_epoch=epoch,
                                     replica_id=candidate, last_offset_epoch=epoch - 1,
                                     last_offset=100 + epoch)
    return VoteRequest(cluster_id="test-cluster", voter_id=2, topics=[
        VoteRequest.TopicData(topic_name="__cluster_metadata", partitions=[part])])


def epoch_of(request_body):
    return request_body.topics[0].partitions[0].replica_epoch


def vote_response(epoch, granted=True):
    part = VoteResponse.PartitionData(partition_index=0, error_code=0, leader_id=-1,
                                      leader_epoch=epoch, vote_granted=granted)
    return VoteResponse(error_code=0, topics=[
        VoteResponse.TopicData(topic_name="__cluster_metadata", partitions=[part])])


def answered_epoch(response):
    return response.topics[0].partitions[0].leader_epoch


def fetch(offset, topic="__cluster_metadata"):
    part = FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                       partition_max_bytes=1 << 20)
    return FetchRequest(max_wait_ms=500, min_bytes=1, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[part])])


def fetch_response(records, high_watermark=42):
    part = FetchResponse.PartitionData(partition_index=0, error_code=0,
                                       high_watermark=high_watermark, records=records)
    return FetchResponse(responses=[
        FetchResponse.FetchableTopicResponse(topic="__cluster_metadata", partitions=[part])])


class Gate:
    """A handler for Vote requests that answers only when told: `calls` counts requests
    received, `release(epoch)` / `release_all()` let them answer (echoing the epoch)."""

    def __init__(self):
        self.calls = []
        self.events = {}

    def event(self, epoch):
        return self.events.setdefault(epoch, asyncio.Event())

    async def handler(self, request, peer):
        epoch = epoch_of(request.body)
        self.calls.append(epoch)
        await self.event(epoch).wait()
        return vote_response(epoch)

    def release(self, epoch):
        self.event(epoch).set()

    def release_all(self):
        for epoch in self.calls:
            self.release(epoch)


# ------------------------------------------------------------------------------ raw sockets


class RawClient:
    """A client that writes whatever bytes it is given and reads raw frames."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port):
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    async def write(self, data):
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, body, version, correlation_id, client_id="raw"):
        await self.write(framing.encode_request(body, version, correlation_id, client_id))

    async def read_frame(self):
        (size,) = _SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def read_response(self, api_key, version):
        return framing.decode_response(await self.read_frame(), api_key, version)

    async def closed_by_peer(self):
        """True once the peer closed the connection (everything before EOF is skipped)."""
        try:
            while await self.reader.read(65536):
                pass
        except ConnectionError:  # reset or aborted: closed as well
            pass
        return True

    async def close(self):
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionResetError, BrokenPipeError):
            pass


async def open_raw(port, source=HOST, rcvbuf=None):
    """A `RawClient` connected from address `source` (any of 127.0.0.0/8, which Linux routes
    to lo: "another client host"); `rcvbuf` shrinks its receive buffer (a client that does
    not read then stops the listener's writes sooner)."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    except BaseException:
        sock.close()
        raise
    reader, writer = await asyncio.open_connection(sock=sock)
    return RawClient(reader, writer)


def request_frame_with(api_key, version, correlation_id, body_bytes=b"", client_id=b"\x00\x03raw"):
    """A request frame built by hand: header v1 fields and arbitrary body bytes."""
    payload = struct.pack(">hhi", api_key, version, correlation_id) + client_id + body_bytes
    return _SIZE.pack(len(payload)) + payload


class Seen:
    """A handler that answers Vote requests (echoing their epoch) and records the `Peer`
    of each request: who the listener says the client is."""

    def __init__(self):
        self.peers = []

    def __call__(self, request, peer):
        self.peers.append(peer)
        return vote_response(epoch_of(request.body))
