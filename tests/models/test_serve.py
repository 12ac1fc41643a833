"""``candle serve`` as its clients see it: started on a free loopback port and
driven with the official ``openai`` client (chat, streaming, completions,
embeddings) and with raw httpx for the bad requests, the limits, the key, and
the faults (clients gone mid-stream, SIGTERM under load)."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from candle_models import ModelNotFoundError, default_model

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

CHAT, EMBED = "SmolLM2-135M-Instruct", "all-MiniLM-L6-v2"
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


@pytest.fixture(scope="module", autouse=True)
def models():
    try:
        default_model("generate"), default_model("embed")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


class Server:
    """``candle serve`` in a subprocess; ``url`` once it says it listens."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "candle_api.cli", "serve", "--port", "0", *args],
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(120):
            self.stop()
            raise AssertionError(f"candle serve did not start: {self.lines}")
        self.url = re.search(r"listening on (\S+)", self.lines[-1]).group(1)

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if "listening on" in line:
                self.ready.set()
        self.ready.set()

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024

    def stop(self, sig=signal.SIGTERM, timeout=60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def client(self, **kwargs):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=kwargs.pop("api_key", "none"), max_retries=0,
                             **kwargs)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    assert s.stop() == 0


def wait_idle(server: Server, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{server.url}/health").json()["generations"]:
        assert time.monotonic() < deadline, "generations still running"
        time.sleep(0.05)


# ---- the protocol, through the openai client ---------------------------------------------------------------

def test_models_and_health(server):
    assert [m.id for m in server.client().models.list()] == [CHAT, EMBED]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok", "generations": 0}


def test_chat_answers_and_counts_tokens(server):
    answer = server.client().chat.completions.create(model=CHAT, messages=QUESTION, temperature=0, max_tokens=32)
    assert "Paris" in answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.role == "assistant"
    usage = answer.usage
    assert usage.prompt_tokens > 10 and 0 < usage.completion_tokens < 32
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streamed_text_equals_the_whole_answer_for_the_same_seed(server):
    client = server.client()
    args = dict(model=CHAT, messages=[{"role": "system", "content": "You are a poet."},
                                      {"role": "user", "content": "Write about the sea."}],
                temperature=0.9, top_p=0.95, seed=1234, max_tokens=40)
    whole = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content and len(text) > 20
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    other = client.chat.completions.create(**{**args, "seed": 99})
    assert other.choices[0].message.content != text  # the seed is what made them equal


def test_greedy_chat_matches_candle_generate(server):
    generated = subprocess.run([sys.executable, "-m", "candle_api.cli", "generate", "--temperature", "0",
                                "--repeat-penalty", "1", "--max-tokens", "24", QUESTION[0]["content"]],
                               capture_output=True, text=True, timeout=120)
    answer = server.client().chat.completions.create(model=CHAT, messages=QUESTION, temperature=0, max_tokens=24)
    assert generated.stdout.rstrip("\n") == answer.choices[0].message.content


def test_completions_stop_texts_and_token_prompts(server):
    client = server.client()
    out = client.completions.create(model=CHAT, prompt="The capital of France is", temperature=0, max_tokens=12)
    text = out.choices[0].text
    assert "Paris" in text and out.usage.completion_tokens == 12 and out.choices[0].finish_reason == "length"
    cut = client.completions.create(model=CHAT, prompt="The capital of France is", temperature=0, max_tokens=12,
                                    stop=["Paris"])
    assert cut.choices[0].text == text[:text.index("Paris")] and cut.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=CHAT, prompt="The capital of France is", temperature=0, max_tokens=12, stream=True) if ch.choices)
    assert streamed == text
    from candle_models.tokenizer import Tokenizer

    ids = Tokenizer.from_pretrained(default_model("generate")).encode("The capital of France is")
    assert client.completions.create(model=CHAT, prompt=ids, temperature=0, max_tokens=12).choices[0].text == text


