"""The HTTP side of ``candle serve``: a Starlette app whose endpoints check
each request, hand it to the engine's worker thread and answer in OpenAI's
shapes, streamed as server-sent events when asked."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hmac
import json
import logging
import secrets
import signal
import time
from dataclasses import dataclass

import jinja2
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from candle_api.errors import ArgumentError

from ..generation import Sampler
from ..tokenizer import check_text
from . import protocol as p
from .engine import EmbeddingJob, Engine, Generation, QueueFull, Stopped

log = logging.getLogger("candle.serve")

#: Seconds a client is told to wait before retrying when the queue is full.
RETRY_AFTER = 1


@dataclass
class Served:
    """What the app serves and its limits."""

    engine: Engine
    chat_model: str | None  # the ids /v1/models lists; None when that kind of model is not loaded
    embedding_model: str | None
    context_length: int
    api_key: str | None
    max_body_bytes: int


def create_app(served: Served, on_ready=None) -> Starlette:
    """The app; ``on_ready`` is called once the engine runs (the server then accepts requests)."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        served.engine.start()
        if on_ready is not None:
            on_ready()
        yield
        await asyncio.to_thread(served.engine.stop)

    endpoints = Endpoints(served)
    routes = [Route("/health", endpoints.health, methods=["GET"]),
              Route("/v1/models", endpoints.models, methods=["GET"]),
              Route("/v1/chat/completions", endpoints.chat, methods=["POST"]),
              Route("/v1/completions", endpoints.completions, methods=["POST"]),
              Route("/v1/embeddings", endpoints.embeddings, methods=["POST"])]
    handlers = {HTTPException: _http_error, Exception: _internal_error}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, minus its habit of re-raising SIGTERM once it has shut down gracefully
    (which kills the process with the signal): a server asked to stop that stopped cleanly exits 0.
    ``signal`` is the first signal that asked it to stop."""

    signal: int | None = None

    def handle_exit(self, sig: int, frame) -> None:
        self.signal = self.signal or sig
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for the requests in flight
        self.should_exit = True


def _error(err: p.ApiError) -> JSONResponse:
    return JSONResponse(err.body(), err.status, headers=err.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's own errors (unknown path, wrong method) in OpenAI's shape."""
    what = {404: f"no such endpoint: {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, exc.detail)
    return _error(p.ApiError(exc.status_code, what, code="not_found" if exc.status_code == 404 else None,
                             headers=exc.headers))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    return _error(p.ApiError(500, "internal error: the server failed on this request (its log says why)"))


def _in_loop(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    """Calls ``fn(*args)`` in the event loop, from the worker thread."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop has closed: the server is gone, nobody waits for the result
        pass


def _emitter(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue):
    """A callback for the worker thread that puts its events on ``queue`` in the event loop."""
    return lambda *event: _in_loop(loop, queue.put_nowait, event)


async def _watch_disconnect(receive, gen: Generation, queue: asyncio.Queue) -> None:
    """Cancels the generation when the client goes away (the body was read already, so the next
    message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gen.cancel()
    queue.put_nowait(("gone", None))


def _engine_failure(exc: Exception) -> p.ApiError:
    if isinstance(exc, Stopped):
        return p.ApiError(503, str(exc), code="shutting_down")
    log.error("generation failed", exc_info=exc)
    return p.ApiError(500, "internal error: the generation failed (the server's log says why)")


def _answers_errors(handler):
    """An endpoint whose ApiErrors become OpenAI-shaped answers."""
    @functools.wraps(handler)
    async def endpoint(self, request: Request):
        try:
            return await handler(self, request)
        except p.ApiError as err:
            return _error(err)
    return endpoint


class Endpoints:
    def __init__(self, served: Served):
        self.served, self.engine = served, served.engine

    # ---- plumbing ------------------------------------------------------------------------------------
    async def _request(self, request: Request) -> p.Fields:
        """The checked key and the JSON body, read up to the size limit."""
        self._authorize(request)
        limit = self.served.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise p.ApiError(413, f"the request body is {length} bytes; the limit is {limit}", code="body_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise p.ApiError(413, f"the request body is over the limit of {limit} bytes", code="body_too_large")
            chunks.append(chunk)
        return p.Fields(p.parse_json(b"".join(chunks)))

    def _authorize(self, request: Request) -> None:
        key = self.served.api_key
        if key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # compare_digest: the time taken does not tell how much of a guessed key was right
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("utf-8", "replace"),
                                                                  key.encode("utf-8")):
            raise p.ApiError(401, "missing or incorrect API key (send Authorization: Bearer KEY)",
                             code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def _model(self, f: p.Fields, served_id: str | None, kind: str) -> str:
        name = f.required("model", "string")
        if served_id is None:
            raise p.ApiError(404, f"this server has no {kind} model", "model", "model_not_found")
        if name != served_id:
            raise p.ApiError(404, f"the model {name!r} does not exist here (the {kind} model is {served_id!r})",
                             "model", "model_not_found")
        return name

    # ---- endpoints -----------------------------------------------------------------------------------
    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "generations": self.engine.busy})

    @_answers_errors
    async def models(self, request: Request) -> JSONResponse:
        self._authorize(request)
        ids = [m for m in (self.served.chat_model, self.served.embedding_model) if m is not None]
        return JSONResponse({"object": "list", "data": [p.model_card(m) for m in ids]})

    @_answers_errors
    async def chat(self, request: Request):
        f = await self._request(request)
        model = self._model(f, self.served.chat_model, "chat")
        messages = p.chat_messages(f)
        sampling = p.sampling(f)
        f.unsupported("tools", lambda v: v == [], "tool calls")
        f.unsupported("tool_choice", lambda v: v == "none", "tool calls")
        f.get("parallel_tool_calls", "boolean")  # meaningless without tools
        f.unsupported("functions", lambda v: v == [], "function calls")
        f.unsupported("function_call", lambda v: v == "none", "function calls")
        f.unsupported("response_format", lambda v: v == {"type": "text"}, "only text responses")
        f.done()
        for i, m in enumerate(messages):
            _text(m["content"], f"messages[{i}].content")
        tokenizer = self.engine.tokenizer
        try:
            ids = tokenizer.encode(tokenizer.apply_chat_template(messages), add_special_tokens=False)
        except (jinja2.TemplateError, ValueError) as exc:
            raise p.ApiError(400, f"the model's chat template refused the messages: {exc}", "messages",
                             "invalid_value") from None
        return await self._generate(request, ids, sampling, _ChatShapes(model))

    @_answers_errors
    async def completions(self, request: Request):
        f = await self._request(request)
        model = self._model(f, self.served.chat_model, "chat")
        prompt = p.completion_prompt(f, self.engine.tokenizer.vocab_size)
        sampling = p.sampling(f)
        f.unsupported("echo", lambda v: v is False, "echoing the prompt")
        f.unsupported("suffix", lambda v: v == "", "insertion (suffix)")
        f.unsupported("best_of", lambda v: v == 1, "one candidate per request (best_of = 1)")
        f.done()
        ids = prompt if isinstance(prompt, list) else self.engine.tokenizer.encode(_text(prompt, "prompt"))
        return await self._generate(request, ids, sampling, _CompletionShapes(model))

    @_answers_errors
    async def embeddings(self, request: Request):
        f = await self._request(request)
        model = self._model(f, self.served.embedding_model, "embedding")
        texts = [_text(t, f"input[{i}]") for i, t in enumerate(p.embedding_inputs(f))]
        encoding = f.get("encoding_format", "string", "float", lambda v: v in ("float", "base64"),
                         "'float' or 'base64'")
        dim = self.engine.embedder.dimension
        f.unsupported("dimensions", lambda v: v == dim, f"the model's vectors have {dim} dimensions")
        f.get("user", "string")
        f.done()
        loop = asyncio.get_running_loop()
        result = loop.create_future()

        def settle(value):
            if not result.done():
                (result.set_exception if isinstance(value, Exception) else result.set_result)(value)

        try:
            self.engine.embed(EmbeddingJob(texts, lambda value: _in_loop(loop, settle, value)))
            vectors, counts = await result
        except Exception as exc:  # Stopped, or the embedder failed
            raise _engine_failure(exc) from None
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
                               if encoding == "base64" else v.tolist())} for i, v in enumerate(vectors)]
        return JSONResponse({"object": "list", "data": data, "model": model, "usage": p.usage(sum(counts))})

    # ---- generation ----------------------------------------------------------------------------------
    async def _generate(self, request: Request, ids: list, s: p.Sampling, shapes):
        ctx = self.served.context_length
        if len(ids) >= ctx or (s.max_tokens is not None and len(ids) + s.max_tokens > ctx):
            wanted = f", and {s.max_tokens} in the completion" if s.max_tokens is not None else ""
            raise p.ApiError(400, f"this model's context length is {ctx} tokens; the prompt has {len(ids)}{wanted}",
                             "max_tokens" if len(ids) < ctx else "messages", "context_length_exceeded")
        seed = secrets.randbits(64) if s.seed is None else s.seed % 2**64
        try:
            sampler = Sampler(s.temperature, s.top_k, s.top_p, s.repeat_penalty, seed=seed)
        except ArgumentError as exc:
            raise p.ApiError(400, str(exc), code="invalid_value") from None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        tokenizer = self.engine.tokenizer
        gen = Generation(list(ids), s.max_tokens if s.max_tokens is not None else ctx - len(ids), sampler,
                         _emitter(loop, queue), frozenset() if s.ignore_eos else frozenset(tokenizer.stop_token_ids),
                         s.stop)
        try:
            self.engine.submit(gen)
        except QueueFull as exc:
            raise p.ApiError(429, f"the server is busy: {exc}; retry later", code="queue_full",
                             kind="rate_limit_error", headers={"Retry-After": str(RETRY_AFTER)}) from None
        except Stopped as exc:
            raise _engine_failure(exc) from None
        watcher = asyncio.create_task(_watch_disconnect(request.receive, gen, queue))
        if s.stream:
            return EventStream(gen, queue, watcher, shapes, s.include_usage)
        try:
            parts = []
            while True:
                kind, value = await queue.get()
                if kind == "text":
                    parts.append(value)
                elif kind == "end":
                    return JSONResponse(shapes.whole("".join(parts), value, gen, len(ids)))
                elif kind == "error":
                    raise _engine_failure(value)
                else:  # the client is gone: nobody reads the answer
                    return JSONResponse({})
        finally:
            gen.cancel()
            watcher.cancel()


