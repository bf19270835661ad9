"""The OpenAI-compatible HTTP API (FastAPI) over an ``Engine``.

Routes: ``GET /`` (the chat page), ``GET /health`` (503 while loading, 200 when ready), ``GET /metrics``
(Prometheus text format: ``tg_llm.server_metrics``),
``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/chat/completions``, ``POST /v1/completions``.

A request is validated (``tg_llm.server_protocol``), tokenized, checked against the context, and put in
the engine's FIFO queue as a ``Job``; its outputs come back on an asyncio queue and become either one
JSON response or server-sent events (``data: {chunk}`` lines ending with ``data: [DONE]``). A client
that disconnects cancels its job; a request past ``timeout`` seconds gets a 504 (or, once streaming,
an error event) and its generation stops.

Every error is OpenAI's ``{"error": {"message", "type", "param", "code"}}``: 400 for bad parameters,
malformed JSON, wrong types (FastAPI's 422 is turned into this) and ``context_length_exceeded``;
401 for a missing or wrong API key; 404 for an unknown model or route; 429 when the queue is full;
503 while the model loads or once the server is shutting down; 504 on timeout. Pure-ASGI middlewares
(``tg_llm.server_middleware``) wrap the app: the API-key check on ``/v1/*``, one access-log line per request
(after its response has been sent, with the token counts when it generated), and reading every ``POST /v1/*``
body as JSON whatever its ``Content-Type``.
"""
from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from tg_llm.server_engine import Choice, Engine, Job, JobTimeout, Output
from tg_llm.server_middleware import AccessLog, APIKeyCheck, JSONBodies, error_response
from tg_llm.server_protocol import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    MAX_CHOICES,
    APIError,
    ChatCompletionRequest,
    CommonRequest,
    CompletionRequest,
    chat_messages,
    check_chat,
    check_completion,
    completion_prompts,
    invalid,
    new_id,
    now,
    stop_list,
    usage,
)

if TYPE_CHECKING:
    from tg_llm.server_metrics import Metrics

log = logging.getLogger("tg_llm.server")

DISCONNECT_POLL = 0.25  # seconds between disconnect checks while a non-streaming request waits


# ---- the app ----

