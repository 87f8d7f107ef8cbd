"""Requests and responses through a real listener and client connection on 127.0.0.1:
several APIs at several versions, the built-in ApiVersions, version negotiation."""

import asyncio

import pytest

from kraftcore.errors import UnsupportedVersionError
from kraftcore.net import Connection, Listener
from kraftcore.protocol import apis, framing
from kraftcore.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeQuorumRequest,
    FetchRequest,
    VoteRequest,
)

from .helpers import (HOST, RawClient, answered_epoch, epoch_of, fetch, fetch_response, run,
                      vote, vote_response)

RECORDS_16K = bytes(range(256)) * 64


class Recorder:
    """A handler that answers Vote, Fetch, CreateTopics and BrokerHeartbeat from what the
    request carried, and records every request it saw with its peer."""

    def __init__(self):
        self.seen = []

    def __call__(self, request, peer):
        self.seen.append((request, peer))
        body = request.body
        if isinstance(body, VoteRequest):
            return vote_response(epoch_of(body))
        if isinstance(body, FetchRequest):
            offset = body.topics[0].partitions[0].fetch_offset
            return fetch_response(RECORDS_16K, high_watermark=offset + 1)
        if isinstance(body, CreateTopicsRequest):
            return self._created(body)
        if isinstance(body, BrokerHeartbeatRequest):
            return BrokerHeartbeatResponse(error_code=0, is_caught_up=True,
                                           is_fenced=body.broker_epoch < 0)
        raise AssertionError(f"unexpected {body!r}")

    async def _created(self, body):
        await asyncio.sleep(0)  # an async answer, to cover awaitables
        cls = CreateTopicsResponse
        return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=0,
                                                    num_partitions=t.num_partitions)
                           for t in body.topics])


@pytest.mark.smoke
def test_several_apis_round_trip_at_several_versions():
    async def test():
        handler = Recorder()
        listener = await Listener.start(HOST, 0, handler, name="node-1")
        conn = await Connection.open(HOST, listener.port, client_id="tester")
        try:
            for version in (0, 1, 2):
                response = await conn.send(vote(7 + version), version)
                assert isinstance(response, type(vote_response(0)))
                assert answered_epoch(response) == 7 + version
                assert handler.seen[-1][0].api_version == version

            for version in (4, 11, 12):  # classic and flexible headers and bodies
                response = await conn.send(fetch(1000 + version), version)
                part = response.responses[0].partitions[0]
                assert part.high_watermark == 1001 + version
                assert bytes(part.records) == RECORDS_16K

            topics = [CreateTopicsRequest.CreatableTopic(name=f"t{i}", num_partitions=i + 1,
                                                         replication_factor=3)
                      for i in range(3)]
            for version in (4, 7):
                response = await conn.send(CreateTopicsRequest(topics=topics), version)
                assert [(t.name, t.error_code) for t in response.topics] == [
                    ("t0", 0), ("t1", 0), ("t2", 0)]
                if version >= 5:
                    assert [t.num_partitions for t in response.topics] == [1, 2, 3]

            response = await conn.send(BrokerHeartbeatRequest(broker_id=4, broker_epoch=-1))
            assert response.is_caught_up and response.is_fenced

            request, peer = handler.seen[-1]
            assert request.client_id == "tester"
            assert request.api_version == BrokerHeartbeatRequest.valid_versions[1]
            assert peer[0] == HOST and peer[1] != listener.port
            correlation_ids = [r.correlation_id for r, _ in handler.seen]
            assert len(set(correlation_ids)) == len(correlation_ids)
        finally:
            await conn.close()
            await listener.close()
    run(test)


def test_version_defaults_to_the_highest_the_message_knows():
    async def test():
        handler = Recorder()
        listener = await Listener.start(HOST, 0, handler)
        conn = await Connection.open(HOST, listener.port)
        await conn.send(fetch(1))
        await conn.send(vote(1))
        assert [r.api_version for r, _ in handler.seen] == [
            FetchRequest.valid_versions[1], VoteRequest.valid_versions[1]]
        await conn.close()
        await listener.close()
    run(test)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_is_answered_by_the_listener_at_every_version(version):
    async def test():
        def handler(request, peer):
            raise AssertionError("ApiVersions must not reach the handler")
        listener = await Listener.start(HOST, 0, handler, api_keys=[52, 1])
        conn = await Connection.open(HOST, listener.port)
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        response = await conn.send(body, version)
        assert response.error_code == 0
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
            (1, *apis.api(1).valid_versions), (18, *apis.api(18).valid_versions),
            (52, *apis.api(52).valid_versions)]
        await conn.close()
        await listener.close()
    run(test)


