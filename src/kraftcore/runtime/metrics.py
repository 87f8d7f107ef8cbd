"""A node's Prometheus endpoint: `metrics.prometheus.listener=HOST:PORT` in its properties
(unset: none, the default) serves `/metrics` in Prometheus' text format, with
`prometheus_client` (its HTTP server runs in a thread of its own).

Names follow Kafka's metrics as Prometheus' JMX exporter spells them, where Kafka has the
metric (`kafka.controller:type=KafkaController,name=ActiveControllerCount` is
`kafka_controller_kafkacontroller_activecontrollercount`; the `raft-metrics` group is
`kafka_server_raft_metrics_*`); Kafka's per-second rates are counters here (`_total`),
from which Prometheus computes any rate:

Raft (every node): `current_state{state=...}` (1 for the node's state: leader, candidate,
prospective, voted, follower, unattached, resigned; observer for a broker following the
log), `current_leader`, `current_vote`, `current_epoch` (-1 when none), `high_watermark`,
`log_end_offset`, `log_end_epoch`, `election_latency_avg` / `_max` (ms without a leader, per
election this node saw), `commit_latency_avg` / `_max` (ms from a leader's append to its
commit), `append_records_total` (as leader), `fetch_records_total` (from a leader).

Controller (controller nodes; the counts only on the active one, 0 elsewhere, as in
Kafka): `activecontrollercount`, `globaltopiccount`, `globalpartitioncount`,
`offlinepartitionscount` (no leader that is an active broker), `fencedbrokercount`,
`activebrokercount`; `kafka_controller_controllereventmanager_eventqueuetimems` (a
histogram, seconds an event waited in the queue) and `..._eventqueueprocessingtimems`
(seconds per turn of the queue).

Broker (broker nodes): `kafka_server_replicamanager_underreplicatedpartitions`,
`..._isrshrinks_total` / `_isrexpands_total` (the ISR changes it asked for),
`kafka_server_brokertopicmetrics_messagesin_total`, `_bytesin_total`, `_bytesout_total`
(to consumers), `_replicationbytesout_total` (to follower brokers).

Requests (both listeners): `kafka_network_requestmetrics_totaltimems{request=API}`, a
histogram in seconds from the request taken up to its answer ready; its `_count` is the
number of requests (Kafka's RequestsPerSec).

And the process's own (`process_resident_memory_bytes`, CPU seconds, open descriptors),
from `prometheus_client`'s process collector.

The values are taken in the node's event loop at each scrape (the server thread asks the
loop and waits at most `SCRAPE_WAIT_S`), so a scrape never sees a half-made change; when the
loop does not answer in time the scrape gets the last values taken, and
`kraftcore_metrics_stale` says so.
"""

import asyncio
import logging
import threading
import time

from prometheus_client import (CollectorRegistry, Histogram, ProcessCollector,
                               start_http_server)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kraftcore.protocol.apis import API_BY_KEY

__all__ = ["NodeMetrics", "SCRAPE_WAIT_S"]

log = logging.getLogger("kraftcore.runtime")

SCRAPE_WAIT_S = 2.0
RAFT = "kafka_server_raft_metrics_"
CONTROLLER = "kafka_controller_kafkacontroller_"
REPLICAS = "kafka_server_replicamanager_"
TOPICS = "kafka_server_brokertopicmetrics_"
STATES = ("leader", "candidate", "prospective", "voted", "follower", "unattached",
          "resigned", "observer")


