"""uvicorn's HTTP protocol with deadlines for slow clients (``memory-agent serve`` runs it).

uvicorn bounds only the idle time between requests (``timeout_keep_alive``): a client
that sends its headers a byte at a time, or a declared body a byte every few seconds,
keeps its connection (and a worker's socket and buffers) forever. Here:

* the request line and headers must be complete within :data:`HEADER_SECONDS` of the
  connection opening or of the previous response (else the connection closes, with a 408
  when part of a request had come);
* a request body may not stall longer than :data:`BODY_IDLE_SECONDS` between two pieces
  (else the connection closes and the app sees the client leave). Time while the server
  itself stopped reading (flow control) does not count;
* a whole request body must arrive within :data:`BODY_TOTAL_SECONDS` of its headers (a body
  trickled a byte every few seconds is never idle long, yet would hold the connection for
  ever); 32 MB, the largest body (an import), takes 60 s at 4.3 Mbit/s.

A response, however long it streams (SSE), is not limited.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from core.env_settings import env_seconds


def configured_deadlines() -> tuple[float, float, float]:
    """The headers', a stalled body's and a whole body's seconds; `serve` reads them before it starts
    its workers, so a bad value stops it there (at a worker's import it crashed each one, restarted for ever)."""
    return (
        env_seconds("MEMORY_AGENT_HEADER_TIMEOUT", 10),
        env_seconds("MEMORY_AGENT_BODY_IDLE_TIMEOUT", 10),
        env_seconds("MEMORY_AGENT_BODY_TIMEOUT", 60),
    )


HEADER_SECONDS, BODY_IDLE_SECONDS, BODY_TOTAL_SECONDS = configured_deadlines()
_TIMEOUT_TEXT = f"The request headers took longer than {HEADER_SECONDS:g} s.".encode()
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\nconnection: close\r\n"
    b"content-length: " + str(len(_TIMEOUT_TEXT)).encode() + b"\r\n\r\n" + _TIMEOUT_TEXT
)


class DeadlineHttpProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_total_timer: asyncio.TimerHandle | None = None
    _request_begun = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True

    def on_headers_complete(self) -> None:
        self._cancel(self._header_timer)
        self._header_timer = None
        self._request_begun = False
        super().on_headers_complete()
        self._arm_body_timer()
        self._cancel(self._body_total_timer)
        self._body_total_timer = self.loop.call_later(BODY_TOTAL_SECONDS, self._body_too_slow)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._arm_body_timer()

    def on_message_complete(self) -> None:
        self._cancel(self._body_timer)
        self._cancel(self._body_total_timer)
        self._body_timer = self._body_total_timer = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request's headers are held to the same deadline

    # ------------------------------------------------------------------ timers
    def _arm_header_timer(self) -> None:
        self._cancel(self._header_timer)
        self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_too_slow)

    def _arm_body_timer(self) -> None:
        self._cancel(self._body_timer)
        self._body_timer = self.loop.call_later(BODY_IDLE_SECONDS, self._body_stalled)

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._request_begun:  # part of a request came: say why (an idle connection just closes)
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()

    def _body_stalled(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # we stopped reading, not the client: wait on
            self._arm_body_timer()
            return
        self.transport.close()

    def _body_too_slow(self) -> None:
        self._body_total_timer = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # we stopped reading (the app is busy), not the client: a moment more
            self._body_total_timer = self.loop.call_later(1.0, self._body_too_slow)
            return
        self.transport.close()

    def _cancel_timers(self) -> None:
        self._cancel(self._header_timer)
        self._cancel(self._body_timer)
        self._cancel(self._body_total_timer)
        self._header_timer = self._body_timer = self._body_total_timer = None

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()
