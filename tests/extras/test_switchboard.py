"""A restarting Kubernetes replica keeps one listening socket: the standby application
answers 503 until the real one takes over, and the switch never closes the port (a
restarted replica used to refuse connections while it recovered its workloads)."""

from __future__ import annotations

import asyncio
import socket

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer

from scheduler.service.app import Switchboard


class Answer(web.RequestHandler):
    def initialize(self, status: int) -> None:
        self.status = status

    def get(self) -> None:
        self.set_status(self.status)
        self.finish({"status": self.status})


async def status_of(url: str) -> int:
    try:
        response = await AsyncHTTPClient().fetch(url)
    except HTTPClientError as error:
        return error.code
    return response.code


def test_the_switch_keeps_the_port_open_and_changes_who_answers() -> None:
    async def scenario() -> list[int]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        switch = Switchboard(web.Application([(r"/health", Answer, {"status": 503})]))
        server = HTTPServer(switch)
        server.listen(port, "127.0.0.1")
        url = f"http://127.0.0.1:{port}/health"
        seen = [await status_of(url)]
        switch.app = web.Application([(r"/health", Answer, {"status": 200})])
        seen.append(await status_of(url))
        server.stop()
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(scenario()) == [503, 200]
