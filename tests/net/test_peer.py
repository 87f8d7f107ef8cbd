"""A peer's client against the kraftcore listener: aiokafka's connection negotiates
versions through the built-in ApiVersions (it starts at v0) and then fetches."""

from kraftcore.net import Listener

from .helpers import HOST, fetch_response, run

RECORDS = bytes(range(256)) * 8


def test_aiokafka_connection_negotiates_and_fetches():
    from aiokafka import conn as conn_module
    from aiokafka.protocol.fetch import FetchRequest

    async def test():
        seen = []

        def handler(request, peer):
            seen.append((request.api_key, request.api_version, request.client_id))
            return fetch_response(RECORDS, high_watermark=77)

        listener = await Listener.start(HOST, 0, handler, api_keys=[1])
        conn = await conn_module.create_conn(HOST, listener.port, client_id="peer")
        try:
            assert conn._versions == {1: (0, 18), 18: (0, 4)}
            request = FetchRequest(max_wait_time=0, min_bytes=1, max_bytes=1 << 20,
                                   isolation_level=0,
                                   topics=[("__cluster_metadata", [(0, 0, 1 << 20)])])
            response = await conn.send(request)
            topic, partitions = response.topics[0]
            assert topic == "__cluster_metadata"
            assert partitions[0][0] == 0 and partitions[0][2] == 77  # index, high watermark
            assert bytes(partitions[0][-1]) == RECORDS
            assert seen == [(1, 11, "peer")]  # aiokafka's highest Fetch within 0-18
        finally:
            await conn.close()  # returns the future of the socket's end
            await listener.close()
    run(test)
