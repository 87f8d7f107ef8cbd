"""The registry of the Kafka APIs kraftcore implements: API key -> name and the request and
response classes of `kraftcore.protocol.messages`.

The version ranges are not repeated here: they belong to the message classes
(`Api.request.valid_versions`, `.flexible_versions`, `.is_flexible(v)`), and a request and
its response always share them (checked when this module is imported).
"""

from typing import NamedTuple

from kraftcore.errors import UnsupportedVersionError
from kraftcore.protocol import messages


class Api(NamedTuple):
    """One API: its key, Kafka's name for it, and its request and response classes."""

    key: int
    name: str
    request: type
    response: type

    @property
    def valid_versions(self):
        """(lowest, highest) version of this API, inclusive."""
        return self.request.valid_versions

    @property
    def flexible_versions(self):
        """(lowest, highest or None) of its flexible versions."""
        return self.request.flexible_versions

    def is_flexible(self, version):
        return self.request.is_flexible(version)


def _build():
    by_key = {}
    for request in messages.REQUESTS:
        name = request.__name__.removesuffix("Request")
        response = getattr(messages, name + "Response")
        if (request.api_key != response.api_key
                or request.valid_versions != response.valid_versions
                or request.flexible_versions != response.flexible_versions):
            raise AssertionError(f"{name}: request and response schemas disagree")
        if request.api_key in by_key:
            raise AssertionError(f"API key {request.api_key} is defined twice")
        by_key[request.api_key] = Api(request.api_key, name, request, response)
    return dict(sorted(by_key.items()))


API_BY_KEY: dict[int, Api] = _build()
API_BY_NAME: dict[str, Api] = {a.name: a for a in API_BY_KEY.values()}


def api(key) -> Api:
    """The API of `key`; an unknown key raises `UnsupportedVersionError`."""
    try:
        return API_BY_KEY[key]
    except (KeyError, TypeError):
        raise UnsupportedVersionError(f"unknown API key {key!r}") from None


__all__ = ["Api", "API_BY_KEY", "API_BY_NAME", "api"]