def test_embeddings_equal_candle_embed(server):
    texts = ["A cat sits on the mat.", "The feline rests on the rug.", "A cat sits on the mat."]
    out = subprocess.run([sys.executable, "-m", "candle_api.cli", "embed", "--json", *texts[:2]],
                         capture_output=True, text=True, timeout=120)
    expected = {row["text"]: row["embedding"] for row in json.loads(out.stdout)}
    client = server.client()
    floats = client.embeddings.create(model=EMBED, input=texts)
    assert [d.index for d in floats.data] == [0, 1, 2] and floats.usage.prompt_tokens > 0
    for d, text in zip(floats.data, texts):
        np.testing.assert_allclose(d.embedding, expected[text], atol=1e-6)
    raw = httpx.post(f"{server.url}/v1/embeddings", json={"model": EMBED, "input": texts[0],
                                                          "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, expected[texts[0]], atol=1e-6)


def test_concurrent_requests_are_answered_as_alone(server):
    client = server.client()
    prompts = ["Name a colour.", "Count to five.", "What is 2 + 2?", "Say hello in French."]

    def ask(prompt):
        return client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": prompt}],
                                              temperature=0.7, seed=5, max_tokens=20).choices[0].message.content

    alone = [ask(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(ask, prompts + prompts))
    assert together == alone + alone


# ---- bad requests: OpenAI-shaped errors, never a 500 ---------------------------------------------------------

def post(server, path, body=None, raw=None, headers=None):
    """A POST of ``body`` as JSON (escaped to ASCII: lone surrogates get through) or of ``raw`` bytes."""
    raw = json.dumps(body).encode() if body is not None else raw
    headers = {"content-type": "application/json", **(headers or {})}
    return httpx.post(f"{server.url}{path}", content=raw, headers=headers, timeout=60)


def assert_error(response, status, *words):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    for word in words:
        assert word in error["message"]
    return error


CHAT_OK = {"model": CHAT, "messages": QUESTION, "max_tokens": 4}


@pytest.mark.parametrize("raw, status, words", [
    (b"{not json", 400, ["not valid JSON"]),
    (b"[1, 2]", 400, ["JSON object"]),
    (b'{"model": "x", "messages": [\xff]}', 400, ["not UTF-8"]),
    (json.dumps(CHAT_OK)[:-1].encode() + b', "temperature": NaN}', 400, ["NaN"]),
])
def test_malformed_bodies(server, raw, status, words):
    assert_error(post(server, "/v1/chat/completions", raw=raw), status, *words)


@pytest.mark.parametrize("change, status, param, words", [
    ({"model": "gpt-4"}, 404, "model", ["gpt-4", CHAT]),
    ({"model": None}, 400, "model", ["required"]),
    ({"messages": []}, 400, "messages", ["non-empty"]),
    ({"messages": "hi"}, 400, "messages", ["array"]),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role", ["robot"]),
    ({"messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content", ["string"]),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, 400, "messages[0].content", ["surrogate"]),
    ({"max_tokens": -1}, 400, "max_tokens", [">= 1"]),
    ({"max_tokens": "5"}, 400, "max_tokens", ["integer"]),
    ({"max_tokens": 10**9}, 400, "max_tokens", ["context length"]),
    ({"temperature": 3}, 400, "temperature", ["[0, 2]"]),
    ({"temperature": True}, 400, "temperature", ["number"]),
    ({"top_p": 0}, 400, "top_p", ["(0, 1]"]),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", ["at most 4"]),
    ({"stream": "yes"}, 400, "stream", ["boolean"]),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options", ["stream: true"]),
    ({"colour": "blue"}, 400, "colour", ["unrecognized", "colour"]),
    ({"n": 2}, 422, "n", ["n = 1"]),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, 422, "tools", ["tool"]),
    ({"response_format": {"type": "json_object"}}, 422, "response_format", ["text"]),
    ({"logprobs": True}, 422, "logprobs", ["log probabilities"]),
    ({"presence_penalty": 0.5}, 422, "presence_penalty", ["repeat_penalty"]),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 422,
     "messages[0].content", ["image_url"]),
])
def test_bad_chat_fields_are_named(server, change, status, param, words):
    body = {k: v for k, v in {**CHAT_OK, **change}.items() if v is not None}
    error = assert_error(post(server, "/v1/chat/completions", body), status, *words)
    assert error["param"] == param


