"""Sampling, stop tokens, streaming text and ``candle generate``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from candle_api.cli import main
from candle_models import ModelNotFoundError, default_model
from candle_models.generation import GenerationStats, Sampler, generate_ids
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


def test_cli_raw_prompt_on_a_safetensors_folder(capsys, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for f in (FIXTURES / "tiny_llama3").iterdir():
        (folder / f.name).symlink_to(f)
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


def test_cli_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    for option in ("--model", "--max-tokens", "--temperature", "--top-k", "--top-p", "--repeat-penalty",
                   "--repeat-last-n", "--seed", "--raw", "--system", "--device", "--dtype"):
        assert option in out
