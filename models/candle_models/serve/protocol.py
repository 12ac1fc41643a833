"""OpenAI's request and response shapes: requests checked field by field into
plain values, and errors as OpenAI writes them
(``{"error": {"message", "type", "param", "code"}}``).

Status codes: 400 for a request that is malformed or has a field of the
wrong type or out of range, 401 for a missing or wrong key, 404 for an
unknown model or path, 413 for a body over the limit, 422 for a valid
request asking for what this server does not implement (tools, logprobs,
n > 1...), 429 when the queue is full."""

from __future__ import annotations

import json
import math
import numbers
import time
import uuid
from dataclasses import dataclass

#: OpenAI's limits on stop texts and embedding inputs.
MAX_STOP_TEXTS = 4
MAX_EMBEDDING_INPUTS = 2048


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def parse_json(body: bytes) -> dict:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the request body is not UTF-8 (byte {exc.start})", code="invalid_body") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {_json_type(value)}", code="invalid_body")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _json_type(value) -> str:
    for kind, name in ((bool, "a boolean"), (str, "a string"), (dict, "an object"), (list, "an array"),
                       (numbers.Integral, "an integer"), (numbers.Real, "a number")):
        if isinstance(value, kind):
            return name
    return "null"


# ---- fields ----------------------------------------------------------------------------------------------
class Fields:
    """A request's fields, read one by one with their checks; ``done`` refuses the fields left unread."""

    def __init__(self, body: dict):
        self.body, self.read = body, set()

    def get(self, name: str, kind: str, default=None, valid=None, requirement: str | None = None):
        """The field's value, or ``default`` when absent or null. ``kind`` is "string", "boolean",
        "integer", "number", "array" or "object"; ``valid`` a further check, ``requirement`` its words."""
        self.read.add(name)
        value = self.body.get(name)
        if value is None:
            return default
        want = requirement or f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
        if not _is(value, kind):
            raise ApiError(400, f"'{name}' must be {want}, got {_json_type(value)}", name, "invalid_type")
        if valid is not None and not valid(value):
            raise ApiError(400, f"'{name}' must be {want}, got {json.dumps(value)[:80]}", name, "invalid_value")
        return value

    def required(self, name: str, kind: str, **checks):
        value = self.get(name, kind, **checks)
        if value is None:
            raise ApiError(400, f"'{name}' is required", name, "missing_required_parameter")
        return value

    def unsupported(self, name: str, allowed, what: str) -> None:
        """Refuses (422) a field this server does not implement, unless it holds a value that asks for
        nothing (``allowed(value)``)."""
        self.read.add(name)
        value = self.body.get(name)
        if value is not None and not allowed(value):
            raise ApiError(422, f"'{name}' is not supported by this server: {what}", name, "unsupported_parameter")

    def done(self) -> None:
        extra = sorted(set(self.body) - self.read)
        if extra:
            raise ApiError(400, f"unrecognized request argument{'s' if len(extra) > 1 else ''}: "
                                f"{', '.join(extra)}", extra[0], "unknown_parameter")


def _is(value, kind: str) -> bool:
    if kind == "number":
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "integer":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "array": list, "object": dict}[kind])


# ---- requests --------------------------------------------------------------------------------------------
@dataclass
class Sampling:
    """What the sampler and the stop rules take, from the fields every completion request shares."""

    max_tokens: int | None
    temperature: float
    top_p: float | None
    top_k: int | None
    seed: int | None
    stop: tuple
    repeat_penalty: float
    ignore_eos: bool
    stream: bool
    include_usage: bool


