"""The ``Idempotency-Key`` request header: a retried submission never makes a second job.

A client that sends ``POST workloads`` and gets no answer (the connection dropped, the proxy
answered 503 while the service restarted) cannot tell whether the job was stored. With a key
(draft-ietf-httpapi-idempotency-key-header, as Stripe's API uses it) it sends the same request
again: the service finds the workload that user stored with that key and answers with it
(201, as the first time, with ``Idempotent-Replayed: true``) instead of storing another. The
same key with another body is refused (422, as the draft recommends): it is a client's
mistake, not a retry.

The key is the header's value, bare (Stripe) or as a quoted Structured Field string (the
draft: ``Idempotency-Key: "8e03978e-…"``); both spell the same key. It is stored with the
workload (``WorkloadRecord.idempotency_key``, unique per user), so it is remembered as long
as the workload's record is (``workload_retention_days``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from scheduler.common.limits import MAX_IDEMPOTENCY_KEY
from scheduler.common.scopes import IDEMPOTENCY_HEADER
from scheduler.fields import InvalidSpec

REPLAYED_HEADER = "Idempotent-Replayed"
"""Set on the answer to a retry (Stripe's name): the workload was stored by an earlier
request with the same key, not by this one."""

_SF_STRING = re.compile(r'"((?:[^"\\]|\\["\\])*)"')


def idempotency_key(values: list[str]) -> str | None:
    """The key of a request's ``Idempotency-Key`` header values, or None without one.

    The value is 1 to ``MAX_IDEMPOTENCY_KEY`` printable ASCII characters (space to ``~``),
    quotes included when it is quoted; anything else is refused naming the header, as is
    the header sent twice or a quoted value holding only spaces."""
    if not values:
        return None
    if len(values) > 1:
        raise InvalidSpec(IDEMPOTENCY_HEADER, f"send one key, got {len(values)} headers")
    value = values[0].strip()
    rule = f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters (a UUID will do)"
    if not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidSpec(IDEMPOTENCY_HEADER, f"{rule}, got {len(value)} characters")
    if not all(" " <= character <= "~" for character in value):
        raise InvalidSpec(IDEMPOTENCY_HEADER, f"{rule}, got other characters")
    quoted = _SF_STRING.fullmatch(value)
    if quoted is None:
        return value
    key = re.sub(r"\\([\"\\])", r"\1", quoted.group(1))
    if not key.strip():
        raise InvalidSpec(IDEMPOTENCY_HEADER, f"{rule}, got an empty quoted string")
    return key


def body_digest(body: Any) -> str:
    """The SHA-256 of a request body as parsed, in one spelling (sorted keys, no spaces), so
    that a retry compares equal whatever order its client wrote the fields in."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