def _text(text: str, where: str) -> str:
    try:
        return check_text(text, where)
    except ArgumentError as exc:
        raise p.ApiError(400, str(exc), where, "invalid_value") from None


class _ChatShapes:
    """chat.completion and chat.completion.chunk objects."""

    def __init__(self, model: str):
        self.model, self.id, self.created = model, p.new_id("chatcmpl"), int(time.time())

    def _object(self, kind: str, choices: list) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, finish: str, gen: Generation, prompt: int) -> dict:
        out = self._object("chat.completion", [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "logprobs": None, "finish_reason": finish}])
        out["usage"] = p.usage(prompt, gen.completion_tokens)
        return out

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False) -> dict:
        delta = {"role": "assistant", "content": ""} if first else ({} if text is None else {"content": text})
        return self._object("chat.completion.chunk", [{"index": 0, "delta": delta, "logprobs": None,
                                                       "finish_reason": finish}])

    def usage_chunk(self, usage: dict) -> dict:
        out = self._object("chat.completion.chunk", [])
        out["usage"] = usage
        return out


class _CompletionShapes(_ChatShapes):
    """text_completion objects (streamed chunks have the same shape)."""

    def __init__(self, model: str):
        super().__init__(model)
        self.id = p.new_id("cmpl")

    def whole(self, text, finish, gen, prompt):
        out = self._object("text_completion", [{"index": 0, "text": text, "logprobs": None,
                                                 "finish_reason": finish}])
        out["usage"] = p.usage(prompt, gen.completion_tokens)
        return out

    def chunk(self, text, finish=None, first=False):
        return None if first else self._object("text_completion", [{"index": 0, "text": text or "",
                                                                     "logprobs": None, "finish_reason": finish}])

    def usage_chunk(self, usage):
        out = self._object("text_completion", [])
        out["usage"] = usage
        return out