def test_unknown_api_versions_version_gets_a_v0_answer_and_the_connection_stays_open():
    async def test():
        listener = await Listener.start(HOST, 0, Recorder(), api_keys=[52])
        raw = await RawClient.open(listener.port)
        # ApiVersions v9 with a body no version has: the listener must not parse it.
        frame = framing.RequestHeader(request_api_key=18, request_api_version=9,
                                      correlation_id=77, client_id="raw").encode(1)
        await raw.write(framing.frame(frame + b"\xde\xad\xbe\xef"))
        cid, body = await raw.read_response(18, 0)
        assert cid == 77 and body.error_code == framing.UNSUPPORTED_VERSION
        assert (18, 0, 4) in [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]
        assert (52, 0, 2) in [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]
        # The same connection keeps working.
        await raw.request(ApiVersionsRequest(), 0, 78)
        cid, body = await raw.read_response(18, 0)
        assert cid == 78 and body.error_code == 0
        await raw.close()
        await listener.close()
    run(test)


def test_handler_can_take_api_versions_itself():
    async def test():
        def handler(request, peer):
            return ApiVersionsResponse(error_code=0, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=52, min_version=0, max_version=1)])
        listener = await Listener.start(HOST, 0, handler, handle_api_versions=False)
        conn = await Connection.open(HOST, listener.port, negotiate_versions=True)
        assert conn.api_versions == {52: (0, 1)}
        await conn.close()
        await listener.close()
    run(test)


def test_negotiated_versions_pick_the_common_maximum_and_refuse_what_is_not_served():
    async def test():
        handler = Recorder()
        listener = await Listener.start(HOST, 0, handler, api_keys=[52, 1])
        conn = await Connection.open(HOST, listener.port, negotiate_versions=True)
        assert set(conn.api_versions) == {1, 18, 52}
        assert conn.choose_version(VoteRequest) == 2
        with pytest.raises(UnsupportedVersionError, match="no version in common"):
            await conn.send(DescribeQuorumRequest())
        assert answered_epoch(await conn.send(vote(3))) == 3  # still usable
        assert handler.seen[-1][0].api_version == 2
        await conn.close()
        await listener.close()
    run(test)


def test_negotiation_falls_back_when_the_peer_knows_only_older_api_versions():
    """A peer that knows ApiVersions 0-2 answers v4 with UNSUPPORTED_VERSION in v0; the
    client retries at v2 (min(4 - 1, 2)) and adopts the ranges it then gets."""
    async def test():
        seen_versions = []

        async def old_peer(reader, writer):
            decoder = framing.FrameDecoder()
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    key, version, cid = framing.peek_request(frame)
                    seen_versions.append(version)
                    if version > 2:
                        writer.write(framing.unsupported_api_versions_response(
                            cid, [(18, 0, 2), (52, 0, 1)]))
                    else:
                        body = ApiVersionsResponse(error_code=0, api_keys=[
                            ApiVersionsResponse.ApiVersion(api_key=k, min_version=0,
                                                           max_version=m)
                            for k, m in ((18, 2), (52, 1))])
                        writer.write(framing.encode_response(body, version, cid))
            writer.close()

        server = await asyncio.start_server(old_peer, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        conn = await Connection.open(HOST, port, negotiate_versions=True)
        assert seen_versions == [4, 2]
        assert conn.api_versions == {18: (0, 2), 52: (0, 1)}
        assert conn.choose_version(VoteRequest) == 1
        await conn.close()
        server.close()
        await server.wait_closed()
    run(test)


def test_port_zero_binds_a_free_port_and_close_frees_it():
    async def test():
        listener = await Listener.start(HOST, 0, Recorder())
        port = listener.port
        assert port > 0 and listener.address == (HOST, port)
        await listener.close()
        await listener.close()  # idempotent
        again = await Listener.start(HOST, port, Recorder())  # the port is free again
        assert again.port == port
        await again.close()
    run(test)


def test_a_port_in_use_is_a_listen_error():
    from kraftcore.errors import ListenError

    async def test():
        listener = await Listener.start(HOST, 0, Recorder(), name="node-2")
        with pytest.raises(ListenError, match=f"node-2: cannot listen on {HOST}:"
                                              f"{listener.port}") as info:
            await Listener.start(HOST, listener.port, Recorder(), name="node-2")
        assert isinstance(info.value, OSError) and info.value.__cause__.errno
        await listener.close()
    run(test)