@pytest.mark.parametrize("path, body, status, words", [
    ("/v1/completions", {"model": CHAT, "prompt": ""}, 400, ["prompt"]),
    ("/v1/completions", {"model": CHAT, "prompt": [1, 10**9]}, 400, ["token ids"]),
    ("/v1/completions", {"model": CHAT, "prompt": ["a", "b"]}, 422, ["one prompt"]),
    ("/v1/completions", {"model": CHAT, "prompt": "hi", "echo": True}, 422, ["echo"]),
    ("/v1/embeddings", {"model": EMBED, "input": []}, 400, ["input"]),
    ("/v1/embeddings", {"model": EMBED, "input": ["ok", ""]}, 400, ["input[1]"]),
    ("/v1/embeddings", {"model": EMBED, "input": [[1, 2, 3]]}, 422, ["token id"]),
    ("/v1/embeddings", {"model": EMBED, "input": "x", "encoding_format": "int8"}, 400, ["base64"]),
    ("/v1/embeddings", {"model": EMBED, "input": "x", "dimensions": 10}, 422, ["384"]),
    ("/v1/embeddings", {"model": CHAT, "input": "x"}, 404, [EMBED]),
    ("/v1/nothing", {}, 404, ["no such endpoint"]),
])
def test_bad_requests_of_every_endpoint(server, path, body, status, words):
    assert_error(post(server, path, body), status, *words)


JUNK = [None, True, -1, 0, 1.5, 10**30, "", "x" * 300, "\u0000", [], [1], ["a"], {}, {"role": "user"},
        [{"role": "user", "content": None}], [{"type": "text"}]]


def test_mutated_requests_get_answers_or_named_errors(server):
    """Seeded mutations of valid requests: each field replaced by junk of every JSON type, fields
    dropped or added. Every answer is a success or an OpenAI-shaped error with a 4xx status."""
    rng = np.random.default_rng(11)
    valid = {"/v1/chat/completions": {**CHAT_OK, "temperature": 0.5, "stop": ["\n"], "seed": 3, "top_p": 0.9},
             "/v1/completions": {"model": CHAT, "prompt": "Hi", "max_tokens": 3, "stream": False},
             "/v1/embeddings": {"model": EMBED, "input": ["Hi", "there"], "encoding_format": "float"}}
    for case in range(240):
        path = list(valid)[case % 3]
        body = dict(valid[path])
        for _ in range(int(rng.integers(1, 3))):
            key = str(rng.choice(list(body) + ["extra", "max_tokens", "n", "stream_options"]))
            if rng.random() < 0.2:
                body.pop(key, None)
            else:
                body[key] = JUNK[int(rng.integers(len(JUNK)))]
        if body.get("max_tokens") is None and path != "/v1/embeddings":
            body["max_tokens"] = 3  # absent, an answer may run to the end of the context
        response = post(server, path, body)
        if response.status_code != 200:
            assert 400 <= response.status_code < 500, (body, response.text)
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}, (body, response.text)
    wait_idle(server)


def test_wrong_method_and_oversized_body(server):
    assert_error(httpx.get(f"{server.url}/v1/chat/completions"), 405, "GET")
    big = {**CHAT_OK, "messages": [{"role": "user", "content": "x" * (5 << 20)}]}
    assert_error(post(server, "/v1/chat/completions", big), 413, "limit")


# ---- limits, keys and faults, each on a server of its own ---------------------------------------------------

