"""The server's model worker: one thread that runs every forward pass.

Generations are batched continuously: each request is prefilled alone, then
joins the running batch, whose sequences advance one token per forward
(a causal LM of any family candle_models runs, with a ``BatchKVCache``); a request leaves between
steps when it ends or is cancelled, and a waiting one takes its row. A generation that runs alone
keeps its own ``KVCache`` instead, as ``candle generate`` does, so that one client decodes at
``candle generate``'s speed (the model's one-sequence step: a Llama's bound decoding step); it
moves into the batch when a second one joins.
Embedding requests that arrive within a few milliseconds of each other are
embedded together, between decoding steps.

One thread owns the models, so no two forwards ever share the backend's
thread pool. Requests talk to it through callbacks called on this thread
(the server forwards them to its event loop)."""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable


import candle_api as c

from ..generation import FIRST_TOKENS_CAPACITY, Sampler
from ..tokenizer import TokenStream


class QueueFull(Exception):
    """Every batch row is taken and the queue holds as many requests as it may."""


class Stopped(Exception):
    """The engine is shutting down."""


@dataclass
class Generation:
    """One completion request. ``emit(kind, value)`` is called on the worker thread with ("text", piece)
    as the answer grows and once with ("end", finish_reason) or ("error", exception) at the end.
    finish_reason is "stop" (a stop token or stop text) or "length" (max_tokens, or the context full)."""

    prompt_ids: list
    max_tokens: int
    sampler: Sampler
    emit: Callable
    stop_ids: frozenset = frozenset()
    stop_texts: tuple = ()
    completion_tokens: int = 0
    cancelled: bool = False  # set by the server (the client went away); the worker drops it before its next step

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class EmbeddingJob:
    texts: list
    done: Callable  # called with (vectors as an (n, dim) f32 array, token counts) or with an exception


