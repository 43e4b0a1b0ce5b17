"""The ``Idempotency-Key`` header's rules and the turns submissions of one key take, without
a service: the key's bounds (named in the refusal), its two spellings, the body's digest, and
a retry that arrives while the first is still being stored waiting for it."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.fields import InvalidSpec
from scheduler.service.idempotency import body_digest, idempotency_key
from scheduler.service.scheduling.submissions import KeyTurns

pytestmark = pytest.mark.unit


def test_a_key_is_the_value_bare_or_quoted() -> None:
    assert idempotency_key([]) is None
    uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324"
    assert idempotency_key([uuid]) == idempotency_key([f'"{uuid}"']) == uuid
    assert idempotency_key(['"say \\"hi\\" \\\\ bye"']) == 'say "hi" \\ bye'
    assert idempotency_key(['a"b']) == 'a"b'  # not a quoted string: the value as it is
    assert idempotency_key(["k" * 200]) == "k" * 200


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ([""], "got 0 characters"),
        (["k" * 201], "got 201 characters"),
        (['"' + "k" * 199 + '"'], "got 201 characters"),
        (["caf\xe9"], "got other characters"),
        (["tab\there"], "got other characters"),
        (['""'], "empty quoted string"),
        (["a", "b"], "send one key, got 2 headers"),
    ],
)
def test_a_bad_key_is_refused_naming_the_header(values: list[str], words: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        idempotency_key(values)
    assert raised.value.where == "Idempotency-Key" and words in raised.value.message
    assert "1 to 200 printable ASCII characters" in raised.value.message or "send one" in words


def test_the_digest_is_of_the_body_not_its_spelling() -> None:
    body = {"command": ["python", "train.py"], "gpus": 0.5, "env": {"A": "1", "B": "2"}}
    respelled = {"env": {"B": "2", "A": "1"}, "gpus": 0.5, "command": ["python", "train.py"]}
    assert body_digest(body) == body_digest(respelled)
    assert len(body_digest(body)) == 64
    assert body_digest(body) != body_digest({**body, "gpus": 1})
    assert body_digest({"name": "é"}) != body_digest({"name": "e"})


def test_a_retry_waits_for_the_first_and_other_keys_do_not() -> None:
    async def scenario() -> list[str]:
        turns = KeyTurns()
        order: list[str] = []
        first_inside = asyncio.Event()
        release = asyncio.Event()

        async def first() -> None:
            async with turns.turn(("alice", "k")):
                order.append("first in")
                first_inside.set()
                await release.wait()
                order.append("first out")

        async def retry() -> None:
            await first_inside.wait()
            async with turns.turn(("alice", "k")):
                order.append("retry in")

        async def others() -> None:
            await first_inside.wait()
            for key in (("bob", "k"), ("alice", "other")):
                async with turns.turn(key):
                    order.append(f"{key} in")
            release.set()

        await asyncio.gather(first(), retry(), others())
        assert len(turns) == 0  # nothing kept once nobody holds or awaits a key
        return order

    assert asyncio.run(scenario()) == [
        "first in",
        "('bob', 'k') in",
        "('alice', 'other') in",
        "first out",
        "retry in",
    ]
