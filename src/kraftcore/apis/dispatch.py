"""One role's request dispatch: a table from API key to handler, and the rules every answer
of that role keeps (Kafka's `ControllerApis.handle` and `KafkaApis.handle` do the same).

`request_handler(role, handlers)` returns the role's `handle(facade, request)` coroutine
function. `request` is a `kraftcore.protocol.framing.Request`; the answer is the response
message for `request.api_version` (the listener encodes it). A handler is
`async handler(facade, version, body) -> response`; what `facade` offers is the role's
business (`kraftcore.apis.controller`, `kraftcore.apis.broker`).

Invariants of every answer:

* it never raises for a request's content. A key the role does not serve, and a
  `ControllerError` from the handler, become the whole-request error answer with that code
  (`kraftcore.apis.errors`); a value the handler cannot take (ValueError, TypeError, ...,
  any `KraftcoreError`) is INVALID_REQUEST; an unexpected failure is UNKNOWN_SERVER_ERROR
  (logged);
* a Produce with acks=0 gets none (the handler returns None, the listener sends nothing);
* it encodes at the request's version: it is checked before it is returned, and one that
  does not is replaced by the bare UNKNOWN_SERVER_ERROR response, so the listener never
  has to drop a connection because of a handler.
"""

import logging

from kraftcore.apis.errors import api_name, bare_response, error_response
from kraftcore.errors import ControllerError, KraftcoreError
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["request_handler"]

log = logging.getLogger("kraftcore.apis")

_E = ErrorCode
_PRODUCE_KEY = 0
# Exceptions a handler raises on a value it cannot take: the request's fault.
_INPUT_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                 KraftcoreError)


def request_handler(role, handlers):
    """The `async handle(facade, request)` of a role that serves `handlers` ({API key:
    handler}); `role` ("controller", "broker") names it in the refusal of other keys."""
    get_handler = handlers.get

    async def handle(facade, request):
        key, version, body = request.api_key, request.api_version, request.body
        handler = get_handler(key)
        try:
            if handler is None:
                raise ControllerError(_E.INVALID_REQUEST, f"{api_name(key)} is not a {role} "
                                      "API; send it to the node that serves it")
            response = await handler(facade, version, body)
            if response is None and key == _PRODUCE_KEY:
                return None  # acks=0: no answer at all
        except ControllerError as exc:  # NotControllerError included (code 41)
            response = error_response(key, version, body, exc.code, str(exc))
        except _INPUT_ERRORS as exc:
            log.warning("%s v%d: refused as INVALID_REQUEST: %r", api_name(key), version, exc,
                        exc_info=True)
            response = error_response(key, version, body, _E.INVALID_REQUEST,
                                      f"the request could not be processed: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug must not escape to the listener
            log.exception("%s v%d: unexpected failure", api_name(key), version)
            response = error_response(key, version, body, _E.UNKNOWN_SERVER_ERROR,
                                      f"unexpected server error: {exc!r}")
        try:
            response.encode_parts(version)  # records held as file regions are not read
        except Exception as exc:  # noqa: BLE001 - EncodeError: our bug, answered not raised
            log.error("%s v%d: the response does not encode (%s); answering "
                      "UNKNOWN_SERVER_ERROR", api_name(key), version, exc)
            response = bare_response(key, version, _E.UNKNOWN_SERVER_ERROR,
                                     f"the server could not encode its response: {exc}")
        return response

    return handle