class EventStream:
    """A generation's answer as server-sent events, ``data: [DONE]`` at the end. The client going
    away (seen while waiting for tokens, or as a failed send) cancels the generation."""

    def __init__(self, gen: Generation, queue: asyncio.Queue, watcher: asyncio.Task, shapes, include_usage: bool):
        self.gen, self.queue, self.watcher, self.shapes, self.include_usage = gen, queue, watcher, shapes, include_usage

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                                    (b"cache-control", b"no-cache")]})
            async for payload in self._payloads():
                await send({"type": "http.response.body", "body": b"data: " + payload + b"\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        except OSError:  # the client went away during a send
            pass
        finally:
            self.gen.cancel()
            self.watcher.cancel()

    async def _payloads(self):
        def encode(obj):
            if self.include_usage and "usage" not in obj:
                obj["usage"] = None  # as OpenAI: every chunk has the field, the last one its counts
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

        first = self.shapes.chunk(None, first=True)
        if first is not None:
            yield encode(first)
        while True:
            kind, value = await self.queue.get()
            if kind == "text":
                yield encode(self.shapes.chunk(value))
            elif kind == "end":
                yield encode(self.shapes.chunk(None, value))
                if self.include_usage:
                    yield encode(self.shapes.usage_chunk(p.usage(len(self.gen.prompt_ids), self.gen.completion_tokens)))
                return
            elif kind == "error":  # the status is sent already: the error goes in the stream, as OpenAI does
                yield json.dumps(_engine_failure(value).body()).encode("utf-8")
                return
            else:
                return
