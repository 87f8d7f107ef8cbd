"""Brokers as the active controller sees them: registration, heartbeats, sessions, fencing
and controlled shutdown (kafka-facts §8.2, §8.3; Kafka's `ClusterControlManager` and
`BrokerHeartbeatManager`).

Durable state (registrations, fenced and controlled-shutdown flags) lives in the image and
changes only through records. Soft state — each broker's last contact, the metadata offset
it reported, the offset of its registration and of its controlled shutdown — lives here, on
the active controller only, and is not logged: after a failover the new active controller
starts every session afresh (`on_activate`).

Heartbeat transitions (current state -> next, §8.3):

  FENCED               wants shutdown                          -> SHUTDOWN_NOW
  FENCED               caught up (offset >= registration)      -> UNFENCED
  UNFENCED             wants fence (+ shutdown)                -> FENCED (SHUTDOWN_NOW)
  UNFENCED             wants shutdown, leads partitions        -> CONTROLLED_SHUTDOWN
  UNFENCED             wants shutdown, leads none              -> SHUTDOWN_NOW
  CONTROLLED_SHUTDOWN  leads none, every active broker has
                       replayed past the shutdown's records    -> SHUTDOWN_NOW

Fencing (session expired, asked for, or shutting down) removes the broker from every ISR and
elects new leaders for every partition it led, in one batch of records written by one event,
then marks it fenced. Unfencing marks it unfenced, then elects leaders for the leaderless
partitions it can lead. A session expires `session_timeout_ms` after the last contact; one
deferred event fences the stalest expired broker and runs again at once while more are
expired.
"""

from typing import NamedTuple

from kraftcore.errors import ControllerError
from kraftcore.metadata import records as R
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import HeartbeatResult, RegistrationResult

__all__ = ["ClusterControl", "ProducerIdsResult"]

_BRCR_LEVEL = R.METADATA_VERSION_LEVELS["3.3-IV2"]
_FENCE_TAG = "fence-stale-brokers"


_CONTROLLER_REGISTRATION_LEVEL = R.METADATA_VERSION_LEVELS["3.7-IV0"]


def _check_metadata_version(image, who, features):
    """Refuse a registration whose supported metadata.version range (from its
    `features`: name -> (min, max); None: no check) leaves out the cluster's."""
    level = image.metadata_version()
    if features is not None and level is not None:
        low, high = features.get("metadata.version", (1, 1))
        if not low <= level <= high:
            raise ControllerError(ErrorCode.UNSUPPORTED_VERSION,
                                  f"{who} supports metadata.version {low}-{high}; the "
                                  f"cluster runs {level}")


class ProducerIdsResult(NamedTuple):
    first_producer_id: int
    count: int


class _Session:
    __slots__ = ("last_contact_ms", "metadata_offset", "registration_offset",
                 "shutdown_offset")

    def __init__(self, now_ms, registration_offset):
        self.last_contact_ms = now_ms
        self.metadata_offset = -1
        self.registration_offset = registration_offset
        self.shutdown_offset = None


