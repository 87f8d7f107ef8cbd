"""`BrokerLifecycle`: a broker's registration, heartbeats, lease and controlled shutdown with
the active controller, as a sans-I/O state machine (kafka-facts §8.2, §8.3; Kafka's
`BrokerLifecycleManager`).

It reads no clock, socket or random generator: time comes in as `now_ms`, and what must be
sent to the active controller comes out of `poll(now_ms)` as small request values. The driver
(the broker runtime, or a test) sends each request, and hands the answer back through
`on_response`.

States (the product's broker states):

  OFFLINE   not registered: before `start`, while the first registration is in flight, and
            for good once the broker has shut down (`done`).
  FENCED    registered, but the broker must not lead or serve: it is catching up with the
            metadata log, the controller fenced it, or it lost its lease. Clients do not see
            it (`kraftcore.broker.metadata.visible_brokers`).
  ONLINE    registered and unfenced: the controller counts it as alive.
  STOPPING  controlled shutdown (`begin_shutdown`, which the runtime calls on SIGTERM): the
            broker heartbeats with want_shutdown until the controller has moved its
            leaderships away and answers should_shut_down; then OFFLINE.

  OFFLINE --registered--> FENCED --controller unfences--> ONLINE --begin_shutdown--> STOPPING
  ONLINE --controller fences, or no successful heartbeat for session_timeout_ms--> FENCED
  FENCED --begin_shutdown--> STOPPING;   STOPPING --should_shut_down--> OFFLINE (done)
  FENCED / ONLINE --heartbeat answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED-->
            FENCED, registering again with the same incarnation id
  STOPPING --registration lost--> OFFLINE (done: the controller holds nothing of ours)

The lease: the controller fences a broker `session_timeout_ms` after the last heartbeat it
processed. The broker measures the same span from the moment it *sent* the last heartbeat
that was answered (the controller can only have processed it later), so it always counts
itself fenced no later than the controller does. Losing the lease does not drop the
registration: the broker stays registered and keeps heartbeating (want_fence False) until
the controller unfences it again. In STOPPING a lost lease changes nothing: the broker is
leaving, and the controller answers a fenced broker's shutdown request at once.

Requests: at most one is in flight. A heartbeat goes `heartbeat_interval_ms` after the
previous answer; the first right after registration. A request that failed (an error, a
`NotControllerError`, or no answer within `request_timeout_ms`) is retried after an
exponential backoff, `retry_backoff_ms` doubling up to `retry_backoff_ms_max`; a
`NotControllerError` that names the active controller is retried at once the first time
(the driver re-routes to `exc.controller_id`, also kept in `controller_id`). Answers to a
request that is no longer in flight (it timed out) are ignored. Registration errors that
retrying cannot fix (INCONSISTENT_CLUSTER_ID, UNSUPPORTED_VERSION, INVALID_REGISTRATION,
INVALID_REQUEST) stop the broker: OFFLINE, `done`, and `error` holds the exception.

A heartbeat carries `metadata_offset` (`set_metadata_offset`: the last offset the broker's
metadata image contains) — the controller unfences a broker only once it has replayed its
own registration — `want_fence` = not ready to be unfenced (`ready_to_unfence`, Kafka's
readyToUnfence; a runtime that recovers logs first starts with False and calls
`set_ready_to_unfence()`), and `want_shutdown` in STOPPING. `should_shut_down` is acted on
only in STOPPING (as Kafka does).

Kafka's numeric BrokerState (§8.3) is `broker_state`: NOT_RUNNING before `start`; STARTING
while registering and catching up; RECOVERY when caught up but still fenced; RUNNING when
ONLINE; PENDING_CONTROLLED_SHUTDOWN in STOPPING; SHUTTING_DOWN once done.

API:

  BrokerLifecycle(broker_id, incarnation_id, *, cluster_id, rack=None, listeners=(),
                  features=None, log_dirs=(), heartbeat_interval_ms=2000,
                  session_timeout_ms=9000, request_timeout_ms=2000, retry_backoff_ms=100,
                  retry_backoff_ms_max=None (session_timeout_ms // 2),
                  ready_to_unfence=True)
  start(now_ms)
  poll(now_ms) -> (requests, next_deadline_ms)       # requests: [] or [one request]
  on_response(request, result_or_exception, now_ms) -> bool (False: not in flight, ignored)
  set_metadata_offset(offset); set_ready_to_unfence()
  begin_shutdown(now_ms); stop(now_ms, reason)
  state, broker_state, broker_epoch, is_online, is_caught_up, registered, done, error,
  controller_id, metadata_offset, transitions (Transition(now_ms, from_state, to_state,
  reason), the newest BROKER_TRANSITIONS_KEPT_MAX), transitions_total (how many were ever made:
  a runtime that reports them reads the newest transitions_total - seen of them)
  submit_request(controller, request) -> Future       # a request to a QuorumController
"""

