"""The service reads the client's address and scheme from its proxy's headers by tornado's
rules, without a system call per request (``scheduler/service/server.py``): a forwarded
address that is not an IP address is ignored, trusted proxies are skipped, and the scheme
follows ``X-Forwarded-Proto`` / ``X-Scheme``. Requests go over a raw socket to the literal
address, so any ``getaddrinfo`` counted is the server's."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from tornado import web

from scheduler.service.server import ProxiedHTTPServer, is_ip


class Echo(web.RequestHandler):
    def get(self) -> None:
        self.finish({"ip": self.request.remote_ip, "protocol": self.request.protocol})


def ask(port: int, headers: dict[str, str]) -> dict:
    """One GET over a socket of its own (no resolver on the client's side)."""
    lines = ["GET /echo HTTP/1.1", "Host: frachub", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.socket() as sock:
        sock.connect(("127.0.0.1", port))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


CASES = [
    ({}, "127.0.0.1", "http"),
    ({"X-Forwarded-For": "203.0.113.7"}, "203.0.113.7", "http"),
    ({"X-Forwarded-For": "198.51.100.1, 203.0.113.7"}, "203.0.113.7", "http"),
    ({"X-Forwarded-For": "203.0.113.7, 10.0.0.2"}, "203.0.113.7", "http"),  # trusted
    ({"X-Forwarded-For": "2001:db8::1"}, "2001:db8::1", "http"),
    ({"X-Real-Ip": "192.0.2.9", "X-Forwarded-For": "203.0.113.7"}, "192.0.2.9", "http"),
    ({"X-Forwarded-For": "not-an-address"}, "127.0.0.1", "http"),
    ({"X-Forwarded-For": "localhost"}, "127.0.0.1", "http"),
    ({"X-Forwarded-For": "127.1"}, "127.0.0.1", "http"),  # inet_aton's short form
    ({"X-Forwarded-Proto": "https"}, "127.0.0.1", "https"),
    ({"X-Forwarded-Proto": "http, https"}, "127.0.0.1", "https"),
    ({"X-Scheme": "https", "X-Forwarded-Proto": "http"}, "127.0.0.1", "https"),
    ({"X-Forwarded-Proto": "gopher"}, "127.0.0.1", "http"),
]


def test_forwarded_headers_apply_by_tornados_rules_without_getaddrinfo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved: list[object] = []
    real = socket.getaddrinfo

    def counting(*args: object, **kwargs: object):
        resolved.append(args[0])
        return real(*args, **kwargs)

    async def scenario() -> list[tuple[str, str]]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        port = sock.getsockname()[1]
        server = ProxiedHTTPServer(
            web.Application([(r"/echo", Echo)]), xheaders=True, trusted_downstream=["10.0.0.2"]
        )
        server.add_sockets([sock])
        monkeypatch.setattr(socket, "getaddrinfo", counting)
        seen = []
        for headers, _, _ in CASES:
            answer = await asyncio.to_thread(ask, port, headers)
            seen.append((answer["ip"], answer["protocol"]))
        monkeypatch.setattr(socket, "getaddrinfo", real)
        server.stop()
        await server.close_all_connections()
        return seen

    seen = asyncio.run(scenario())
    assert seen == [(ip, protocol) for _, ip, protocol in CASES]
    assert resolved == []


def test_is_ip_takes_addresses_only() -> None:
    assert is_ip("192.0.2.1") and is_ip("::1") and is_ip("fe80::1%eth0")
    for text in ("", "192.0.2", "192.0.2.1\x00", "example.org", "::g", "1.2.3.4.5", "0x7f.1"):
        assert not is_ip(text), text