def test_binding_beyond_loopback_needs_a_key():
    out = subprocess.run([sys.executable, "-m", "candle_api.cli", "serve", "--host", "0.0.0.0", "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "refusing to listen on 0.0.0.0 without an API key" in out.stderr and "--insecure" in out.stderr


def test_an_encoder_decoder_is_refused_in_one_line():
    t5 = Path(__file__).parent / "fixtures" / "tiny_t5"
    out = subprocess.run([sys.executable, "-m", "candle_api.cli", "serve", "--port", "0", "--model", str(t5),
                          "--embedding-model", "none"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "T5ForConditionalGeneration, an encoder-decoder: candle serve batches causal LMs only" in out.stderr


def test_the_api_key_is_required_when_set():
    server = Server("--model", "none", env={"CANDLE_API_KEY": "s3cret"})
    try:
        body = {"model": EMBED, "input": "hi"}
        assert_error(post(server, "/v1/embeddings", body), 401, "API key")
        assert_error(post(server, "/v1/embeddings", body, headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(httpx.get(f"{server.url}/v1/models"), 401)
        ok = server.client(api_key="s3cret").embeddings.create(model=EMBED, input="hi")
        assert len(ok.data[0].embedding) == 384
        assert_error(post(server, "/v1/chat/completions", CHAT_OK, headers={"Authorization": "Bearer s3cret"}),
                     404, "no chat model")
    finally:
        assert server.stop() == 0


def stream_tokens(server, max_tokens, seed=0, stop_after=None):
    """Starts a streaming chat; reads ``stop_after`` chunks then drops the connection (or reads all).
    Returns the chunks read (or the tokens generated, from the usage chunk) and whether [DONE] came."""
    body = {"model": CHAT, "messages": QUESTION, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "seed": seed, "stream_options": {"include_usage": True}}
    chunks, done = 0, False
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks += 1
                usage = json.loads(line[6:])["usage"]
                if usage is not None:
                    chunks = usage["completion_tokens"]
                if stop_after is not None and chunks >= stop_after:
                    break
    return chunks, done


def test_a_full_queue_answers_429_and_a_dropped_client_frees_its_row():
    server = Server("--embedding-model", "none", "--max-concurrent", "1", "--max-queue", "0")
    try:
        started = threading.Event()
        holder = {}

        def hold():
            body = {"model": CHAT, "messages": QUESTION, "max_tokens": 2000, "stream": True, "ignore_eos": True}
            with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
                for i, _ in enumerate(response.iter_lines()):
                    if i == 4:
                        started.set()
                        holder["busy"] = post(server, "/v1/chat/completions", CHAT_OK)
                        break  # the client goes away mid-stream

        thread = threading.Thread(target=hold)
        thread.start()
        assert started.wait(60)
        thread.join(60)
        busy = holder["busy"]
        assert_error(busy, 429, "busy")
        assert busy.headers["retry-after"] == "1"
        wait_idle(server, timeout=10)  # the dropped stream left the batch
        assert post(server, "/v1/chat/completions", CHAT_OK).status_code == 200
    finally:
        assert server.stop() == 0


def test_the_context_limit_is_checked_before_any_work():
    server = Server("--embedding-model", "none", "--context-length", "48")
    try:
        long = {"model": CHAT, "messages": [{"role": "user", "content": "word " * 50}]}
        assert_error(post(server, "/v1/chat/completions", long), 400, "context length is 48")
        fits = {**CHAT_OK, "max_tokens": None}
        out = post(server, "/v1/chat/completions", {k: v for k, v in fits.items() if v is not None}).json()
        assert out["usage"]["total_tokens"] <= 48
    finally:
        assert server.stop() == 0


def test_clients_killed_mid_stream_and_sigterm_under_load():
    """Memory returns to its level after warm-up once killed clients are gone; SIGTERM lets the
    streams in flight finish and the server exits 0."""
    server = Server("--embedding-model", "none", "--grace-period", "30")
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: stream_tokens(server, 48, seed=i), range(8)))  # warm-up: the batch at 8
            wait_idle(server)
            warm = server.rss()
            for _ in range(2):
                killed = list(pool.map(lambda i: stream_tokens(server, 2000, seed=i, stop_after=5), range(8)))
                assert all(chunks == 5 and not done for chunks, done in killed)
                wait_idle(server)
            assert server.rss() <= 1.1 * warm, (server.rss(), warm)

            streams = [pool.submit(stream_tokens, server, 64, i) for i in range(6)]
            while httpx.get(f"{server.url}/health").json()["generations"] < 6:
                time.sleep(0.02)
            server.proc.send_signal(signal.SIGTERM)
            results = [s.result(timeout=60) for s in streams]
        assert results == [(64, True)] * 6  # finished, not cut
        assert server.proc.wait(60) == 0
    finally:
        server.stop()