class NodeMetrics:
    """The metrics of `node` (a `kraftcore.runtime.node.Node`); `start(host, port)` opens
    the endpoint and returns the port it is bound to."""

    def __init__(self, node):
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        self._loop = None
        self._server = None
        self._last = []
        self._lock = threading.Lock()
        self.requests = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request taken up to its answer ready, by API (seconds).",
            ["request"], registry=self.registry)
        self.controller_turns = self.controller_waits = None
        if node.config.is_controller:
            self.controller_turns = Histogram(
                "kafka_controller_controllereventmanager_eventqueueprocessingtimems",
                "Time of each turn of the controller's event queue (seconds).",
                registry=self.registry)
            self.controller_waits = Histogram(
                "kafka_controller_controllereventmanager_eventqueuetimems",
                "Time an event waited in the controller's queue before it ran (seconds).",
                registry=self.registry)
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, ...
        self.registry.register(_Collector(self))

    def start(self, host, port):
        self._loop = asyncio.get_running_loop()
        self._server, thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._server.server_port
        log.info("node %s: Prometheus metrics on http://%s:%s/metrics", self.node.node_id,
                 host, bound)
        return bound

    def close(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ requests

    def wrap(self, handler):
        """`handler` (a listener's) with each request counted and timed by API."""
        observe = self.requests

        def timed(request, peer):
            started = time.monotonic()
            name = _api_name(request.api_key)
            result = handler(request, peer)
            if asyncio.isfuture(result) or asyncio.iscoroutine(result):
                future = asyncio.ensure_future(result)
                future.add_done_callback(
                    lambda _: observe.labels(name).observe(time.monotonic() - started))
                return future
            observe.labels(name).observe(time.monotonic() - started)
            return result

        return timed

    # ------------------------------------------------------------------ scraping

    def _families(self):
        """[(kind, name, help, [(labels, value)])], read in the event loop."""
        node = self.node
        out = []

        def gauge(name, doc, value, labels=None):
            out.append(("gauge", name, doc, [(labels or {}, value)]))

        def counter(name, doc, value):
            out.append(("counter", name, doc, [({}, value)]))

        core = node.driver.core
        state = core.quorum.state
        role = state.name
        if not core.quorum.is_voter and role in ("follower", "unattached"):
            role = "observer"
        out.append(("gauge", RAFT + "current_state", "The node's Raft state (1 for the one "
                    "it is in).", [({"state": s}, 1 if s == role else 0) for s in STATES]))
        leader = core.leader_id
        gauge(RAFT + "current_leader", "The leader's id (-1: none known).",
              -1 if leader is None else leader)
        gauge(RAFT + "current_vote", "The voter this node voted for in its epoch (-1: none).",
              -1 if state.voted_id is None else state.voted_id)
        gauge(RAFT + "current_epoch", "The node's epoch.", state.epoch)
        gauge(RAFT + "high_watermark", "The high watermark (-1: unknown).",
              -1 if core.high_watermark is None else core.high_watermark)
        gauge(RAFT + "log_end_offset", "The metadata log's end offset.", core.log_end_offset)
        gauge(RAFT + "log_end_epoch", "The epoch of the last record in the metadata log.",
              node.storage.last_fetched_epoch())
        elections = [ms for ms, _ in node.raft_events.elections]
        gauge(RAFT + "election_latency_avg", "Average time without a leader per election "
              "(ms; NaN before the first).",
              sum(elections) / len(elections) if elections else float("nan"))
        gauge(RAFT + "election_latency_max", "Longest time without a leader in one election "
              "(ms; NaN before the first).", max(elections) if elections else float("nan"))
        driver = node.driver
        count = driver.commit_latency_count
        gauge(RAFT + "commit_latency_avg", "Average time from a leader's append to its "
              "commit (ms; NaN before the first).",
              driver.commit_latency_sum_ms / count if count else float("nan"))
        gauge(RAFT + "commit_latency_max", "Longest time from a leader's append to its "
              "commit (ms; NaN before the first).",
              driver.commit_latency_max_ms if count else float("nan"))
        counter(RAFT + "append_records", "Records appended to the metadata log as leader.",
                node.storage.records_appended)
        counter(RAFT + "fetch_records", "Records fetched from the leader into the metadata "
                "log.", node.storage.records_fetched)
        if node.controller is not None:
            self._controller(node.controller.controller, gauge)
        if node.broker is not None:
            self._broker(node.broker, gauge, counter)
        return out

    @staticmethod
    def _controller(controller, gauge):
        active = controller.active
        image = controller.image
        topics = partitions = offline = fenced = alive = 0
        if active:
            topics = len(image.topics)
            for topic in image.topics.values():
                for p in topic.partitions.values():
                    partitions += 1
                    offline += not image.broker_is_active(p.leader)
            for broker in image.brokers.values():
                fenced += bool(broker.fenced)
                alive += not broker.fenced
        gauge(CONTROLLER + "activecontrollercount", "1 on the active controller.", int(active))
        gauge(CONTROLLER + "globaltopiccount", "Topics (active controller).", topics)
        gauge(CONTROLLER + "globalpartitioncount", "Partitions (active controller).",
              partitions)
        gauge(CONTROLLER + "offlinepartitionscount", "Partitions without a leader that is an "
              "active broker (active controller).", offline)
        gauge(CONTROLLER + "fencedbrokercount", "Fenced brokers (active controller).", fenced)
        gauge(CONTROLLER + "activebrokercount", "Unfenced brokers (active controller).", alive)

    @staticmethod
    def _broker(broker, gauge, counter):
        replicas = broker.replicas
        partitions = list(replicas.partitions.values())
        gauge(REPLICAS + "underreplicatedpartitions", "Partitions led here with an ISR "
              "smaller than their replicas.", replicas.under_replicated())
        counter(REPLICAS + "isrshrinks", "ISR shrinks this broker asked for.",
                replicas.isr_shrinks)
        counter(REPLICAS + "isrexpands", "ISR expands this broker asked for.",
                replicas.isr_expands)
        counter(TOPICS + "messagesin", "Records appended from producers.",
                sum(p.messages_in for p in partitions))
        counter(TOPICS + "bytesin", "Bytes of record batches appended from producers.",
                sum(p.bytes_in for p in partitions))
        counter(TOPICS + "bytesout", "Bytes of records answered to consumers.",
                replicas.bytes_out)
        counter(TOPICS + "replicationbytesout", "Bytes of records answered to follower "
                "brokers.", replicas.replication_bytes_out)

    def collect(self):
        """The families for a scrape (called in the server's thread)."""
        stale = 0
        loop = self._loop
        try:
            future = asyncio.run_coroutine_threadsafe(_in_loop(self._families), loop)
            families = future.result(SCRAPE_WAIT_S)
        except Exception:  # noqa: BLE001 - the loop is busy, stopping or gone
            stale = 1
            with self._lock:
                families = self._last
        else:
            with self._lock:
                self._last = families
        for kind, name, doc, samples in families:
            labels = sorted({k for labels, _ in samples for k in labels})
            family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                name, doc, labels=labels)
            for sample_labels, value in samples:
                family.add_metric([sample_labels[k] for k in labels], value)
            yield family
        yield GaugeMetricFamily("kraftcore_metrics_stale", "1 when the node's event loop did "
                                "not answer this scrape in time (the values are older).",
                                value=stale)


async def _in_loop(read):
    return read()


def _api_name(api_key):
    api = API_BY_KEY.get(api_key)
    return api.name if api is not None else str(api_key)


class _Collector:
    def __init__(self, metrics):
        self.metrics = metrics

    def collect(self):
        if self.metrics._loop is None:
            return iter(())
        return self.metrics.collect()

    def describe(self):
        return []