def create_app(engine: Engine, api_key: str | None = None, timeout: float = 600.0) -> FastAPI:
    """The FastAPI application serving ``engine``; ``timeout``: seconds a request may take in all."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.stop()  # after uvicorn's graceful shutdown: the open streams have finished

    app = FastAPI(title="tg serve llm", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    metrics = _metrics(engine)
    api = _API(engine, timeout, metrics)

    @app.exception_handler(APIError)
    async def on_api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            err = APIError(404, f"Unknown request URL: {request.method} {request.url.path}.", code="unknown_url")
        elif exc.status_code == 405:
            err = APIError(405, f"Method {request.method} is not allowed for {request.url.path}.",
                           code="method_not_allowed")
        else:
            err = APIError(exc.status_code, str(exc.detail))
        return error_response(err)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(APIError(500, f"internal error: {type(exc).__name__}", "server_error"))

    @app.get("/", response_class=HTMLResponse)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(CHAT_PAGE(), headers={"Cache-Control": "no-cache"})

    @app.get("/health")
    async def health() -> JSONResponse:
        if engine.stop_at is not None:
            return JSONResponse({"status": "stopping", "model": engine.model_id}, status_code=503)
        if engine.state == "ready":
            return JSONResponse({"status": "ok", "model": engine.model_id, "queue": engine.pending})
        if engine.state == "failed":
            return JSONResponse({"status": "failed", "error": str(engine.error)}, status_code=503)
        return JSONResponse({"status": "loading", "model": engine.model_id}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.get("/metrics")
    async def prometheus() -> Response:
        if metrics is None:
            raise APIError(404, "/metrics needs the prometheus-client package (pip install prometheus-client)",
                           code="unknown_url")
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [api.model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        api.check_model(model_id)
        return api.model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await api.chat(body, request)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await api.complete(body, request)

    with_key = APIKeyCheck(JSONBodies(app), api_key)
    outer = AccessLog(with_key, metrics)
    app.state.asgi = outer
    return app


def _metrics(engine: Engine) -> Metrics | None:
    """The app's metrics (None when prometheus-client is missing: it is a dependency, but the rest of the
    server does not need it)."""
    try:
        from tg_llm.server_metrics import Metrics
    except ImportError:
        log.warning("prometheus-client is not installed: /metrics is off")
        return None
    return Metrics(engine)


def asgi(app: FastAPI) -> ASGIApp:
    """The app wrapped in its middlewares (what uvicorn serves)."""
    return app.state.asgi  # type: ignore[no-any-return]


def validation_error(exc: RequestValidationError) -> APIError:
    """FastAPI's 422 as OpenAI's 400: the first problem, naming the parameter."""
    errors = list(exc.errors())
    # a union of types (``stop``: a string or a list) reports one error per branch; a broken constraint
    # (too long, out of range) says more than "not a string"
    constraint = [e for e in errors if not str(e.get("type", "")).endswith("_type")]
    first = (constraint or errors or [{}])[0]
    kind = first.get("type", "")
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if kind == "json_invalid":
        ctx = first.get("ctx", {}) or {}
        detail = f" ({ctx['error']})" if ctx.get("error") else ""
        return invalid("We could not parse the JSON body of your request" + detail +
                       ". The body must be a JSON object.", None, "invalid_json")
    # a union of types reports one error per branch: name the field, not the branch
    param = _param_name(loc)
    if kind == "missing":
        return invalid(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    if kind == "model_attributes_type" and not loc:
        return invalid("The request body must be a JSON object.", None, "invalid_type")
    message = first.get("msg", "invalid value")
    given = first.get("input")
    shown = json.dumps(given)[:80] if _is_json(given) else type(given).__name__
    code = "invalid_type" if kind.endswith("_type") else "invalid_value"
    return invalid(f"Invalid value for '{param}': {message} (got {shown}).", param, code)


def _param_name(loc: list[str]) -> str:
    """``["messages", "0", "role"]`` -> ``messages[0].role``; union branch names (``str``, ``list[int]``,
    ``constrained-...``) are dropped."""
    out = ""
    for part in loc:
        if part.isdigit():
            out += f"[{part}]"
        elif "[" in part or part in ("str", "int", "float", "bool") or part.startswith(("function-", "constrained")):
            continue
        else:
            out += ("." if out else "") + part
    return out or "body"


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _chat_page() -> str:
    return resources.files("tg_llm").joinpath("static", "chat.html").read_text(encoding="utf-8")


_PAGE: list[str] = []


def CHAT_PAGE() -> str:  # noqa: N802 - a constant read once
    if not _PAGE:
        _PAGE.append(_chat_page())
    return _PAGE[0]


# ---- the endpoints' work ----

class _ChoiceState:
    """What one choice has produced so far."""

    def __init__(self, tokenizer: Any) -> None:
        self.text = ""
        self.tokens: list[int] = []
        self.token_logprobs: list[float] = []
        self.top: list[list[tuple[int | str, float]]] = []
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.offsets: list[int] = []  # text offset of each generated token in the raw decoded text
        self._raw_len = 0
        self._tokenizer = tokenizer

    def add(self, event: Any) -> None:
        token = getattr(event, "token_id", None)
        if token is not None and getattr(event, "counted", True):
            self.offsets.append(self._raw_len)
            self._raw_len += len(self._decoder.decode(self._tokenizer.token_bytes(token)))
            self.tokens.append(int(token))
            lp = getattr(event, "logprob", None)
            self.token_logprobs.append(float(lp) if lp is not None else 0.0)
            self.top.append(list(getattr(event, "top_logprobs", None) or []))
        self.text += getattr(event, "text", "") or ""
        if getattr(event, "finish_reason", None) is not None:
            self.finish_reason = event.finish_reason
            self.prompt_tokens = int(getattr(event, "prompt_tokens", 0) or self.prompt_tokens)
            self.completion_tokens = int(getattr(event, "completion_tokens", 0) or len(self.tokens))


class _API:
    def __init__(self, engine: Engine, timeout: float, metrics: Metrics | None = None) -> None:
        self.engine = engine
        self.timeout = timeout
        self.metrics = metrics

    # ---- shared ----

    def model_card(self) -> dict[str, Any]:
        e = self.engine
        card: dict[str, Any] = {"id": e.model_id, "object": "model", "created": e.created, "owned_by": "tgcore",
                                "aliases": e.aliases, "ready": e.state == "ready", "sampling": e.sampling}
        if e.state == "ready":
            card["max_context"] = e.max_context
        return card

    def check_model(self, name: str | None) -> None:
        """Any of the served model's names, or none at all (one model is served); else a 404."""
        if name is not None and name != self.engine.model_id and name not in self.engine.aliases:
            raise APIError(404, f"The model '{name}' does not exist. This server serves '{self.engine.model_id}'.",
                           "invalid_request_error", "model", "model_not_found")

    def ready(self) -> Engine:
        e = self.engine
        if e.stop_at is not None:
            raise APIError(503, "The server is shutting down; it takes no new requests.", "server_error", None,
                           "server_shutting_down")
        if e.state == "loading":
            raise APIError(503, "The model is still loading; retry shortly (GET /health says when it is ready).",
                           "server_error", None, "model_loading", {"Retry-After": "2"})
        if e.state == "failed":
            raise APIError(503, f"The model failed to load: {e.error}", "server_error", None, "model_failed")
        return e

    def token_text(self, token: int | str) -> str:
        """A token's text for logprobs (a token id, or the text the generator already gave)."""
        if isinstance(token, str):
            return token
        return self.engine.tokenizer.token_bytes(token).decode("utf-8", errors="backslashreplace")

    def token_bytes(self, token: int | str) -> list[int]:
        if isinstance(token, str):
            return list(token.encode("utf-8"))
        return list(self.engine.tokenizer.token_bytes(token))

    def choices_for(self, req: CommonRequest, prompts: list[list[int]], max_tokens: int | None,
                    logprobs: bool, top_logprobs: int, echo: bool = False) -> list[Choice]:
        """Validate lengths against the context and build ``len(prompts) * n`` choices."""
        ctx = self.engine.max_context
        choices = []
        for ids in prompts:
            if not ids:
                raise invalid("the prompt is empty (no tokens)", "prompt")
            vocab = self.engine.tokenizer.vocab_size
            if any(not 0 <= t < vocab for t in ids):
                raise invalid(f"token ids in the prompt must be in 0..{vocab - 1}", "prompt")
            limit = max_tokens if max_tokens is not None else ctx - len(ids)
            if len(ids) + max(limit, 1) > ctx:
                asked = f"{len(ids) + limit} tokens ({len(ids)} in the prompt, {limit} for the completion)" \
                    if max_tokens is not None else f"{len(ids)} tokens in the prompt (and no room for the completion)"
                raise APIError(400, f"This model's maximum context length is {ctx} tokens. However, you requested "
                                    f"{asked}. Please reduce the prompt or the completion length.",
                               "invalid_request_error",
                               "messages" if isinstance(req, ChatCompletionRequest) else "prompt",
                               "context_length_exceeded")
            sampling = self.sampling_for(req)
            for j in range(req.n):
                choices.append(Choice(
                    prompt_ids=list(ids), max_tokens=limit, stop=stop_list(req.stop),
                    seed=None if req.seed is None else req.seed + j, **sampling,
                    frequency_penalty=req.frequency_penalty or 0.0, presence_penalty=req.presence_penalty or 0.0,
                    logprobs=logprobs, top_logprobs=top_logprobs, prompt_logprobs=echo and logprobs))
        return choices

    def sampling_for(self, req: CommonRequest) -> dict[str, Any]:
        """The request's sampling fields, the server's defaults (``engine.sampling``) for those it leaves out."""
        given = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
                 "repetition_penalty": req.repetition_penalty if req.repetition_penalty is not None
                 else req.repeat_penalty, "repeat_last_n": req.repeat_last_n}
        return {k: v if v is not None else self.engine.sampling[k] for k, v in given.items()}

    def submit(self, choices: list[Choice]) -> Job:
        job = Job(choices, asyncio.get_running_loop(), time.monotonic() + self.timeout)
        if not self.engine.try_submit(job):
            raise APIError(429, f"The server is busy: {self.engine.max_queue} requests are already queued. "
                                "Retry later.", "server_overloaded", None, "queue_full", {"Retry-After": "5"})
        return job

    async def outputs(self, job: Job) -> AsyncIterator[Output]:
        """The job's outputs until its end; an error output or the deadline raises ``APIError``."""
        async for batch in self.batches(job):
            for out in batch:
                yield out

    async def batches(self, job: Job) -> AsyncIterator[list[Output]]:
        """The job's outputs until its end, in batches of those that arrived together (a decode step's tokens for
        every choice come in one wake-up; a stream writes each batch in one send); an error output or the deadline
        raises ``APIError`` (after the outputs before it)."""
        while True:
            remaining = job.deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                if job.outputs.empty():
                    async with asyncio.timeout(remaining):
                        arrived = [await job.outputs.get()]
                else:
                    arrived = []
            except TimeoutError:
                job.cancel()
                raise self.timeout_error() from None
            while not job.outputs.empty():
                arrived.append(job.outputs.get_nowait())
            batch: list[Output] = []
            for out in arrived:
                if out.kind == "end":
                    if batch:
                        yield batch
                    return
                if out.kind == "error":
                    if batch:
                        yield batch
                    job.cancel()
                    raise self.generation_error(out.payload)
                batch.append(out)
            yield batch

    def timeout_error(self) -> APIError:
        return APIError(504, f"The request took longer than the server's limit of {self.timeout:g} seconds "
                             "(queue wait included).", "timeout_error", None, "timeout")

    def generation_error(self, exc: BaseException) -> APIError:
        from tg_llm.model import ContextLengthError
        if isinstance(exc, JobTimeout):
            return self.timeout_error()
        if isinstance(exc, ContextLengthError):
            return APIError(400, str(exc), "invalid_request_error", None, "context_length_exceeded")
        if isinstance(exc, ValueError):
            return invalid(str(exc))
        # The worker logged the traceback; the message (paths, shapes, internals) stays in the server's log.
        return APIError(500, f"generation failed ({type(exc).__name__}); the server log has the details",
                        "server_error")

    async def collect(self, job: Job, request: Request, n_choices: int) -> tuple[list[_ChoiceState], list[Any]]:
        """Run a job to its end for a non-streaming response (cancelled if the client disconnects)."""
        states = [_ChoiceState(self.engine.tokenizer) for _ in range(n_choices)]
        prompt_lps: list[Any] = [None] * n_choices
        watcher = asyncio.create_task(_watch_disconnect(request, job))
        try:
            async for out in self.outputs(job):
                if out.kind == "event":
                    states[out.index].add(out.payload)
                elif out.kind == "prompt_logprobs":
                    prompt_lps[out.index] = out.payload
        finally:
            watcher.cancel()
            job.cancel()
        return states, prompt_lps

    def record_usage(self, request: Request, job: Job, prompt_tokens: int, completion_tokens: int,
                     finish: str | None) -> dict[str, int]:
        """The usage object; also what the access log line and the metrics say about this request."""
        u = usage(prompt_tokens, completion_tokens)
        request.state.usage = {**u, "ttft": job.ttft, "decode_tok_s": job.decode_tokens_per_second,
                               "finish": finish}
        if self.metrics is not None:
            self.metrics.generation(job, prompt_tokens, completion_tokens)
        return u

    # ---- chat ----

    async def chat(self, req: ChatCompletionRequest, request: Request) -> Response:
        self.check_model(req.model)
        check_chat(req)
        engine = self.ready()
        messages = chat_messages(req)
        from tg_llm.chat_template import ChatTemplateError
        tok = engine.tokenizer
        try:
            ids = tok.encode_chat(messages, add_generation_prompt=True)
        except ChatTemplateError as e:
            raise invalid(str(e), "messages") from e
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        choices = self.choices_for(req, [ids], max_tokens, bool(req.logprobs), req.top_logprobs or 0)
        job = self.submit(choices)
        rid, created = new_id("chatcmpl"), now()
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return _sse(self.chat_stream(job, request, req, rid, created, len(ids), include_usage))
        states, _ = await self.collect(job, request, len(choices))
        completion = sum(s.completion_tokens for s in states)
        u = self.record_usage(request, job, len(ids), completion, states[0].finish_reason)
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": created, "model": engine.model_id,
            "system_fingerprint": _fingerprint(),
            "choices": [{"index": i, "message": {"role": "assistant", "content": s.text},
                         "logprobs": self.chat_logprobs(s.tokens, s.token_logprobs, s.top) if req.logprobs else None,
                         "finish_reason": s.finish_reason or "stop"} for i, s in enumerate(states)],
            "usage": u})

    def chat_logprobs(self, tokens: list[int], lps: list[float], tops: list[list[tuple[int | str, float]]]) -> dict:
        def entry(t: int | str, lp: float) -> dict[str, Any]:
            return {"token": self.token_text(t), "logprob": lp, "bytes": self.token_bytes(t)}
        return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in top]}
                            for t, lp, top in zip(tokens, lps, tops, strict=True)]}

    async def finish_stream(self, job: Job, request: Request, rid: str, prompt_tokens: int,
                            states: list[_ChoiceState], base: dict[str, Any], include_usage: bool,
                            chunks: AsyncIterator[str]) -> AsyncIterator[str]:
        """What every stream shares around its own chunks: the usage chunk when asked for, an API error as an
        SSE error event, the job cancelled however the stream ends (a client that goes away frees its slot),
        and the closing ``[DONE]``."""
        try:
            async for line in chunks:
                yield line
            completion = sum(s.completion_tokens for s in states)
            u = self.record_usage(request, job, prompt_tokens, completion, states[0].finish_reason)
            if include_usage:
                yield _data({**base, "choices": [], "usage": u})
        except APIError as err:
            yield _data(err.body())
        except (asyncio.CancelledError, GeneratorExit):
            log.info("client went away: stopped %s after %d tokens", rid, sum(len(s.tokens) for s in states))
            raise
        finally:
            job.cancel()
        yield "data: [DONE]\n\n"

    def chat_stream(self, job: Job, request: Request, req: ChatCompletionRequest, rid: str, created: int,
                          prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.engine.model_id,
                "system_fingerprint": _fingerprint()}
        n = len(job.choices)
        states = [_ChoiceState(self.engine.tokenizer) for _ in range(n)]

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> str:
            body: dict[str, Any] = {**base, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                                         "finish_reason": finish}]}
            if include_usage:
                body["usage"] = None
            return _data(body)

        def lines(index: int, outs: list[Output]) -> Iterator[str]:
            events = [out.payload for out in outs if out.kind == "event"]
            if not events:
                return
            state = states[index]
            before = len(state.tokens)
            for event in events:
                state.add(event)
            lp = None
            if req.logprobs and len(state.tokens) > before:
                lp = self.chat_logprobs(state.tokens[before:], state.token_logprobs[before:], state.top[before:])
            text = "".join(getattr(event, "text", "") or "" for event in events)
            if text or lp is not None:
                yield chunk(index, {"content": text}, None, lp)
            if state.finish_reason is not None:
                yield chunk(index, {}, state.finish_reason)

        async def body() -> AsyncIterator[str]:
            yield "".join(chunk(i, {"role": "assistant", "content": ""}) for i in range(n))
            async for batch in self.batches(job):
                if sent := "".join(line for i, outs in _by_choice(batch) for line in lines(i, outs)):
                    yield sent

        return self.finish_stream(job, request, rid, prompt_tokens, states, base, include_usage, body())

    # ---- completions ----

    async def complete(self, req: CompletionRequest, request: Request) -> Response:
        self.check_model(req.model)
        check_completion(req)
        engine = self.ready()
        tok = engine.tokenizer
        prompts: list[list[int]] = []
        texts: list[str] = []
        for i, p in enumerate(completion_prompts(req.prompt)):
            if isinstance(p, str):
                ids = tok.encode(p, add_special=True, parse_special=True)
                texts.append(p)
            elif isinstance(p, list) and all(isinstance(t, int) for t in p):
                if any(not 0 <= t < tok.vocab_size for t in p):
                    raise invalid(f"token ids in the prompt must be in 0..{tok.vocab_size - 1}", "prompt")
                ids = list(p)
                texts.append(tok.decode(ids))
            else:
                raise invalid(f"prompt[{i}] must be a string or a list of token ids", "prompt")
            prompts.append(ids)
        if len(prompts) * req.n > MAX_CHOICES:
            raise invalid(f"at most {MAX_CHOICES} choices (prompts times n) per request on this server", "n")
        max_tokens = req.max_tokens if req.max_tokens is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
        logprobs = req.logprobs is not None
        choices = self.choices_for(req, prompts, max_tokens, logprobs, req.logprobs or 0, echo=req.echo)
        job = self.submit(choices)
        rid, created = new_id("cmpl"), now()
        prompt_tokens = sum(len(ids) for ids in prompts) * req.n
        echo_texts = [texts[i // req.n] for i in range(len(choices))] if req.echo else ["" for _ in choices]
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return _sse(self.completion_stream(job, request, req, rid, created, prompt_tokens, echo_texts,
                                               include_usage))
        states, prompt_lps = await self.collect(job, request, len(choices))
        completion = sum(s.completion_tokens for s in states)
        u = self.record_usage(request, job, prompt_tokens, completion, states[0].finish_reason)
        out = []
        for i, s in enumerate(states):
            lp = None
            if logprobs:
                lp = self.completion_logprobs(s, prompt_lps[i], echo_texts[i])
            finish = s.finish_reason or ("length" if choices[i].max_tokens == 0 else "stop")
            out.append({"text": echo_texts[i] + s.text, "index": i, "logprobs": lp, "finish_reason": finish})
        return JSONResponse({"id": rid, "object": "text_completion", "created": created, "model": engine.model_id,
                             "system_fingerprint": _fingerprint(), "choices": out, "usage": u})

    def completion_logprobs(self, s: _ChoiceState | None, prompt_lp: Any, echo_text: str,
                            offset_base: int | None = None, first: int = 0) -> dict[str, Any]:
        """OpenAI's legacy logprobs object: tokens, token_logprobs, top_logprobs, text_offset."""
        tokens: list[str] = []
        token_lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        if prompt_lp:
            dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
            at = 0
            for t, lp, top in prompt_lp:
                tokens.append(self.token_text(t))
                token_lps.append(lp)
                tops.append(None if lp is None else {self.token_text(a): alp for a, alp in top})
                offsets.append(at)
                at += len(dec.decode(self.engine.tokenizer.token_bytes(t)))
        if s is not None:
            base = len(echo_text) if offset_base is None else offset_base
            for k in range(first, len(s.tokens)):
                tokens.append(self.token_text(s.tokens[k]))
                token_lps.append(s.token_logprobs[k])
                tops.append({self.token_text(a): alp for a, alp in s.top[k]})
                offsets.append(base + s.offsets[k])
        return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}

    def completion_stream(self, job: Job, request: Request, req: CompletionRequest, rid: str, created: int,
                                prompt_tokens: int, echo_texts: list[str], include_usage: bool) -> AsyncIterator[str]:
        base = {"id": rid, "object": "text_completion", "created": created, "model": self.engine.model_id,
                "system_fingerprint": _fingerprint()}
        n = len(job.choices)
        states = [_ChoiceState(self.engine.tokenizer) for _ in range(n)]
        logprobs = req.logprobs is not None

        def chunk(index: int, text: str, finish: str | None = None, lp: Any = None) -> str:
            body: dict[str, Any] = {**base, "choices": [{"text": text, "index": index, "logprobs": lp,
                                                         "finish_reason": finish}]}
            if include_usage:
                body["usage"] = None
            return _data(body)

        def lines(i: int, outs: list[Output]) -> Iterator[str]:
            for out in outs:
                if out.kind == "prompt_logprobs":
                    yield chunk(i, echo_texts[i], None, self.completion_logprobs(None, out.payload, ""))
            events = [out.payload for out in outs if out.kind == "event"]
            if not events:
                return
            state = states[i]
            if req.echo and not logprobs and not state.tokens and not state.text:
                yield chunk(i, echo_texts[i])
            before = len(state.tokens)
            for event in events:
                state.add(event)
            lp = None
            if logprobs and len(state.tokens) > before:
                lp = self.completion_logprobs(state, None, echo_texts[i], first=before)
            text = "".join(getattr(event, "text", "") or "" for event in events)
            if text or lp is not None:
                yield chunk(i, text, None, lp)
            if state.finish_reason is not None:
                yield chunk(i, "", state.finish_reason)

        async def body() -> AsyncIterator[str]:
            async for batch in self.batches(job):
                if sent := "".join(line for i, outs in _by_choice(batch) for line in lines(i, outs)):
                    yield sent

        return self.finish_stream(job, request, rid, prompt_tokens, states, base, include_usage, body())


async def _watch_disconnect(request: Request, job: Job) -> None:
    """Cancel ``job`` when the client of a non-streaming request goes away."""
    while not job.cancelled.is_set():
        if await request.is_disconnected():
            job.cancel()
            log.info("client went away: stopped a non-streaming request")
            return
        await asyncio.sleep(DISCONNECT_POLL)


def _by_choice(batch: list[Output]) -> list[tuple[int, list[Output]]]:
    """A batch's outputs per choice, choices in order of their first output, each choice's in order: a stream sends
    one chunk per choice for the tokens that came together (a wake-up every ``HANDOFF_INTERVAL_S`` carries several
    per stream; a chunk each cost the client a parse and the event loop an encoding, CPU taken from the model's
    threads)."""
    by: dict[int, list[Output]] = {}
    for out in batch:
        by.setdefault(out.index, []).append(out)
    return list(by.items())


def _data(obj: Any) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def _sse(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@functools.cache
def _fingerprint() -> str:  # (cached: the package metadata lookup took 0.5-15 ms of the event loop per request)
    try:
        from importlib.metadata import version
        return "tg-llm-" + version("tg-llm")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "tg-llm"
