"""`ControllerRegistration`: a controller node's registration with the active controller
(ControllerRegistration, KIP-919; Kafka's `ControllerRegistrationManager`), so that the
metadata log holds each controller's listeners and supported features as a
RegisterControllerRecord, and DescribeCluster with the controller endpoint type lists them.

Each process registers once, with an incarnation id of its own. The request goes when the
node's committed image runs metadata.version 3.7-IV0 or later (the first with the record),
an active controller is known, and the image does not hold this incarnation's
registration. One request is in flight at a time. A failed one (an error answer, no
answer, NOT_CONTROLLER while an election goes on) is retried after a backoff that doubles
from `RETRY_BACKOFF_MS` up to `RETRY_BACKOFF_MS_MAX`; after a success the node waits
`RETRY_BACKOFF_MS_MAX` for the record to reach its image before it asks again.

Time comes in as `now_ms`; the sending is the caller's (`poll` returns the request and the
caller hands the outcome to `on_response`).
"""

from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import error_name

__all__ = ["ControllerRegistration", "REGISTRATION_LEVEL"]

REGISTRATION_LEVEL = METADATA_VERSION_LEVELS["3.7-IV0"]
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MS_MAX = 5000


class ControllerRegistration:
    def __init__(self, controller_id, incarnation_id, listeners):
        """`listeners`: (name, host, port, security protocol id) of the controller's
        listeners, as it registers them."""
        self.controller_id = controller_id
        self.incarnation_id = incarnation_id
        self.listeners = tuple(listeners)
        self.in_flight = False
        self.next_attempt_ms = 0
        self.backoff_ms = RETRY_BACKOFF_MS
        self.registered = False  # the image holds this incarnation's record
        self.attempts = 0
        self.last_error = None

    def request(self):
        cls = m.ControllerRegistrationRequest
        return cls(
            controller_id=self.controller_id, incarnation_id=self.incarnation_id,
            zk_migration_ready=False,
            listeners=[cls.Listener(name=name, host=host, port=port, security_protocol=sp)
                       for name, host, port, sp in self.listeners],
            features=[cls.Feature(name=METADATA_VERSION, min_supported_version=1,
                                  max_supported_version=max(METADATA_VERSION_LEVELS.values()))])

    def poll(self, image, leader_known, now_ms):
        """(request or None, the time to poll again or None). The request is in flight
        until `on_response`."""
        own = image.controllers.get(self.controller_id)
        self.registered = own is not None and own.incarnation_id == self.incarnation_id
        level = image.metadata_version()
        if self.registered or self.in_flight or level is None or level < REGISTRATION_LEVEL:
            return None, None
        if not leader_known:
            return None, now_ms + self.backoff_ms
        if now_ms < self.next_attempt_ms:
            return None, self.next_attempt_ms
        self.in_flight = True
        self.attempts += 1
        return self.request(), None

    def on_response(self, response, error, now_ms):
        """The answer to the request `poll` returned (`error`: the exception that stood in
        for one). Returns the error text of a refusal, None on success."""
        self.in_flight = False
        if error is None and response.error_code == 0:
            self.last_error = None
            self.backoff_ms = RETRY_BACKOFF_MS
            self.next_attempt_ms = now_ms + RETRY_BACKOFF_MS_MAX
            return None
        if error is None:
            self.last_error = f"{error_name(response.error_code)}: {response.error_message}"
        else:
            self.last_error = f"{type(error).__name__}: {error}"
        self.next_attempt_ms = now_ms + self.backoff_ms
        self.backoff_ms = min(RETRY_BACKOFF_MS_MAX, self.backoff_ms * 2)
        return self.last_error
