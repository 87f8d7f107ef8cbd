"""Network benchmark: request/response round trips per second over loopback (127.0.0.1)
between a kraftcore `Listener` in a separate server process and a client in this process.

Workloads (one round = REQUESTS round trips on one connection; records/s = round trips/s):

* `net-apiversions-*`: ApiVersions v2, answered by the listener itself (a ~140-byte
  response listing every API kraftcore serves): what one round trip of the transport costs.
* `net-fetch-16KiB-*`: Fetch v11 answered with one partition of 16 KiB of records: a
  follower's Fetch with a realistic payload.

Each workload runs `serial` (the next request leaves after the previous response came
back: the latency path) and `pipelined-64` (64 requests in flight: the throughput path).
Clients, all on the same server and connection settings:

* `kraftcore-c`: `Connection.send` awaited (pipelined: batches of 64 gathered).
* `kraftcore-c-send-nowait`: `Connection.send_nowait` keeping a window of 64 in flight with
  callbacks and no task per request, the way the Raft driver sends (pipelined only).
* `aiokafka`: aiokafka's `AIOKafkaConnection` (`aiokafka.conn.create_conn`), which
  negotiates versions with the kraftcore listener and then picks the same versions.

The server process is `python bench/test_bench_net.py serve`. Nothing asserts on a timing.
"""

import asyncio
import os
import subprocess
import sys

import pytest

REQUESTS = 2048  # a multiple of WINDOW
WINDOW = 64
ROUNDS = 7
RECORDS_BYTES = 16 * 1024
API_VERSIONS_VERSION = 2  # the highest aiokafka implements
FETCH_VERSION = 11  # likewise
TOPIC = "__cluster_metadata"
HOST = "127.0.0.1"
_STATE = {}


# ------------------------------------------------------------------------------ server


def serve():
    """The server process: a Listener answering Fetch with 16 KiB of records; prints its
    port, then runs until its stdin closes."""
    from kraftcore.net import Listener
    from kraftcore.protocol.messages import FetchResponse

    records = bytes(range(256)) * (RECORDS_BYTES // 256)

    def handler(request, peer):
        part = FetchResponse.PartitionData(partition_index=0, error_code=0,
                                           high_watermark=1000, records=records)
        return FetchResponse(responses=[
            FetchResponse.FetchableTopicResponse(topic=TOPIC, partitions=[part])])

    async def main():
        listener = await Listener.start(HOST, 0, handler, name="bench-server")
        print(listener.port, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        await listener.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def server_port():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, __file__, "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the benchmark server did not start (printed {line!r})")
        yield int(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


# ------------------------------------------------------------------------------ clients


def _kraftcore_requests():
    from kraftcore.protocol.messages import ApiVersionsRequest, FetchRequest

    fetch = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                        partition_max_bytes=1 << 20)])])
    return {
        "apiversions": (ApiVersionsRequest(), API_VERSIONS_VERSION),
        "fetch": (fetch, FETCH_VERSION),
    }


def _check_kraftcore(workload, response):
    if workload == "fetch":
        assert len(response.responses[0].partitions[0].records) == RECORDS_BYTES
    else:
        assert response.error_code == 0 and response.api_keys


