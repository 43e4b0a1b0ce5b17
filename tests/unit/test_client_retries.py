"""The client's submission retries, against a stand-in service (httpx's mock transport, no
socket): each submission carries a new ``Idempotency-Key``, a 503 or a dropped connection
sends the same request again under the same key (telling the user), a refusal is not sent
again, and the tries are bounded."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from hub_ext.client.api import FracHubClient
from hub_ext.client.session import FracHubError, Unreachable

pytestmark = pytest.mark.unit

URL = "http://hub.test/services/frachub/"
CREATED = {"id": 7, "name": "job-7", "state": "pending"}


Answer = Callable[[httpx.Request], httpx.Response]


def stand_in(answers: list[str], seen: list[httpx.Request]) -> Answer:
    """Answers each request with the next of ``answers``: "201" (the job), "503-proxy" (the
    hub's proxy while the service is down: not JSON), "503" (the service's own JSON),
    "400", or "drop" (the connection closes without an answer)."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        what = answers.pop(0)
        if what == "drop":
            raise httpx.RemoteProtocolError("Server disconnected without sending a response")
        if what == "503-proxy":
            return httpx.Response(503, text="<html>Service Unavailable</html>")
        if what == "201":
            return httpx.Response(201, json=CREATED)
        status = int(what)
        return httpx.Response(status, json={"status": status, "message": f"said {status}"})

    return answer


def client(answers: list[str], seen: list[httpx.Request], notes: list[str]) -> FracHubClient:
    made = FracHubClient(URL, "secret", notice=notes.append)
    made.retry_delays = (0.0, 0.0, 0.0)
    made._http = httpx.Client(
        base_url=made.api_url,
        headers=made.headers,
        transport=httpx.MockTransport(stand_in(answers, seen)),
    )
    return made


def keys(seen: list[httpx.Request]) -> list[str]:
    return [request.headers["Idempotency-Key"] for request in seen]


@pytest.mark.parametrize("first", ["503-proxy", "503", "drop"])
def test_no_answer_sends_the_same_submission_again_under_its_key(first: str) -> None:
    seen: list[httpx.Request] = []
    notes: list[str] = []
    with client([first, first, "201"], seen, notes) as frachub:
        assert frachub.submit("python train.py", gpus=0.5) == CREATED
    assert len(seen) == 3 and len(set(keys(seen))) == 1
    assert keys(seen)[0].startswith('"') and len(keys(seen)[0]) == 38  # a quoted UUID
    assert {request.content for request in seen} == {seen[0].content}
    assert json.loads(seen[0].content) == {"command": "python train.py", "gpus": 0.5}
    assert len(notes) == 2
    assert notes[0].startswith("submitting: ") and "trying again in 0 s (try 2 of 4;" in notes[0]
    assert "stored once" in notes[0]


def test_each_submission_has_a_key_of_its_own() -> None:
    seen: list[httpx.Request] = []
    with client(["201", "201"], seen, []) as frachub:
        frachub.submit("true", gpus=1)
        frachub.submit("true", gpus=1)
    assert len(set(keys(seen))) == 2


def test_a_refusal_is_not_sent_again() -> None:
    seen: list[httpx.Request] = []
    notes: list[str] = []
    with client(["400"], seen, notes) as frachub, pytest.raises(FracHubError) as raised:
        frachub.submit("true", gpus=1)
    assert (raised.value.status, raised.value.message) == (400, "said 400")
    assert len(seen) == 1 and notes == []


def test_the_tries_are_bounded_and_the_last_error_says_what_may_have_happened() -> None:
    seen: list[httpx.Request] = []
    notes: list[str] = []
    with client(["drop"] * 4, seen, notes) as frachub, pytest.raises(Unreachable) as raised:
        frachub.submit("true", gpus=1)
    assert len(seen) == 4 and len(set(keys(seen))) == 1 and len(notes) == 3
    assert raised.value.status == 0
    assert "lost the connection" in str(raised.value)
    assert "sent 4 times" in str(raised.value) and "list your jobs" in str(raised.value)


def test_the_project_fallback_is_a_new_submission_with_a_new_key() -> None:
    """ "project: is required" (400) stored nothing; the body with the default project is
    another request, under another key, and is retried under that one."""
    seen: list[httpx.Request] = []
    answers = ["400-project", "503", "201"]

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        what = answers.pop(0)
        if what == "400-project":
            message = "project: is required: alice is in vision, nlp"
            return httpx.Response(400, json={"status": 400, "message": message})
        if what == "503":
            return httpx.Response(503, json={"status": 503, "message": "hub unavailable"})
        return httpx.Response(201, json=CREATED)

    frachub = FracHubClient(URL, "secret", default_project="vision", notice=lambda _: None)
    frachub.retry_delays = (0.0,)
    frachub._http = httpx.Client(
        base_url=frachub.api_url, headers=frachub.headers, transport=httpx.MockTransport(answer)
    )
    with frachub:
        assert frachub.submit("true", gpus=1) == CREATED
    assert [json.loads(request.content).get("project") for request in seen] == [
        None,
        "vision",
        "vision",
    ]
    first, second, third = keys(seen)
    assert first != second == third