class StopText:
    """Cuts the answer at the first stop text: text that may be the start of one is held back until
    the next pieces show whether it is."""

    def __init__(self, stops):
        self.stops, self.held = tuple(stops), ""

    def push(self, piece: str) -> tuple[str, bool]:
        """The text safe to emit after ``piece``, and whether a stop text ended the answer."""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.held = ""
            return text[:min(found)], True
        keep = max((n for s in self.stops for n in range(min(len(s) - 1, len(text)), 0, -1)
                    if text.endswith(s[:n])), default=0)
        self.held = text[len(text) - keep:]
        return text[:len(text) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


@dataclass
class _Running:
    """A generation in the batch: its row, tokens so far, text decoder."""

    gen: Generation
    history: list
    stream: TokenStream
    stop: StopText
    token: int = 0  # the last token sampled: the next step's input
    tokens_left: int = 0


class Engine:
    """``submit`` generations and ``embed`` texts from any thread; ``start`` and ``stop`` the worker.

    ``max_batch`` generations run together, ``max_queue`` more wait for a row (beyond that ``submit``
    raises QueueFull). Embedding requests wait at most ``embed_wait`` seconds for others to join
    their batch of up to ``embed_batch`` texts."""

    def __init__(self, model=None, tokenizer=None, embedder=None, max_batch: int = 16, max_queue: int = 64,
                 embed_batch: int = 32, embed_wait: float = 0.005):
        self.model, self.tokenizer, self.embedder = model, tokenizer, embedder
        self.max_batch, self.max_queue = max_batch, max_queue
        self.embed_batch, self.embed_wait = embed_batch, embed_wait
        self._cond = threading.Condition()
        self._waiting: collections.deque = collections.deque()
        self._embeds: collections.deque = collections.deque()
        self._running: list[_Running] = []  # row i of the batch cache is _running[i]
        self._solo = None  # the KVCache of the one generation running alone (the batch cache then empty)
        self._stopping = False
        self._cache = model.new_batch_cache(max_batch) if model is not None else None
        self._thread = threading.Thread(target=self._run, name="candle-serve-engine", daemon=True)
        self.steps = 0  # decoding steps run (batched forwards), for the tests and the logs

    # ---- the server's side -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ends every request still running or waiting (an ("error", Stopped) event) and the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    @property
    def busy(self) -> int:
        """Generations running or waiting."""
        with self._cond:
            return len(self._running) + len(self._waiting)

    def submit(self, gen: Generation) -> None:
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            if len(self._running) + len(self._waiting) >= self.max_batch + self.max_queue:
                raise QueueFull(f"{self.max_batch} generations are running and {len(self._waiting)} waiting")
            self._waiting.append(gen)
            self._cond.notify()

    def embed(self, job: EmbeddingJob) -> None:
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            self._embeds.append((time.monotonic(), job))
            self._cond.notify()

    # ---- the worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        with c.no_grad():
            while True:
                with self._cond:
                    self._wait_for_work()
                    if self._stopping:
                        break
                    jobs = self._take_embeddings()
                    joining = [self._waiting.popleft()
                               for _ in range(min(self.max_batch - len(self._running), len(self._waiting)))]
                if jobs:
                    self._embed(jobs)
                for gen in joining:
                    self._join(gen)
                self._step()
        with self._cond:
            ended = [r.gen for r in self._running] + list(self._waiting)
            jobs = [job for _, job in self._embeds]
            self._running, self._waiting, self._embeds = [], collections.deque(), collections.deque()
        for gen in ended:
            gen.emit("error", Stopped("the server shut down before the answer ended"))
        for job in jobs:
            job.done(Stopped("the server shut down before the embeddings were computed"))

    def _wait_for_work(self) -> None:
        """Under the lock: returns when there is a batch to step, a generation to start, embeddings
        whose batch is full or whose first request has waited embed_wait, or a stop."""
        while not self._stopping:
            if self._running or self._waiting:
                return
            if self._embeds:
                wait = self._embeds[0][0] + self.embed_wait - time.monotonic()
                if wait <= 0 or sum(len(job.texts) for _, job in self._embeds) >= self.embed_batch:
                    return
                self._cond.wait(wait)
            else:
                self._cond.wait()

    def _take_embeddings(self) -> list:
        """Under the lock: the waiting embedding jobs, up to embed_batch texts (at least one job)."""
        jobs, texts = [], 0
        while self._embeds and (not jobs or texts + len(self._embeds[0][1].texts) <= self.embed_batch):
            job = self._embeds.popleft()[1]
            jobs.append(job)
            texts += len(job.texts)
        return jobs

    def _embed(self, jobs: list) -> None:
        texts = [t for job in jobs for t in job.texts]
        try:
            sequences = self.embedder.encode(texts)
            vectors = self.embedder.embed_ids(sequences, batch_size=self.embed_batch).numpy()
            counts = [len(ids) for ids in sequences]
        except Exception as exc:  # each job gets the failure; the worker goes on
            for job in jobs:
                job.done(exc)
            return
        start = 0
        for job in jobs:
            n = len(job.texts)
            job.done((vectors[start:start + n], counts[start:start + n]))
            start += n

    def _join(self, gen: Generation) -> None:
        """Prefills a generation alone and samples its first token; it joins the batch unless it
        already ended."""
        if gen.cancelled:
            return
        if gen.max_tokens == 0:
            gen.emit("end", "length")
            return
        running = _Running(gen, list(gen.prompt_ids), TokenStream(self.tokenizer), StopText(gen.stop_texts),
                           tokens_left=gen.max_tokens)
        try:
            # room for the first tokens too, as candle generate makes, should it run alone
            cache = self.model.new_cache(capacity=len(gen.prompt_ids) + min(gen.max_tokens, FIRST_TOKENS_CAPACITY))
            logits = self.model([gen.prompt_ids], cache, last_only=True)[0, 0].numpy()
            if self._deliver(running, gen.sampler.sample(logits, running.history), cache.length):
                if not self._running:
                    self._solo = cache
                else:
                    if self._solo is not None:  # the one running alone moves into the batch, as row 0
                        self._cache.admit(self._solo)
                        self._solo = None
                    self._cache.admit(cache)
                self._running.append(running)
        except Exception as exc:
            gen.emit("error", exc)

    def _step(self) -> None:
        """One decoding step for the whole batch, after dropping the cancelled generations."""
        for row in reversed(range(len(self._running))):
            if self._running[row].gen.cancelled:
                self._leave(row)
        if not self._running:
            self._clear()  # an idle server holds no cache memory
            return
        cache = self._solo if self._solo is not None else self._cache
        try:
            logits = self.model([[r.token] for r in self._running], cache, last_only=True).numpy()
        except Exception as exc:
            for r in self._running:
                r.gen.emit("error", exc)
            self._running = []
            self._clear()
            return
        self.steps += 1
        lengths = [cache.length] if cache is self._solo else cache.lengths
        for row in reversed(range(len(self._running))):
            r = self._running[row]
            if not self._deliver(r, r.gen.sampler.sample(logits[row, 0], r.history), lengths[row]):
                self._leave(row)
        if not self._running:
            self._clear()

    def _clear(self) -> None:
        self._solo = None
        self._cache.clear()

    def _leave(self, row: int) -> None:
        if self._solo is not None:
            self._solo = None
            self._running.pop()
            return
        moved = self._cache.release(row)
        last = self._running.pop()
        if moved is not None:
            self._running[row] = last

    def _deliver(self, r: _Running, token: int, cached: int) -> bool:
        """Hands a sampled token's text to its request; False when the generation ended with it
        (``cached`` positions are in its cache: one more must fit to feed the token back)."""
        gen = r.gen
        if token in gen.stop_ids:
            return self._end(r, "stop")
        r.history.append(token)
        gen.completion_tokens += 1
        r.token, r.tokens_left = token, r.tokens_left - 1
        text, stopped = r.stop.push(r.stream.push(token))
        if text:
            gen.emit("text", text)
        if stopped:
            gen.emit("end", "stop")
            return False
        if r.tokens_left == 0 or cached >= self.model.config.context_length:
            return self._end(r, "length")
        return True

    def _end(self, r: _Running, reason: str) -> bool:
        text, stopped = r.stop.push(r.stream.flush())
        text += "" if stopped else r.stop.flush()
        if text:
            r.gen.emit("text", text)
        r.gen.emit("end", "stop" if stopped else reason)
        return False