class ClusterControl:
    def __init__(self, controller):
        self.controller = controller
        self.config = controller.config
        self.sessions = {}  # broker id -> _Session (active controller only)
        self.fenced_by_timeout = 0

    # ------------------------------------------------------------------ activation

    def on_activate(self, now_ms):
        image = self.controller.working
        self.sessions = {b.broker_id: _Session(now_ms, b.broker_epoch)
                         for b in image.brokers.values()}
        self._schedule_expiry()

    def on_deactivate(self):
        self.sessions = {}
        self.controller.queue.cancel_deferred(_FENCE_TAG)

    def on_replayed(self, records, first_offset):
        """Our records were appended, `records[0]` at `first_offset`: note where each
        registration landed (a broker is caught up once it has replayed past it)."""
        for i, record in enumerate(records):
            if type(record) is R.RegisterBrokerRecord:
                session = self.sessions.get(record.broker_id)
                if session is not None:
                    session.registration_offset = first_offset + i

    # ------------------------------------------------------------------ helpers

    def _broker(self, image, broker_id, broker_epoch=None):
        broker = image.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                  f"broker {broker_id} is not registered; register it first")
        if broker_epoch is not None and broker.broker_epoch != broker_epoch:
            raise ControllerError(ErrorCode.STALE_BROKER_EPOCH,
                                  f"broker {broker_id} sent epoch {broker_epoch}; its "
                                  f"registration has epoch {broker.broker_epoch}; register "
                                  "again")
        return broker

    def _fence_records(self, image, broker, in_controlled_shutdown=False):
        """Remove `broker` from every ISR and leadership, then mark it fenced (or in
        controlled shutdown)."""
        records = self.controller.replication.remove_broker(image, broker.broker_id)
        level = image.metadata_version() or 1
        if in_controlled_shutdown:
            records.append(R.BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.broker_epoch,
                in_controlled_shutdown=1))
        elif not broker.fenced:
            if level >= _BRCR_LEVEL:
                records.append(R.BrokerRegistrationChangeRecord(
                    broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=1))
            else:
                records.append(R.FenceBrokerRecord(id=broker.broker_id,
                                                   epoch=broker.broker_epoch))
        return records

    def _unfence_records(self, image, broker):
        level = image.metadata_version() or 1
        if level >= _BRCR_LEVEL:
            record = R.BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=-1)
        else:
            record = R.UnfenceBrokerRecord(id=broker.broker_id, epoch=broker.broker_epoch)
        return [record] + self.controller.replication.elect_leaderless(image,
                                                                       broker.broker_id)

    def _session_alive(self, broker_id, now_ms):
        session = self.sessions.get(broker_id)
        return (session is not None
                and now_ms < session.last_contact_ms + self.config.session_timeout_ms)

    # ------------------------------------------------------------------ registration

    def register(self, image, now_ms, broker_id, incarnation_id, cluster_id, rack, listeners,
                 features, log_dirs):
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            raise ControllerError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                                  f"broker {broker_id} belongs to cluster {cluster_id!r}; "
                                  f"this is cluster {self.config.cluster_id!r}")
        if not 0 <= broker_id <= 0x7FFFFFFF:
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  f"broker id {broker_id} must be in [0, 2^31)")
        _check_metadata_version(image, f"broker {broker_id}", features)
        existing = image.brokers.get(broker_id)
        records = []
        if existing is not None and existing.incarnation_id == incarnation_id:
            epoch = existing.broker_epoch
            fenced, shutting = existing.fenced, existing.in_controlled_shutdown
        else:
            if existing is not None and self._session_alive(broker_id, now_ms):
                raise ControllerError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                                      f"broker {broker_id} is registered with incarnation "
                                      f"{existing.incarnation_id} and its session is live; "
                                      "retry after its session expires")
            epoch = self.controller.next_offset()
            fenced, shutting = True, False
        endpoints = [R.RegisterBrokerRecord.BrokerEndpoint(
            name=name, host=host, port=port, security_protocol=protocol)
            for name, host, port, protocol in listeners]
        supported = [R.RegisterBrokerRecord.BrokerFeature(
            name=name, min_supported_version=low, max_supported_version=high)
            for name, (low, high) in sorted((features or {}).items())]
        records.append(R.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=incarnation_id, broker_epoch=epoch,
            end_points=endpoints, features=supported, rack=rack, fenced=fenced,
            in_controlled_shutdown=shutting, log_dirs=list(log_dirs)))
        if existing is not None and existing.incarnation_id != incarnation_id:
            # A new incarnation is fenced: it may hold no ISR seat or leadership.
            records += self.controller.replication.remove_broker(image, broker_id)
        self.sessions[broker_id] = _Session(now_ms, epoch)
        self._schedule_expiry()
        return records, RegistrationResult(epoch)

    def register_controller(self, image, controller_id, incarnation_id, zk_migration_ready,
                            listeners, features):
        """A controller's registration (ControllerRegistration, KIP-919): its listeners
        and supported features as one RegisterControllerRecord, which replaces any earlier
        one of that id. Needs metadata.version 3.7-IV0 or later, as in Kafka."""
        if not 0 <= controller_id <= 0x7FFFFFFF:
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  f"controller id {controller_id} must be in [0, 2^31)")
        level = image.metadata_version()
        if level is None or level < _CONTROLLER_REGISTRATION_LEVEL:
            raise ControllerError(ErrorCode.UNSUPPORTED_VERSION,
                                  f"metadata.version {level} is too old for controller "
                                  "registrations (3.7-IV0 or later)")
        _check_metadata_version(image, f"controller {controller_id}", features)
        if zk_migration_ready:
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  f"controller {controller_id} is ready for a ZooKeeper "
                                  "migration; kraftcore does not support one")
        record = R.RegisterControllerRecord(
            controller_id=controller_id, incarnation_id=incarnation_id,
            zk_migration_ready=False,
            end_points=[R.RegisterControllerRecord.ControllerEndpoint(
                name=name, host=host, port=port, security_protocol=protocol)
                for name, host, port, protocol in listeners],
            features=[R.RegisterControllerRecord.ControllerFeature(
                name=name, min_supported_version=low, max_supported_version=high)
                for name, (low, high) in sorted((features or {}).items())])
        return [record], None

    def unregister(self, image, now_ms, broker_id):
        broker = self._broker(image, broker_id)
        records = self.controller.replication.remove_broker(image, broker_id)
        records.append(R.UnregisterBrokerRecord(broker_id=broker_id,
                                                broker_epoch=broker.broker_epoch))
        self.sessions.pop(broker_id, None)
        return records, None

    def allocate_producer_ids(self, image, broker_id, broker_epoch):
        self._broker(image, broker_id, broker_epoch)
        block = self.config.producer_id_block_size
        start = 0 if image.producer_ids is None else image.producer_ids.next_producer_id
        record = R.ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                     next_producer_id=start + block)
        return [record], ProducerIdsResult(start, block)

    # ------------------------------------------------------------------ heartbeats

    def heartbeat(self, image, now_ms, broker_id, broker_epoch, metadata_offset, want_fence,
                  want_shutdown):
        broker = self._broker(image, broker_id, broker_epoch)
        session = self.sessions.get(broker_id)
        if session is None:
            session = self.sessions[broker_id] = _Session(now_ms, broker.broker_epoch)
        session.last_contact_ms = now_ms
        session.metadata_offset = max(session.metadata_offset, metadata_offset)
        caught_up = session.metadata_offset >= session.registration_offset
        replication = self.controller.replication
        records = []
        fenced, shut_down = broker.fenced, False
        if broker.fenced:
            if want_shutdown:
                shut_down = True
            elif caught_up and not want_fence:
                records = self._unfence_records(image, broker)
                fenced = False
        elif broker.in_controlled_shutdown:
            if not replication.leads_any(broker_id) and self._shutdown_replayed(image, session):
                records = self._fence_records(image, broker)
                fenced = shut_down = True
        elif want_fence:
            records = self._fence_records(image, broker)
            fenced, shut_down = True, want_shutdown
        elif want_shutdown:
            if replication.leads_any(broker_id):
                records = self._fence_records(image, broker, in_controlled_shutdown=True)
                session.shutdown_offset = self.controller.next_offset() + len(records) - 1
            else:
                records = self._fence_records(image, broker)
                fenced = shut_down = True
        self._schedule_expiry()
        return records, HeartbeatResult(caught_up, fenced, shut_down)

    def _shutdown_replayed(self, image, session):
        """Every active broker has replayed the records that moved the shutting-down
        broker's leaderships away."""
        if session.shutdown_offset is None:
            return True  # the controller failed over: the records are committed by now
        offsets = [s.metadata_offset for b, s in self.sessions.items()
                   if image.broker_is_active(b)]
        return not offsets or min(offsets) >= session.shutdown_offset

    # ------------------------------------------------------------------ session expiry

    def _schedule_expiry(self):
        controller = self.controller
        image = controller.working
        deadlines = [s.last_contact_ms for b, s in self.sessions.items()
                     if b in image.brokers and not image.brokers[b].fenced]
        if not deadlines:
            controller.queue.cancel_deferred(_FENCE_TAG)
            return
        deadline = min(deadlines) + self.config.session_timeout_ms
        if controller.queue.deferred_deadline(_FENCE_TAG) != deadline:
            controller.queue.schedule_deferred(_FENCE_TAG, deadline, self._fence_stale)

    def _fence_stale(self, now_ms):
        controller = self.controller
        if not controller.active:
            return
        image = controller.working
        timeout = self.config.session_timeout_ms
        stale = [(s.last_contact_ms, b) for b, s in self.sessions.items()
                 if b in image.brokers and not image.brokers[b].fenced
                 and s.last_contact_ms + timeout <= now_ms]
        if stale:
            _, broker_id = min(stale)
            broker = image.brokers[broker_id]
            self.fenced_by_timeout += 1
            controller._write(self._fence_records(image, broker), None, None, now_ms)
            if not controller.active:
                return
        self._schedule_expiry()
