"""Kafka's wire protocol (kafka-facts §1.2, §6): field types and tagged fields compiled from
declarative schemas (`schema`), request / response headers and size framing (`framing`),
the messages of the KRaft RPCs and the client APIs kraftcore serves (`messages`, `apis`),
and Kafka's error codes (`error_codes`).

Encoding and decoding run in one generic kernel (`kraftcore.codec`'s protocol functions),
native or pure Python.

The uuid field type's values are `kraftcore.types.Uuid`: import it from there, its one home.
"""

from kraftcore.types import METADATA_TOPIC_ID, ONE_UUID, ZERO_UUID

__all__ = ["ZERO_UUID", "ONE_UUID", "METADATA_TOPIC_ID"]
