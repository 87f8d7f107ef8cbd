"""Whole-request error answers (`kraftcore.apis.errors`)."""

import logging

from kraftcore.apis.broker import BROKER_API_KEYS
from kraftcore.apis.controller import CONTROLLER_API_KEYS
from kraftcore.apis.errors import error_response
from kraftcore.protocol import messages as m
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import versions


def test_error_response_builders_cover_every_version():
    """A whole-request error in the shape of every API a role serves, at every version,
    still encodes."""
    for key in sorted(CONTROLLER_API_KEYS | BROKER_API_KEYS):
        request_cls = API_BY_KEY[key].request
        for version in versions(request_cls):
            body = request_cls()
            response = error_response(key, version, body, E.NOT_CONTROLLER, "elsewhere")
            response.encode(version)


def test_an_error_goes_into_every_item_the_request_named_once():
    cls = m.CreateTopicsRequest
    body = cls(topics=[cls.CreatableTopic(name=n) for n in ("a", "b", "a")])
    response = error_response(cls.api_key, 7, body, E.REQUEST_TIMED_OUT, "slow")
    assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
        ("a", E.REQUEST_TIMED_OUT, "slow"), ("b", E.REQUEST_TIMED_OUT, "slow")]


def test_an_error_goes_into_the_top_level_error_code_when_the_schema_has_one():
    body = m.DescribeClusterRequest(endpoint_type=2)
    response = error_response(body.api_key, 1, body, E.NOT_CONTROLLER, "elsewhere")
    assert (response.error_code, response.error_message, response.endpoint_type) == (
        E.NOT_CONTROLLER, "elsewhere", 2)


def test_a_body_that_cannot_be_walked_gets_the_top_level_fields_only(caplog):
    """ElectLeaders v0 has no top-level ErrorCode: a body whose items are not lists still
    gets an answer (with nothing in it to carry the error), and a warning on the request
    handlers' logger, `kraftcore.apis` (docs/admin.md)."""
    body = m.ElectLeadersRequest()
    body.topic_partitions = 7  # not a list: the items cannot be walked
    with caplog.at_level(logging.WARNING, logger="kraftcore.apis"):
        response = error_response(body.api_key, 0, body, E.INVALID_REQUEST, "bad")
    assert response.replica_election_results == []
    response.encode(0)
    assert [(r.name, r.levelno) for r in caplog.records] == [
        ("kraftcore.apis", logging.WARNING)]