class KraftcoreClient:
    def __init__(self, loop, port):
        from kraftcore.net import Connection

        self.loop = loop
        self.conn = loop.run_until_complete(Connection.open(HOST, port,
                                                            inflight_max=WINDOW))
        self.requests = _kraftcore_requests()

    def serial(self, workload):
        body, version = self.requests[workload]
        send = self.conn.send

        async def run():
            for _ in range(REQUESTS):
                response = await send(body, version)
            return response
        return self.loop.run_until_complete(run())

    def pipelined(self, workload):
        body, version = self.requests[workload]
        send = self.conn.send

        async def run():
            for _ in range(REQUESTS // WINDOW):
                responses = await asyncio.gather(*[send(body, version) for _ in range(WINDOW)])
            return responses[-1]
        return self.loop.run_until_complete(run())

    def pipelined_nowait(self, workload):
        body, version = self.requests[workload]
        conn = self.conn
        done = self.loop.create_future()
        state = {"sent": 0, "answered": 0, "last": None}

        def on_response(response, error):
            if error is not None:
                if not done.done():
                    done.set_exception(error)
                return
            state["answered"] += 1
            state["last"] = response
            if state["sent"] < REQUESTS:
                state["sent"] += 1
                conn.send_nowait(body, version, on_response)
            elif state["answered"] == REQUESTS and not done.done():
                done.set_result(response)

        for _ in range(WINDOW):
            state["sent"] += 1
            conn.send_nowait(body, version, on_response)
        return self.loop.run_until_complete(done)

    def close(self):
        self.loop.run_until_complete(self.conn.close())


class AiokafkaClient:
    def __init__(self, loop, port):
        from aiokafka.conn import create_conn
        from aiokafka.protocol.admin import ApiVersionRequest
        from aiokafka.protocol.fetch import FetchRequest

        self.loop = loop
        self.conn = loop.run_until_complete(create_conn(HOST, port))
        self.requests = {
            "apiversions": ApiVersionRequest(),
            "fetch": FetchRequest(max_wait_time=0, min_bytes=1, max_bytes=1 << 20,
                                  isolation_level=0, topics=[(TOPIC, [(0, 0, 1 << 20)])]),
        }
        versions = {key: type(self.requests[key].prepare(self.conn._versions)).API_VERSION
                    for key in self.requests}
        assert versions == {"apiversions": API_VERSIONS_VERSION, "fetch": FETCH_VERSION}, \
            versions

    def serial(self, workload):
        request = self.requests[workload]
        send = self.conn.send

        async def run():
            for _ in range(REQUESTS):
                response = await send(request)
            return response
        return self.loop.run_until_complete(run())

    def pipelined(self, workload):
        request = self.requests[workload]
        send = self.conn.send

        async def run():
            for _ in range(REQUESTS // WINDOW):
                responses = await asyncio.gather(*[send(request) for _ in range(WINDOW)])
            return responses[-1]
        return self.loop.run_until_complete(run())

    def close(self):
        self.loop.run_until_complete(self.conn.close())


def _check_aiokafka(workload, response):
    if workload == "fetch":
        assert len(response.topics[0][1][0][-1]) == RECORDS_BYTES
    else:
        assert response.error_code == 0 and response.api_versions


# ------------------------------------------------------------------------------ benchmarks

CASES = [  # (workload, mode, peer)
    ("apiversions", "serial", "kraftcore-c"),
    ("apiversions", "serial", "aiokafka"),
    ("apiversions", "pipelined-64", "kraftcore-c"),
    ("apiversions", "pipelined-64", "kraftcore-c-send-nowait"),
    ("apiversions", "pipelined-64", "aiokafka"),
    ("fetch", "serial", "kraftcore-c"),
    ("fetch", "serial", "aiokafka"),
    ("fetch", "pipelined-64", "kraftcore-c"),
    ("fetch", "pipelined-64", "kraftcore-c-send-nowait"),
    ("fetch", "pipelined-64", "aiokafka"),
]


def _group(workload, mode):
    name = "apiversions" if workload == "apiversions" else "fetch-16KiB"
    return f"net-{name}-{mode}"


@pytest.mark.parametrize("workload,mode,peer", CASES,
                         ids=[f"{w}-{m}-{p}" for w, m, p in CASES])
def test_round_trips(benchmark, loop, server_port, workload, mode, peer):
    if peer == "aiokafka":
        pytest.importorskip("aiokafka")
        client = AiokafkaClient(loop, server_port)
        check = _check_aiokafka
    else:
        client = KraftcoreClient(loop, server_port)
        check = _check_kraftcore
    if mode == "serial":
        run = client.serial
    elif peer == "kraftcore-c-send-nowait":
        run = client.pipelined_nowait
    else:
        run = client.pipelined
    try:
        benchmark.group = _group(workload, mode)
        response = benchmark.pedantic(run, args=(workload,), rounds=ROUNDS, warmup_rounds=1)
        check(workload, response)
    finally:
        client.close()
    benchmark.extra_info.update(peer=peer, records=REQUESTS)
    _STATE[(benchmark.group, peer)] = REQUESTS / benchmark.stats.stats.median


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    if not _STATE:
        return
    tr.write_line("")
    for (group, peer), rate in _STATE.items():
        tr.write_line(f"{group:34} {peer:26} {rate / 1e3:8.1f} k round trips/s "
                      f"({1e6 / rate:7.1f} us each)")


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
