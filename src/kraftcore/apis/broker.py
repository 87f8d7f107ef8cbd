"""What a broker node answers itself (Kafka's `KafkaApis`): the broker role's request
dispatch table and its handlers. The node process plugs it into its broker listener:

    response = await handle_broker_request(facade, request)

`facade` is the broker's own view: `image` (the `MetadataImage` its metadata follower
holds), `node_id`, `cluster_id` and `controller_id()` (the active controller the broker's
observer knows, or None). The rules every answer keeps are `kraftcore.apis.dispatch`'s.

| API (key) | versions | answer |
|---|---|---|
| Metadata (3) | 0-13 | read from the broker's image (`kraftcore.apis.reads`) |

A broker holds no partition data yet; the data plane's handlers (Produce, Fetch,
ListOffsets, and the group coordinator's) join `_HANDLERS` here, each reading what the
broker's facade offers. Admin requests stay the controller's (`kraftcore.apis.controller`):
a client sends them to the controller listeners.
"""

from kraftcore.apis.dispatch import request_handler
from kraftcore.apis.reads import metadata

__all__ = ["handle_broker_request", "BROKER_API_KEYS"]

_HANDLERS = {3: metadata}

BROKER_API_KEYS = frozenset(_HANDLERS)
"""The API keys `handle_broker_request` answers (the listener answers ApiVersions)."""

handle_broker_request = request_handler("broker", _HANDLERS)
"""`async handle_broker_request(facade, request) -> response`: the broker's answer to
`request` at its version; never raises for a request's content."""
