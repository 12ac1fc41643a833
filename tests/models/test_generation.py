"""Sampling, stop tokens, streaming text and ``candle generate``."""

from __future__ import annotations

import dataclasses
import itertools
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from candle_api.cli import main
from candle_api.errors import ArgumentError
from candle_models import ModelNotFoundError, default_model
from candle_models.generation import GenerationStats, Sampler, generate, generate_ids
from candle_models.llama import LlamaForCausalLM
from candle_models.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
LOGITS = np.array([2.0, 1.0, 0.5, -1.0, 3.0, -2.0], dtype=np.float32)


@pytest.fixture(scope="module")
def tiny():
    return LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")


# ---- the sampler -------------------------------------------------------------------------------------

def test_greedy_is_argmax():
    assert Sampler(temperature=0).sample(LOGITS) == 4
    assert Sampler(temperature=None).sample(LOGITS) == 4


def test_seeded_draws_repeat_and_follow_the_distribution():
    draws = [Sampler(temperature=1.0, seed=7).sample(LOGITS) for _ in range(3)]
    assert len(set(draws)) == 1
    sampler = Sampler(temperature=1.0, seed=0)
    counts = np.bincount([sampler.sample(LOGITS) for _ in range(20000)], minlength=6) / 20000
    softmax = np.exp(LOGITS - LOGITS.max()) / np.exp(LOGITS - LOGITS.max()).sum()
    np.testing.assert_allclose(counts, softmax, atol=0.015)


def test_draws_over_a_vocabulary_of_many_blocks_follow_the_weights_and_never_pick_a_zero():
    weights = np.zeros(50_000)
    picked = np.array([3, 700, 701, 20_000, 49_999])  # across blocks, the last block short
    weights[picked] = [1.0, 2.0, 0.5, 4.0, 2.5]
    sampler = Sampler(temperature=1.0, seed=5)
    counts = np.bincount([sampler._draw(weights) for _ in range(20000)], minlength=weights.size) / 20000
    assert set(np.flatnonzero(counts)) <= set(picked)
    np.testing.assert_allclose(counts[picked], weights[picked] / weights.sum(), atol=0.015)

    class Last:  # the largest draw below 1, where rounding can put the target at the very end
        def random(self):
            return np.nextafter(1.0, 0.0)

    sampler.rng = Last()
    assert sampler._draw(weights) == 49_999
    weights[49_999] = 0.0
    assert sampler._draw(weights) == 20_000


def test_temperature_top_k_and_top_p_shape_the_distribution():
    p = Sampler(temperature=0.5).probabilities(LOGITS)
    z = np.exp((LOGITS - LOGITS.max()) / 0.5)
    np.testing.assert_allclose(p, z / z.sum(), rtol=1e-6)
    top2 = Sampler(temperature=1.0, top_k=2).probabilities(LOGITS)
    assert set(np.flatnonzero(top2)) == {0, 4}
    np.testing.assert_allclose(top2.sum(), 1.0)
    # softmax(LOGITS) sorted: 0.61, 0.22, 0.08, 0.05, ...: top_p 0.8 keeps the first two, 0.85 three.
    assert set(np.flatnonzero(Sampler(temperature=1.0, top_p=0.8).probabilities(LOGITS))) == {4, 0}
    assert set(np.flatnonzero(Sampler(temperature=1.0, top_p=0.85).probabilities(LOGITS))) == {4, 0, 1}
    one = Sampler(temperature=1.0, top_k=1, seed=3)
    assert {one.sample(LOGITS) for _ in range(50)} == {4}


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    sampler = Sampler(repeat_penalty=2.0, repeat_last_n=2)
    out = sampler.penalize(LOGITS, history=[0, 4, 3, 3])  # only the last 2 (3, 3) count
    expected = LOGITS.copy()
    expected[3] *= 2.0
    np.testing.assert_array_equal(out, expected)
    out = Sampler(repeat_penalty=2.0).penalize(LOGITS, history=[4, 5])
    assert out[4] == 1.5 and out[5] == -4.0
    assert Sampler(temperature=0, repeat_penalty=10.0).sample(LOGITS, history=[4]) == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -1}, "temperature"), ({"top_k": 0}, "top_k"), ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"), ({"repeat_penalty": 0}, "repeat_penalty"), ({"repeat_last_n": -1}, "repeat_last_n"),
])
def test_bad_sampler_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampler(**kwargs)


