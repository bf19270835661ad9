"""The OpenAI wire format: request bodies in, errors and response objects out.

Requests are pydantic models in strict mode (a string where a number belongs is an error, as in the
OpenAI API; an int is accepted for a float). Unknown fields are ignored, so clients that send newer
fields keep working. FastAPI validates a body against these models; ``tg_llm.server_app`` turns any
validation error into an ``APIError`` (HTTP 400, OpenAI's ``{"error": {...}}`` shape).

Fields this server cannot honour (``tools``, ``response_format`` other than text, images, ``n`` above
``MAX_N``, several prompts times ``n`` above ``MAX_CHOICES``) are rejected with a 400 naming the field,
never silently ignored. The response builders at the bottom produce the objects the ``openai`` client
parses: ``chat.completion``, ``chat.completion.chunk``, ``text_completion`` and ``usage``.
"""
from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 8            # choices per request (generated one after another, in the same queue slot)
MAX_CHOICES = 16     # prompts x n for a completions request
MAX_STOP = 4         # stop strings, as in the OpenAI API
MAX_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the legacy completions endpoint's default, as in the OpenAI API


class APIError(Exception):
    """An error a client caused (or may retry), sent as ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 for a request parameter."""
    return APIError(400, message, param=param, code=code)


# ---- request bodies ----

class _Strict(BaseModel):
    # (JSON's 1e400 parses to inf: an infinite repetition penalty would make NaN logits)
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool = False


class ContentPart(_Strict):
    model_config = ConfigDict(strict=True, extra="allow")
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    model_config = ConfigDict(strict=True, extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class ResponseFormat(_Strict):
    model_config = ConfigDict(strict=True, extra="allow")
    type: str


Temperature = Annotated[float, Field(ge=0, le=2)]
Penalty = Annotated[float, Field(ge=-2, le=2)]
Stop = str | Annotated[list[str], Field(max_length=MAX_STOP)] | None


class CommonRequest(_Strict):
    """Fields both endpoints share (OpenAI's, plus top_k / min_p / repetition_penalty as llama.cpp and vLLM have,
    and llama.cpp's spellings repeat_penalty / repeat_last_n). ``model`` may be left out: one model is served."""
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    n: Annotated[int, Field(ge=1)] = 1
    temperature: Temperature | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0)] | None = None
    repeat_penalty: Annotated[float, Field(gt=0)] | None = None
    repeat_last_n: Annotated[int, Field(ge=-1)] | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    stop: Stop = None
    seed: int | None = None
    user: str | None = None
    logit_bias: dict[str, float] | None = None


class ChatCompletionRequest(CommonRequest):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    response_format: ResponseFormat | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None


Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(CommonRequest):
    prompt: Prompt
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None
    suffix: str | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None


# ---- checks pydantic cannot express ----

def check_common(req: CommonRequest) -> None:
    """Rejections shared by both endpoints (the 400s for what this server does not implement)."""
    if req.n > MAX_N:
        raise invalid(f"n must be at most {MAX_N} on this server (choices are generated one after another)", "n")
    if req.logit_bias:
        raise invalid("logit_bias is not supported by this server", "logit_bias")
    if req.stream_options is not None and not req.stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if any(s == "" for s in stops):
        raise invalid("stop strings must not be empty", "stop")
    if req.repetition_penalty is not None and req.repeat_penalty is not None \
            and req.repetition_penalty != req.repeat_penalty:
        raise invalid("repetition_penalty and repeat_penalty are the same setting; send one", "repeat_penalty")


def check_chat(req: ChatCompletionRequest) -> None:
    check_common(req)
    if req.tools:
        raise invalid("tools (function calling) are not supported by this server; send the request without "
                      "'tools'", "tools", "unsupported_parameter")
    if req.functions:
        raise invalid("functions (function calling) are not supported by this server", "functions",
                      "unsupported_parameter")
    if req.tool_choice not in (None, "none"):
        raise invalid("tool_choice is not supported by this server (no tools)", "tool_choice", "unsupported_parameter")
    if req.response_format is not None and req.response_format.type != "text":
        raise invalid(f"response_format type {req.response_format.type!r} is not supported by this server "
                      "(only 'text': there is no constrained decoding)", "response_format", "unsupported_parameter")
    if req.top_logprobs and not req.logprobs:
        raise invalid("top_logprobs requires logprobs to be true", "top_logprobs")


def check_completion(req: CompletionRequest) -> None:
    check_common(req)
    if req.suffix:
        raise invalid("suffix (fill-in-the-middle) is not supported by this server", "suffix",
                      "unsupported_parameter")
    if req.best_of is not None and req.best_of != req.n:
        raise invalid("best_of is not supported by this server (it must be unset or equal to n)", "best_of",
                      "unsupported_parameter")
    if req.max_tokens == 0 and not req.echo:
        raise invalid("max_tokens must be at least 1 (0 is only allowed with echo, to score the prompt)",
                      "max_tokens")
    if req.stream and req.max_tokens == 0:
        raise invalid("max_tokens 0 cannot be streamed", "max_tokens")


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, str]]:
    """The messages as the chat template wants them: role + plain-text content."""
    out: list[dict[str, str]] = []
    for i, m in enumerate(req.messages):
        if m.model_extra and m.model_extra.get("tool_calls"):
            raise invalid("tool calls in messages are not supported by this server", f"messages[{i}].tool_calls",
                          "unsupported_parameter")
        if isinstance(m.content, list):
            parts = []
            for j, part in enumerate(m.content):
                if part.type != "text" or part.text is None:
                    raise invalid(f"content part type {part.type!r} is not supported (text only)",
                                  f"messages[{i}].content[{j}].type", "unsupported_parameter")
                parts.append(part.text)
            text = "".join(parts)
        elif m.content is None:
            raise invalid("a message needs content", f"messages[{i}].content")
        else:
            text = m.content
        role = "system" if m.role == "developer" else m.role
        out.append({"role": role, "content": text})
    return out


def stop_list(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def completion_prompts(prompt: Any) -> list[str | list[int]]:
    """The completions ``prompt`` field as a list of prompts (each a string or a list of token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise invalid("prompt must not be empty", "prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return list(prompt)


# ---- responses ----

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def error_chunk(err: APIError) -> dict[str, Any]:
    return err.body()