import collections
import enum
from typing import NamedTuple

from kraftcore.errors import ConfigError, ControllerError, NotControllerError
from kraftcore.limits import BROKER_BACKOFF_DOUBLINGS_MAX, BROKER_TRANSITIONS_KEPT_MAX
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["BrokerLifecycle", "BrokerState", "RegisterRequest", "HeartbeatRequest",
           "Transition", "submit_request", "OFFLINE", "FENCED", "ONLINE", "STOPPING"]

OFFLINE = "offline"
FENCED = "fenced"
ONLINE = "online"
STOPPING = "stopping"

# Registration errors that a retry cannot fix: a configuration problem to report.
_FATAL_REGISTRATION_CODES = frozenset((
    ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_REGISTRATION, ErrorCode.INVALID_REQUEST))
# Heartbeat errors meaning the controller holds no registration of ours with this epoch.
_REGISTRATION_LOST_CODES = frozenset((ErrorCode.STALE_BROKER_EPOCH,
                                      ErrorCode.BROKER_ID_NOT_REGISTERED))


class BrokerState(enum.IntEnum):
    """Kafka's broker states (`metadata/.../BrokerState.java`, kafka-facts §8.3)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7
    UNKNOWN = 127


class RegisterRequest(NamedTuple):
    """BrokerRegistration for the active controller (`QuorumController.register_broker`)."""

    broker_id: int
    incarnation_id: object  # a kraftcore.types.Uuid
    cluster_id: str
    rack: str
    listeners: tuple  # (name, host, port, security protocol) each
    features: dict  # feature name -> (min supported, max supported), or None
    log_dirs: tuple  # Uuid each


class HeartbeatRequest(NamedTuple):
    """BrokerHeartbeat for the active controller (`QuorumController.broker_heartbeat`)."""

    broker_id: int
    broker_epoch: int
    metadata_offset: int
    want_fence: bool
    want_shutdown: bool


class Transition(NamedTuple):
    now_ms: int
    from_state: str
    to_state: str
    reason: str


def submit_request(controller, request):
    """Hand `request` to a `QuorumController` (or anything with its `register_broker` and
    `broker_heartbeat`); returns its Future."""
    if type(request) is RegisterRequest:
        return controller.register_broker(
            request.broker_id, request.incarnation_id, cluster_id=request.cluster_id,
            rack=request.rack, listeners=request.listeners, features=request.features,
            log_dirs=request.log_dirs)
    if type(request) is HeartbeatRequest:
        return controller.broker_heartbeat(
            request.broker_id, request.broker_epoch, metadata_offset=request.metadata_offset,
            want_fence=request.want_fence, want_shutdown=request.want_shutdown)
    raise TypeError(f"not a broker lifecycle request: {request!r}")


class _Inflight:
    __slots__ = ("request", "sent_ms", "deadline_ms")

    def __init__(self, request, sent_ms, deadline_ms):
        self.request = request
        self.sent_ms = sent_ms
        self.deadline_ms = deadline_ms


class BrokerLifecycle:
    def __init__(self, broker_id, incarnation_id, *, cluster_id, rack=None, listeners=(),
                 features=None, log_dirs=(), heartbeat_interval_ms=2000,
                 session_timeout_ms=9000, request_timeout_ms=2000, retry_backoff_ms=100,
                 retry_backoff_ms_max=None, ready_to_unfence=True):
        if retry_backoff_ms_max is None:
            retry_backoff_ms_max = session_timeout_ms // 2
        for name, value in (("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("session_timeout_ms", session_timeout_ms),
                            ("request_timeout_ms", request_timeout_ms),
                            ("retry_backoff_ms", retry_backoff_ms),
                            ("retry_backoff_ms_max", retry_backoff_ms_max)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"broker lifecycle {name} must be an int >= 1, got "
                                  f"{value!r}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be below "
                              f"session_timeout_ms ({session_timeout_ms}), or every lease "
                              "would expire between two heartbeats")
        if retry_backoff_ms_max < retry_backoff_ms:
            raise ConfigError(f"retry_backoff_ms_max ({retry_backoff_ms_max}) must be at least "
                              f"retry_backoff_ms ({retry_backoff_ms})")
        self.broker_id = broker_id
        self.incarnation_id = incarnation_id
        self.cluster_id = cluster_id
        self.rack = rack
        self.listeners = tuple(listeners)
        self.features = features
        self.log_dirs = tuple(log_dirs)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_ms_max = retry_backoff_ms_max
        self.ready_to_unfence = bool(ready_to_unfence)

        self._state = OFFLINE
        self._started = False
        self._done = False
        self.error = None  # the exception that stopped the broker, if one did
        self.broker_epoch = None  # None while the broker holds no registration
        self.metadata_offset = -1
        self._caught_up = False  # the controller said so since the last registration
        self._want_shutdown = False
        self._inflight = None
        self._next_send_ms = None
        self._lease_start_ms = None  # send time of the last answered request
        self._failures = 0  # consecutive failed requests
        self._redirected = False  # the last failure was a NotController with a hint
        self.controller_id = None  # the active controller, as the last redirect named it
        self.transitions = collections.deque(maxlen=BROKER_TRANSITIONS_KEPT_MAX)
        self.transitions_total = 0
        # Counters for diagnostics.
        self.requests_sent = 0
        self.requests_failed = 0
        self.requests_timed_out = 0
        self.registrations = 0

    def __repr__(self):
        inflight = self._inflight
        kind = None if inflight is None else type(inflight.request).__name__
        return (f"BrokerLifecycle(broker={self.broker_id}, {self._state}, "
                f"epoch={self.broker_epoch}, offset={self.metadata_offset}, "
                f"inflight={kind})")

    # ------------------------------------------------------------------ queries

    @property
    def state(self):
        return self._state

    @property
    def is_online(self):
        return self._state == ONLINE

    @property
    def is_caught_up(self):
        return self._caught_up

    @property
    def registered(self):
        return self.broker_epoch is not None

    @property
    def done(self):
        """Started and stopped for good (OFFLINE until a new incarnation starts)."""
        return self._done

    @property
    def broker_state(self):
        """Kafka's numeric BrokerState (see the module docstring)."""
        state = self._state
        if self._done:
            return BrokerState.SHUTTING_DOWN
        if not self._started:
            return BrokerState.NOT_RUNNING
        if state == ONLINE:
            return BrokerState.RUNNING
        if state == STOPPING:
            return BrokerState.PENDING_CONTROLLED_SHUTDOWN
        if state == FENCED and self._caught_up:
            return BrokerState.RECOVERY
        return BrokerState.STARTING

    @property
    def inflight(self):
        """The request awaiting an answer, or None."""
        return None if self._inflight is None else self._inflight.request

    def lease_deadline_ms(self):
        """When the lease runs out unless a heartbeat is answered first (None without one)."""
        if self._lease_start_ms is None:
            return None
        return self._lease_start_ms + self.session_timeout_ms

    # ------------------------------------------------------------------ inputs

    def start(self, now_ms):
        if self._started:
            raise RuntimeError(f"broker {self.broker_id}'s lifecycle was started already; "
                               "a restarted broker needs a new BrokerLifecycle")
        self._started = True
        self._next_send_ms = now_ms

    def set_metadata_offset(self, offset):
        """The last offset the broker's metadata image contains (-1: none)."""
        if offset < self.metadata_offset:
            raise ValueError(f"broker {self.broker_id}'s metadata offset cannot go back from "
                             f"{self.metadata_offset} to {offset}: the image only moves "
                             "forward")
        self.metadata_offset = offset

    def set_ready_to_unfence(self):
        """The broker has finished its own startup work: heartbeats stop asking to stay
        fenced."""
        self.ready_to_unfence = True

    def begin_shutdown(self, now_ms):
        """Start a controlled shutdown. A broker that holds no registration has nothing to
        hand over: it goes OFFLINE at once."""
        if self._done or self._state == STOPPING:
            return
        if not self._started or self.broker_epoch is None:
            self._finish(now_ms, "shut down before holding a registration")
            return
        self._want_shutdown = True
        self._transition(now_ms, STOPPING, "controlled shutdown requested")
        if self._inflight is None:
            self._next_send_ms = now_ms

    def stop(self, now_ms, reason="stopped without a controlled shutdown"):
        """Go OFFLINE now, whatever the controller knows (a shutdown that took too long, a
        fatal error elsewhere in the broker)."""
        if not self._done:
            self._finish(now_ms, reason)

    def poll(self, now_ms):
        """Fire what is due; returns (requests to send now, next deadline in ms or None)."""
        if not self._started or self._done:
            return [], None
        inflight = self._inflight
        if inflight is not None and now_ms >= inflight.deadline_ms:
            self._inflight = None
            self.requests_timed_out += 1
            self._on_failure(now_ms, redirect=False)
        self._check_lease(now_ms)
        requests = []
        if self._inflight is None and now_ms >= self._next_send_ms:
            request = self._build_request()
            self._inflight = _Inflight(request, now_ms, now_ms + self.request_timeout_ms)
            self.requests_sent += 1
            requests.append(request)
        return requests, self._next_deadline()

    def on_response(self, request, result, now_ms):
        """The answer to `request` (the very object `poll` returned): a RegistrationResult,
        a HeartbeatResult or an exception. Returns False when `request` is not the one in
        flight (it timed out, or the broker is done), which is then ignored."""
        inflight = self._inflight
        if self._done or inflight is None or inflight.request is not request:
            return False
        self._inflight = None
        if isinstance(result, BaseException):
            if type(request) is RegisterRequest:
                self._on_register_error(result, now_ms)
            else:
                self._on_heartbeat_error(result, now_ms)
        elif type(request) is RegisterRequest:
            self._on_registered(result, inflight.sent_ms, now_ms)
        else:
            self._on_heartbeat(request, result, inflight.sent_ms, now_ms)
        if not self._done:
            self._check_lease(now_ms)
        return True

    # ------------------------------------------------------------------ requests

    def _build_request(self):
        if self.broker_epoch is None:
            return RegisterRequest(self.broker_id, self.incarnation_id, self.cluster_id,
                                   self.rack, self.listeners, self.features, self.log_dirs)
        return HeartbeatRequest(self.broker_id, self.broker_epoch, self.metadata_offset,
                                not self.ready_to_unfence, self._want_shutdown)

    def _next_deadline(self):
        if self._inflight is not None:
            deadline = self._inflight.deadline_ms
        else:
            deadline = self._next_send_ms
        if self._state == ONLINE and self._lease_start_ms is not None:
            deadline = min(deadline, self._lease_start_ms + self.session_timeout_ms)
        return deadline

    def _retry_delay_ms(self):
        doublings = min(self._failures - 1, BROKER_BACKOFF_DOUBLINGS_MAX)
        return min(self.retry_backoff_ms_max, self.retry_backoff_ms << max(doublings, 0))

    def _on_success(self, sent_ms):
        self._failures = 0
        self._redirected = False
        if self._lease_start_ms is None or sent_ms > self._lease_start_ms:
            self._lease_start_ms = sent_ms

    def _on_failure(self, now_ms, redirect):
        self.requests_failed += 1
        self._failures += 1
        if redirect and not self._redirected:
            # The answer named the active controller: the driver re-routes there; retry now.
            self._redirected = True
            self._next_send_ms = now_ms
            return
        self._redirected = False
        self._next_send_ms = now_ms + self._retry_delay_ms()

    # ------------------------------------------------------------------ answers

    def _on_registered(self, result, sent_ms, now_ms):
        epoch = result.broker_epoch
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"broker {self.broker_id}: the controller answered the "
                             f"registration with broker epoch {epoch!r}; an epoch is an "
                             "offset >= 0")
        self.broker_epoch = epoch
        self._caught_up = False
        self.registrations += 1
        self._on_success(sent_ms)
        self._next_send_ms = now_ms  # the first heartbeat goes at once
        if self._state == OFFLINE:
            self._transition(now_ms, FENCED, f"registered with broker epoch {epoch}")

    def _on_register_error(self, exc, now_ms):
        code = getattr(exc, "code", None) if isinstance(exc, ControllerError) else None
        if code in _FATAL_REGISTRATION_CODES:
            self.error = exc
            self._finish(now_ms, f"registration refused ({_code_name(code)}): {exc}")
            return
        self._note_redirect(exc)
        self._on_failure(now_ms, redirect=self._is_redirect(exc))

    def _on_heartbeat(self, request, result, sent_ms, now_ms):
        self._on_success(sent_ms)
        if result.is_caught_up:
            self._caught_up = True
        self._next_send_ms = now_ms + self.heartbeat_interval_ms
        state = self._state
        if state == STOPPING:
            if result.should_shut_down:
                self._finish(now_ms, "the controller completed the controlled shutdown")
            elif not request.want_shutdown:
                self._next_send_ms = now_ms  # the shutdown request still has to go out
        elif state == FENCED:
            # An answer slower than the session timeout proves no lease: wait for the next.
            if not result.is_fenced and now_ms < sent_ms + self.session_timeout_ms:
                self._transition(now_ms, ONLINE, "unfenced by the controller")
        elif state == ONLINE:
            if result.is_fenced:
                self._transition(now_ms, FENCED, "fenced by the controller")

    def _on_heartbeat_error(self, exc, now_ms):
        code = getattr(exc, "code", None) if isinstance(exc, ControllerError) else None
        if code in _REGISTRATION_LOST_CODES:
            name = _code_name(code)
            self.broker_epoch = None
            self._caught_up = False
            if self._state == STOPPING:
                self._finish(now_ms, f"the registration was lost during the controlled "
                             f"shutdown ({name}): nothing left to hand over")
                return
            if self._state == ONLINE:
                self._transition(now_ms, FENCED, f"heartbeat answered {name}; registering "
                                 "again")
            self._on_failure(now_ms, redirect=False)
            return
        self._note_redirect(exc)
        self._on_failure(now_ms, redirect=self._is_redirect(exc))

    def _note_redirect(self, exc):
        if isinstance(exc, NotControllerError):
            self.controller_id = exc.controller_id

    @staticmethod
    def _is_redirect(exc):
        return isinstance(exc, NotControllerError) and exc.controller_id is not None

    # ------------------------------------------------------------------ state

    def _check_lease(self, now_ms):
        if (self._state == ONLINE and self._lease_start_ms is not None
                and now_ms >= self._lease_start_ms + self.session_timeout_ms):
            self._transition(now_ms, FENCED, f"lease lost: no heartbeat answered for "
                             f"{now_ms - self._lease_start_ms} ms (session timeout "
                             f"{self.session_timeout_ms} ms)")

    def _transition(self, now_ms, to_state, reason):
        self._record(Transition(now_ms, self._state, to_state, reason))
        self._state = to_state

    def _record(self, transition):
        self.transitions.append(transition)
        self.transitions_total += 1

    def _finish(self, now_ms, reason):
        self._started = True
        self._done = True
        self._inflight = None
        self._want_shutdown = False
        if self._state != OFFLINE:
            self._transition(now_ms, OFFLINE, reason)
        else:
            self._record(Transition(now_ms, OFFLINE, OFFLINE, reason))


def _code_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