@pytest.mark.parametrize("name, value", [
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", np.float32("nan")),
    ("temperature", "0.7"), ("top_k", -1), ("top_k", 2.5), ("top_k", True), ("top_p", float("nan")),
    ("top_p", float("inf")), ("repeat_penalty", float("nan")), ("repeat_penalty", float("inf")),
    ("repeat_penalty", -1.0), ("repeat_last_n", 1.5), ("seed", -1), ("seed", 1.5), ("seed", "1"),
])
def test_non_finite_and_mistyped_sampler_settings_are_argument_errors(name, value):
    """NaN fails every comparison, so `x < 0` checks let it through to the softmax, which sampled garbage."""
    with pytest.raises(ArgumentError, match=f"^{name} must be .*, got {re.escape(repr(value))}$"):
        Sampler(**{name: value})


# ---- generating ids ----------------------------------------------------------------------------------

def test_sampled_generation_is_reproducible_per_seed(tiny):
    def run(seed):
        return list(generate_ids(tiny, [1, 2, 3], 12, Sampler(temperature=1.0, top_p=0.95, seed=seed)))

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_stop_tokens_end_generation_and_stats_count(tiny):
    greedy = list(generate_ids(tiny, [1, 2, 3], 10, Sampler(temperature=0)))
    assert len(greedy) == 10
    stop = greedy[4]
    first = greedy.index(stop)
    stats = GenerationStats()
    stopped = list(generate_ids(tiny, [1, 2, 3], 10, Sampler(temperature=0), stop_token_ids=[stop], stats=stats))
    assert stopped == greedy[:first]
    assert (stats.prompt_tokens, stats.generated_tokens, stats.finish_reason) == (3, first, "stop")
    stats = GenerationStats()
    assert len(list(generate_ids(tiny, [1], 4, stats=stats))) == 4
    assert stats.finish_reason == "length" and stats.decode_steps == 3 and stats.tokens_per_second > 0


def test_generation_argument_errors(tiny):
    with pytest.raises(ValueError, match="empty"):
        list(generate_ids(tiny, [], 4))
    with pytest.raises(ValueError, match="max_new_tokens"):
        list(generate_ids(tiny, [1], -1))
    assert list(generate_ids(tiny, [1], 0)) == []


def test_the_cache_grows_with_the_tokens_not_with_max_new_tokens(tiny, monkeypatch):
    """max_new_tokens is a bound, not a size: the cache holds the tokens generated so far (at most twice
    that, as it doubles), however many more were allowed. It used to be allocated for all of them."""
    monkeypatch.setattr(tiny, "config", dataclasses.replace(tiny.config, max_position_embeddings=10**12))
    caches, new_cache = [], tiny.new_cache
    monkeypatch.setattr(tiny, "new_cache", lambda **kw: caches.append(new_cache(**kw)) or caches[-1])
    tokens = list(itertools.islice(generate_ids(tiny, [1, 2, 3], 10**12), 300))
    assert len(tokens) == 300
    (cache,) = caches
    assert cache.length == 3 + 299 < cache.shape[2] <= 2 * cache.length


def test_generation_stops_when_the_context_is_full(tiny):
    """tiny_llama3's context is 128 positions: the prompt's 3, then 125 generated tokens fed back; the
    last token, predicted at position 127, has no position left to be fed at."""
    stats = GenerationStats()
    tokens = list(generate_ids(tiny, [1, 2, 3], 10**12, stats=stats))
    assert len(tokens) == stats.generated_tokens == 128 - 3 + 1
    assert stats.finish_reason == "context"
    with pytest.raises(ArgumentError, match="129 positions .* context length of 128"):
        list(generate_ids(tiny, list(range(1, 96)) + list(range(1, 35)), 1))


def test_text_that_is_not_unicode_is_named(tiny, tmp_path):
    """Python decodes bytes that are not UTF-8 (in argv, with os.fsdecode) to lone surrogates, which the
    tokenizers library rejects with a bare TypeError."""
    char_tokenizer(tmp_path / "tokenizer.json")
    tokenizer = Tokenizer.from_folder(tmp_path)
    with pytest.raises(ArgumentError, match=r"^text is not UTF-8: character 2 is the byte 0xff"):
        tokenizer.encode("ab\udcffc")
    with pytest.raises(ArgumentError, match=r"^prompt is not UTF-8: character 0 is the byte 0xfe"):
        next(generate(tiny, tokenizer, "\udcfeabc", chat=False))
    with pytest.raises(ArgumentError, match=r"^system is not UTF-8: character 1 is a lone surrogate U\+D800"):
        next(generate(tiny, tokenizer, "hi", system="a\ud800"))


# ---- streaming text ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_tokenizer():
    try:
        return Tokenizer.from_pretrained(default_model("generate"))
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


def test_stream_emits_whole_characters_and_adds_up(smollm2_tokenizer):
    text = "naïve café 日本語 😀 done"
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
    stream = smollm2_tokenizer.stream()
    pieces = [stream.push(i) for i in ids]
    pieces.append(stream.flush())
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert sum(p == "" for p in pieces) > 0  # the emoji's bytes span several tokens


