"""The server's pure-ASGI middlewares and the OpenAI error response they share with the app.

In: an ASGI app. Out: the same app behind ``APIKeyCheck`` (``/v1/*`` and ``/metrics`` need the key when one is
set), ``JSONBodies`` (every ``POST /v1/*`` body read as JSON whatever its ``Content-Type``) and ``AccessLog``
(one line per request after its response was sent, with the token counts when it generated).
"""
from __future__ import annotations

import hmac
import logging
import time
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tg_llm.server_protocol import APIError

if TYPE_CHECKING:
    from tg_llm.server_metrics import Metrics

access_log = logging.getLogger("tg_llm.server.access")


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


# ---- middleware ----

class AccessLog:
    """One line per request once its response is complete: client, request line, status, bytes, seconds,
    and what a generating endpoint left in ``request.state.usage``: prompt and completion tokens, time to
    first token (queue wait included) and the decode rate (from the first token to the last: not diluted
    by the queue or the prefill). Each request is also counted in ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status, sent = 0, 0

        async def send_logged(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            client = scope.get("client")
            who = f"{client[0]}:{client[1]}" if client else "-"
            query = scope.get("query_string", b"").decode("latin-1")
            target = scope.get("path", "") + (f"?{query}" if query else "")
            extra = ""
            info = scope.get("state", {}).get("usage")
            if info:
                extra = f" prompt={info['prompt_tokens']} completion={info['completion_tokens']}"
                if info.get("ttft") is not None:
                    extra += f" ttft={info['ttft']:.3f}s"
                if info.get("decode_tok_s") is not None:
                    extra += f" decode={info['decode_tok_s']:.1f}tok/s"
                if info.get("finish"):
                    extra += f" finish={info['finish']}"
            if self.metrics is not None:
                self.metrics.request(scope.get("path", ""), status or 499)
            access_log.info('%s "%s %s HTTP/%s" %d %d %.3fs%s', who, scope.get("method", "-"), target,
                            scope.get("http_version", "1.1"), status or 499, sent, time.perf_counter() - start, extra)


PROTECTED = ("/v1", "/metrics")


class APIKeyCheck:
    """With an API key set, ``/v1/*`` and ``/metrics`` need ``Authorization: Bearer <key>`` (401 otherwise)."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.api_key and scope["type"] == "http" and scope.get("path", "").startswith(PROTECTED):
            headers = dict(scope.get("headers", []))
            given = headers.get(b"authorization", b"").decode("latin-1")
            scheme, _, token = given.partition(" ")
            if not given:
                err = APIError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.",
                               "invalid_request_error", None, "missing_api_key")
            elif scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
                err = APIError(401, "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key")
            else:
                err = None
            if err is not None:
                await error_response(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class JSONBodies:
    """``POST /v1/*`` bodies are JSON whatever the ``Content-Type`` says: ``curl -d '{...}'`` sends
    ``application/x-www-form-urlencoded`` and some clients send no header at all. A body that is not JSON
    still gets the usual 400 ``invalid_json``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path", "").startswith("/v1/"):
            headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)