def sampling(f: Fields) -> Sampling:
    """The fields /v1/chat/completions and /v1/completions share; unsupported ones are refused."""
    max_tokens = f.get("max_tokens", "integer", valid=lambda n: n >= 1, requirement="an integer >= 1")
    max_completion = f.get("max_completion_tokens", "integer", valid=lambda n: n >= 1,
                           requirement="an integer >= 1")
    stop = f.body.get("stop")
    f.read.add("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif (isinstance(stop, list) and len(stop) <= MAX_STOP_TEXTS
          and all(isinstance(s, str) for s in stop)):
        stop = tuple(stop)
    else:
        raise ApiError(400, f"'stop' must be a string or an array of at most {MAX_STOP_TEXTS} strings",
                       "stop", "invalid_value")
    if any(not s for s in stop):
        raise ApiError(400, "'stop' texts must not be empty", "stop", "invalid_value")
    stream = f.get("stream", "boolean", False)
    options = f.get("stream_options", "object", {})
    if set(options) - {"include_usage"} or not isinstance(options.get("include_usage", False), bool):
        raise ApiError(400, "'stream_options' takes only include_usage (a boolean)", "stream_options",
                       "invalid_value")
    if options and not stream:
        raise ApiError(400, "'stream_options' is only allowed with stream: true", "stream_options",
                       "invalid_value")
    f.unsupported("n", lambda n: n == 1, "one choice per request (n = 1)")
    f.unsupported("logprobs", lambda v: v is False or v == 0, "log probabilities are not computed")
    f.unsupported("top_logprobs", lambda v: v == 0, "log probabilities are not computed")
    f.unsupported("logit_bias", lambda v: v == {}, "logit biases")
    f.unsupported("presence_penalty", lambda v: v == 0, "use repeat_penalty (as llama.cpp's server does)")
    f.unsupported("frequency_penalty", lambda v: v == 0, "use repeat_penalty (as llama.cpp's server does)")
    f.get("user", "string")  # an end-user id for abuse monitoring: accepted, not used
    return Sampling(
        max_tokens=max_completion if max_completion is not None else max_tokens,
        temperature=float(f.get("temperature", "number", 1.0, lambda t: 0 <= t <= 2, "a number in [0, 2]")),
        top_p=f.get("top_p", "number", None, lambda p: 0 < p <= 1, "a number in (0, 1]"),
        top_k=f.get("top_k", "integer", None, lambda k: k >= 1, "an integer >= 1"),
        seed=f.get("seed", "integer", None, lambda s: -2**63 <= s < 2**64, "a 64-bit integer"),
        stop=stop,
        repeat_penalty=float(f.get("repeat_penalty", "number", 1.0, lambda r: r > 0, "a number > 0")),
        ignore_eos=f.get("ignore_eos", "boolean", False),
        stream=stream, include_usage=options.get("include_usage", False))


ROLES = ("system", "developer", "user", "assistant")


def chat_messages(f: Fields) -> list[dict]:
    """The conversation as the chat template takes it: roles and text contents."""
    messages = f.required("messages", "array", valid=bool, requirement="a non-empty array of messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"'{where}' must be an object, got {_json_type(message)}", where, "invalid_type")
        role = message.get("role")
        if role == "tool" or message.get("tool_calls") or message.get("function_call"):
            raise ApiError(422, f"'{where}': tool calls are not supported by this server", where,
                           "unsupported_parameter")
        if role not in ROLES:
            raise ApiError(400, f"'{where}.role' must be one of {', '.join(ROLES)}, got {json.dumps(role)}",
                           f"{where}.role", "invalid_value")
        unknown = set(message) - {"role", "content", "name"}
        if unknown:
            raise ApiError(400, f"'{where}' has unrecognized fields: {', '.join(sorted(unknown))}", where,
                           "unknown_parameter")
        out.append({"role": "system" if role == "developer" else role,
                    "content": _content(message.get("content"), f"{where}.content")})
    return out


def _content(content, where: str) -> str:
    """A message's text: a string, or an array of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ApiError(400, f"'{where}[{j}]' must be a content part object with a type", where,
                               "invalid_type")
            if part["type"] != "text":
                raise ApiError(422, f"'{where}[{j}]': {part['type']} content is not supported (text only)", where,
                               "unsupported_parameter")
            if not isinstance(part.get("text"), str):
                raise ApiError(400, f"'{where}[{j}].text' must be a string", where, "invalid_type")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"'{where}' must be a string or a non-empty array of text parts, got "
                        f"{_json_type(content)}", where, "invalid_type")


def completion_prompt(f: Fields, vocab_size: int) -> str | list[int]:
    """/v1/completions' prompt: a string, or token ids (an array of integers); one prompt per request."""
    prompt = f.body.get("prompt")
    f.read.add("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if (isinstance(prompt, list) and prompt and all(_is(t, "integer") for t in prompt)):
        if not all(0 <= t < vocab_size for t in prompt):
            raise ApiError(400, f"'prompt' token ids must be in [0, {vocab_size})", "prompt", "invalid_value")
        return prompt
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(422, "'prompt': one prompt per request (n = 1)", "prompt", "unsupported_parameter")
    raise ApiError(400, "'prompt' must be a non-empty string or array of token ids", "prompt", "invalid_value")


def embedding_inputs(f: Fields) -> list[str]:
    value = f.body.get("input")
    f.read.add("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, "'input' must be a string or a non-empty array of strings", "input", "invalid_value")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise ApiError(400, f"'input' may hold at most {MAX_EMBEDDING_INPUTS} texts, got {len(texts)}", "input",
                       "invalid_value")
    for i, text in enumerate(texts):
        if _is(text, "integer") or (isinstance(text, list) and all(_is(t, "integer") for t in text)):
            raise ApiError(422, "'input': token id input is not supported (send text)", "input",
                           "unsupported_parameter")
        if not isinstance(text, str) or not text:
            raise ApiError(400, f"'input[{i}]' must be a non-empty string", "input", "invalid_value")
    return texts


# ---- responses -------------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt: int, completion: int | None = None) -> dict:
    out = {"prompt_tokens": prompt, "total_tokens": prompt + (completion or 0)}
    if completion is not None:
        out["completion_tokens"] = completion
    return out


def model_card(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "candle-api"}