def test_chat_template_and_stop_tokens_from_gguf(smollm2_tokenizer):
    prompt = smollm2_tokenizer.chat_prompt("Hi", system="Be brief.")
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>")
    assert prompt.endswith("<|im_start|>assistant\n")
    assert smollm2_tokenizer.inner.token_to_id("<|im_end|>") in smollm2_tokenizer.stop_token_ids


# ---- candle generate ---------------------------------------------------------------------------------

def generate_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_cli_streams_the_answer_and_the_speed(capsys, smollm2_tokenizer, dtype):
    code, out, err = generate_cli(capsys, "--temperature", "0", "--max-tokens", "24", "--dtype", dtype,
                                  "What is the capital of France?")
    assert code == 0
    assert "Paris" in out
    assert "tokens/s" in err.splitlines()[-1]
    # f32 answers "The capital of France is Paris." and stops, as transformers does. In bf16 the logits are
    # rounded to 8 bits, and the first two candidates tie at 25.25: the answer can take the longer path.
    assert "(stop)" in err or dtype == "bf16"


def char_tokenizer(path: Path) -> None:
    """A tokenizer.json of one token per printable ASCII character: the tiny model's 96 ids."""
    import tokenizers

    vocab = {chr(32 + i): i for i in range(95)} | {"<unk>": 95}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), "isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    tok.save(str(path))


def tiny_model_folder(path: Path, tokenizer: bool = True) -> Path:
    """tiny_llama3's files in a folder of their own, with the character tokenizer unless told not to."""
    path.mkdir()
    for f in (FIXTURES / "tiny_llama3").iterdir():
        (path / f.name).symlink_to(f)
    if tokenizer:
        char_tokenizer(path / "tokenizer.json")
    return path


def test_cli_raw_prompt_on_a_safetensors_folder(capsys, tmp_path):
    folder = tiny_model_folder(tmp_path / "model", tokenizer=False)
    code, _, err = generate_cli(capsys, "--model", str(folder), "--raw", "hello")
    assert code == 1 and "tokenizer.json" in err
    char_tokenizer(folder / "tokenizer.json")
    code, _, err = generate_cli(capsys, "--model", str(folder), "hello")
    assert code == 1 and "no chat template" in err and "--raw" in err
    code, out, err = generate_cli(capsys, "--model", str(folder), "--raw", "--seed", "1", "--max-tokens", "20",
                                  "hello")
    assert code == 0 and len(out) == 21 and "20 tokens generated" in err and "(length)" in err
    assert generate_cli(capsys, "--model", str(folder), "--raw", "--seed", "1", "--max-tokens", "20",
                        "hello")[1] == out
    # a weight file stands for its folder
    assert generate_cli(capsys, "--model", str(folder / "model.safetensors"), "--raw", "--seed", "1",
                        "--max-tokens", "20", "hello")[1] == out


def test_cli_errors_are_one_line(capsys, tmp_path):
    code, _, err = generate_cli(capsys, "--model", str(tmp_path / "nowhere"), "hi")
    assert code == 1 and err.startswith("candle generate: error:") and "nowhere" in err
    code, _, err = generate_cli(capsys, "--max-tokens", "-3", "hi")
    assert code == 1 and "--max-tokens" in err
    code, _, err = generate_cli(capsys, "--temperature", "-1", "hi")
    assert code == 1 and "temperature" in err


def test_cli_generates_up_to_the_context_whatever_max_tokens_allows(capsys, tmp_path):
    """--max-tokens is how many tokens at most, so a huge one asks for no limit: the answer runs to a stop
    token or, here, the end of the context (128 positions: "hello" and 124 tokens; greedy decoding of
    this model never meets its EOS). It used to allocate the cache for all 10**12 tokens up front and
    end in a MemoryError traceback."""
    folder = tiny_model_folder(tmp_path / "model")
    code, out, err = generate_cli(capsys, "--model", str(folder), "--raw", "--temperature", "0",
                                  "--max-tokens", str(10**12), "hello")
    assert code == 0 and len(out) == 128 - 5 + 1 + 1
    assert "124 tokens generated" in err and err.endswith("(context)\n")


