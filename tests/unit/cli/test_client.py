"""allot_cli.client: an API answer becomes the exit code of docs/cli.md and a message naming
each field (as the API's error bodies, docs/api.md, give them); no answer is exit 5."""

from __future__ import annotations

import json
import socket

import pytest
import requests

from allot_cli.client import Api, error_message, refusal
from allot_cli.config import Target
from allot_cli.errors import CliError, Exit


def answer(status: int, body, headers=None) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.reason = "Reason"
    r._content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    r.headers.update(headers or {})
    return r


@pytest.mark.parametrize(("body", "message"), [
    ({"pods[0].gpus": ["65 > 64: must be at most 64"], "name": ["required", "too long"]},
     "pods[0].gpus: 65 > 64: must be at most 64\nname: required\nname: too long"),
    ({"pods": [{}, {"gpus": ["not a number"]}]}, "pods[1].gpus: not a number"),
    ({"non_field_errors": ["expected a JSON object"]}, "expected a JSON object"),
    ({"detail": "a; b", "errors": ["a", "b"]}, "a\nb"),
    ({"detail": "refused", "reasons": [{"code": "POLICY_DENIED", "message": "no H100s"}]},
     "refused\n  POLICY_DENIED: no H100s"),
    ("<html>Bad   gateway</html>", "HTTP 400 Reason: <html>Bad gateway</html>"),
])
def test_messages_name_the_fields(body, message):
    assert error_message(answer(400, body)) == message


@pytest.mark.parametrize(("status", "code"), [
    (400, Exit.REFUSED), (409, Exit.REFUSED), (413, Exit.REFUSED), (429, Exit.REFUSED),
    (500, Exit.REFUSED), (401, Exit.AUTH), (403, Exit.AUTH), (404, Exit.NOT_FOUND),
    (502, Exit.UNREACHABLE), (503, Exit.UNREACHABLE), (504, Exit.UNREACHABLE)])
def test_statuses_become_exit_codes(status, code):
    error = refusal(answer(status, {"detail": "x"}))
    assert (error.code, error.status, error.body) == (code, status, {"detail": "x"})


def test_unavailable_says_when_to_retry():
    error = refusal(answer(503, {"detail": "the database is unavailable; try again shortly"},
                           {"Retry-After": "5"}))
    assert error.message == ("the server is unavailable (503): the database is unavailable; "
                             "try again shortly (retry after 5 s)")
    assert refusal(answer(401, {"detail": "Invalid token."})).message == (
        "Invalid token.\n(sign in again: allot login)")


def test_no_server_is_exit_5():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = Api(Target(f"http://127.0.0.1:{port}", "t"), timeout=5)
    with pytest.raises(CliError) as caught:
        api.get("workloads")
    assert caught.value.code == Exit.UNREACHABLE
    assert caught.value.message == f"cannot reach http://127.0.0.1:{port}: Connection refused"


def test_no_token_is_exit_4_before_any_request():
    with pytest.raises(CliError) as caught:
        Api(Target("http://127.0.0.1:1", None)).get("workloads")
    assert caught.value.code == Exit.AUTH and "run `allot login`" in caught.value.message
