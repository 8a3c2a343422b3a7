"""ApiVersions' answer body is encoded once per distinct response and reused (every client
asks it first; W23's 10,000 clients ask it every second, issue 27): each answer must be the
bytes a fresh encoding gives, with the request's own correlation id, and a response that
differs from the remembered one (another version, an error, a changed configuration) is never
answered from the memo."""

from __future__ import annotations

import copy

from pybroker.registry import supported_versions
from pybroker.wire import codec

API_VERSIONS = 18


def _response() -> dict:
    return {"error_code": 0, "api_keys": supported_versions(), "throttle_time_ms": 0}


def test_each_answer_is_the_fresh_encoding_with_its_own_correlation_id():
    for version in range(5):
        for correlation_id in (0, 1, 7, 2**31 - 1, -5):
            response = _response()
            assert codec.encode_response_memo(
                API_VERSIONS, version, correlation_id, response
            ) == codec.encode_response(API_VERSIONS, version, correlation_id, response)


def test_a_different_response_is_not_answered_from_the_memo():
    response = _response()
    first = codec.encode_response_memo(API_VERSIONS, 3, 9, response)
    response["error_code"] = 42  # the same dict changed in place after it was remembered
    changed = codec.encode_response_memo(API_VERSIONS, 3, 9, response)
    assert changed == codec.encode_response(API_VERSIONS, 3, 9, response) != first
    fewer = copy.deepcopy(response)
    fewer["api_keys"] = fewer["api_keys"][1:]  # e.g. the KIP-848 APIs turned off
    assert codec.encode_response_memo(API_VERSIONS, 3, 9, fewer) == codec.encode_response(
        API_VERSIONS, 3, 9, fewer
    )
    assert codec.encode_response_memo(API_VERSIONS, 3, 9, _response()) == codec.encode_response(
        API_VERSIONS, 3, 9, _response()
    )


def test_a_flexible_header_answer_is_the_fresh_encoding_too():
    """The memo keeps the body behind a v1 response header (the tagged fields' byte) too."""
    heartbeat = 12
    for correlation_id in (3, 4):
        body = {"throttle_time_ms": 0, "error_code": 0}
        assert codec.encode_response_memo(
            heartbeat, 4, correlation_id, body
        ) == codec.encode_response(heartbeat, 4, correlation_id, body)


def test_a_broker_answers_api_versions_with_each_request_correlation_id(start_broker):
    b = start_broker()
    body = {"client_software_name": "t", "client_software_version": "1"}
    with b.client() as c:
        answers = []
        for version in (0, 3, 3, 4, 1):
            corr = c.send(API_VERSIONS, version, body if version >= 3 else {})
            answers.append((version, corr, c.receive(API_VERSIONS, version, corr)))
    for _version, _corr, answer in answers:
        assert answer["error_code"] == 0
        assert {k["api_key"] for k in answer["api_keys"]} >= {0, 1, 3, 18}
    assert answers[1][2] == answers[2][2] and answers[1][1] != answers[2][1]