@pytest.mark.parametrize("option", ["--temperature", "--top-p", "--repeat-penalty"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_cli_refuses_non_finite_sampler_settings(capsys, tmp_path, option, value):
    folder = tiny_model_folder(tmp_path / "model")
    code, out, err = generate_cli(capsys, "--model", str(folder), "--raw", "--max-tokens", "2", option, value, "hi")
    name = option[2:].replace("-", "_")
    assert (code, out) == (1, "")
    assert err.startswith(f"candle generate: error: {name} must be ") and err.endswith(f", got {value}\n")
    assert err.count("\n") == 1


def test_cli_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    for option in ("--model", "--max-tokens", "--temperature", "--top-k", "--top-p", "--repeat-penalty",
                   "--repeat-last-n", "--seed", "--raw", "--system", "--device", "--dtype"):
        assert option in out


def candle_subprocess(*argv) -> subprocess.CompletedProcess:
    """The candle command in a process of its own: argv may hold bytes, as a shell passes them."""
    return subprocess.run([sys.executable, "-m", "candle_api.cli", *argv], capture_output=True, timeout=120)


def test_cli_prompt_that_is_not_utf8_is_a_one_line_error(tmp_path):
    folder = tiny_model_folder(tmp_path / "model")
    done = candle_subprocess("generate", "--model", str(folder), "--raw", b"\xff\xfeabc")
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == b"candle generate: error: prompt is not UTF-8: character 0 is the byte 0xff\n"


@pytest.mark.parametrize("exc, message", [
    (MemoryError("cannot allocate 768000000023808 bytes"), "out of memory (cannot allocate 768000000023808 bytes)"),
    (MemoryError(), "out of memory"),
    (RuntimeError("a kernel failed"), "RuntimeError: a kernel failed"),
])
def test_cli_turns_any_failure_into_one_line(capsys, monkeypatch, exc, message):
    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(LlamaForCausalLM, "from_pretrained", fail)
    code, out, err = generate_cli(capsys, "--max-tokens", "2", "hi")
    assert (code, out, err) == (1, "", f"candle generate: error: {message}\n")


@pytest.mark.parametrize("scale", [0.05, 2.0, 20.0])
@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999999])
def test_top_p_keeps_what_a_full_stable_sort_keeps(scale, top_p):
    """The nucleus is found among the most likely tokens first; ties and flat distributions
    (a nucleus of most of the vocabulary) give what sorting everything gives."""
    logits = (np.random.default_rng(3).standard_normal(5000) * scale).astype(np.float32)
    logits[:40] = logits[40]  # a tie that straddles the candidates' cut
    z = logits.astype(np.float64) / 0.7
    z = np.exp(z - z.max())
    order = np.argsort(-z, kind="stable")
    sorted_p = z[order] / z.sum()
    expected = z.copy()
    expected[order[np.cumsum(sorted_p) - sorted_p >= top_p]] = 0
    np.testing.assert_array_equal(Sampler(0.7, top_p=top_p).probabilities(logits), expected / expected.sum())


def test_cli_samples_at_random_unless_seeded(capsys, tmp_path):
    """As llama.cpp and transformers do: the same prompt gives other answers run after run (it gave the
    same one, from a fixed default seed), and --seed N the same answer again."""
    folder = tiny_model_folder(tmp_path / "model")
    argv = ["--model", str(folder), "--raw", "--temperature", "1", "--max-tokens", "24", "hello"]
    runs = [generate_cli(capsys, *argv) for _ in range(3)]
    assert all(code == 0 and err.count("\n") == 1 for code, _, err in runs)  # the speed, and nothing more
    assert len({out for _, out, _ in runs}) > 1
    seeded = [generate_cli(capsys, *argv, "--seed", "5")[1] for _ in range(2)]
    assert seeded[0] == seeded[1]


#: candle generate whose answer never ends, a piece every 10 ms, run as a shell would run it: with the
#: default SIGINT handler (a test runner started in the background ignores SIGINT, and children inherit that).
ENDLESS_ANSWER = """
import itertools, signal, sys, time
from candle_api.cli import main
from candle_models import generate_command

def endless(*args, **kwargs):
    for _ in itertools.count():
        yield "ab"
        time.sleep(0.01)

signal.signal(signal.SIGINT, signal.default_int_handler)
generate_command.generate = endless
sys.exit(main())
"""


def test_cli_ctrl_c_ends_the_answer_with_a_newline_and_status_130(tmp_path):
    folder = tiny_model_folder(tmp_path / "model")
    proc = subprocess.Popen([sys.executable, "-c", ENDLESS_ANSWER, "generate", "--model", str(folder), "--raw",
                             "hello"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(4)  # the answer has begun
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    answer = (first + out).decode()
    assert proc.returncode == 130 and err == b"candle generate: error: interrupted\n"
    assert answer.startswith("abab") and answer.endswith("\n") and answer.count("\n") == 1
    assert set(answer[:-1]) == {"a", "b"}


def test_cli_names_what_is_not_a_model(capsys, tmp_path):
    """A file that is no model, or a folder without config.json or a GGUF file, used to be reported as a
    folder without tokenizer.json."""
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    for model in (tmp_path / "notes.txt", tmp_path / "empty"):
        code, out, err = generate_cli(capsys, "--model", str(model), "hi")
        assert (code, out) == (1, "")
        assert err == (f"candle generate: error: {model} is not a model: candle generate reads a GGUF file, a "
                       "folder with config.json and safetensors weights, or a Hugging Face repo id\n")
