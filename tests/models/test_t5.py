"""T5 (candle_models.t5) against transformers: seeded random T5 v1.0, v1.1 /
flan-t5 and encoder-only checkpoints made by fixtures/make_t5_vit_fixtures.py
(encoder states and logits of a padded batch, 32 greedy tokens through the
KV cache), the relative-position buckets, the Unigram tokenizer, generation
(candle_models.seq2seq) and ``candle generate`` on a T5 folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import DTypeError, IndexOutOfRangeError, ShapeError
from candle_models.generation import GenerationStats, Sampler
from candle_models.seq2seq import generate_seq2seq_ids, text2text
from candle_models.t5 import T5Config, T5EncoderModel, T5ForConditionalGeneration, relative_position_bucket
from candle_models.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_t5"
MODELS = ["tiny_t5", "tiny_t5_v1_1"]
TOL = 1e-4


def reference(name: str) -> dict:
    return dict(np.load(FIXTURES / name / "reference.npz"))


def prompts(ref: dict) -> list[list[int]]:
    return [row[mask == 1].tolist() for row, mask in zip(ref["input_ids"], ref["attention_mask"])]


def test_relative_position_buckets_match_transformers():
    """Every bucket of -300..300 for three settings, bidirectional and causal: the float32 rounding
    decides the distances on a bucket's edge (16, 32, 64 of the defaults)."""
    data = np.load(FIXTURES / "t5_buckets.npz")
    keys = [k for k in data.files if k != "relative_position"]
    assert len(keys) == 6
    for key in keys:
        buckets, distance, kind = key.split("_")
        ours = relative_position_bucket(data["relative_position"], kind == "bi", int(buckets[1:]), int(distance[1:]))
        np.testing.assert_array_equal(ours, data[key], err_msg=key)


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers(name):
    """A padded batch: the encoder's states and the logits of every decoder position."""
    ref = reference(name)
    model = T5ForConditionalGeneration.from_pretrained(FIXTURES / name)
    with c.no_grad():
        encoded = model.encode(ref["input_ids"], ref["attention_mask"]).numpy()
        logits = model(ref["input_ids"], ref["decoder_input_ids"], ref["attention_mask"]).numpy()
    mask = ref["attention_mask"][:, :, None] == 1  # padded positions' states are not compared
    np.testing.assert_allclose(np.where(mask, encoded, 0), np.where(mask, ref["encoder_hidden"], 0), rtol=0, atol=TOL)
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_tokens_match_transformers(name):
    """32 greedy tokens per input, through the KV cache, with no stop token (as the fixture's)."""
    ref = reference(name)
    model = T5ForConditionalGeneration.from_pretrained(FIXTURES / name)
    for ids, expected in zip(prompts(ref), ref["greedy"]):
        tokens = list(generate_seq2seq_ids(model, ids, 32, Sampler(temperature=0), stop_token_ids=()))
        assert tokens == expected.tolist()


@pytest.mark.parametrize("name", MODELS)
def test_decoding_step_by_step_matches_one_forward(name):
    """The decoder fed through its cache in steps of 3, 2 and 1 tokens gives the full forward's logits."""
    ref = reference(name)
    model = T5ForConditionalGeneration.from_pretrained(FIXTURES / name)
    decoder = ref["decoder_input_ids"]
    with c.no_grad():
        cache = model.new_cache(model.encode(ref["input_ids"], ref["attention_mask"]), ref["attention_mask"],
                                capacity=2)
        steps = [model.decode(decoder[:, :3], cache), model.decode(decoder[:, 3:5], cache)]
        steps += [model.decode(decoder[:, t:t + 1], cache) for t in range(5, decoder.shape[1])]
        one = model.new_cache(model.encode(ref["input_ids"][:1, :5]))
        last = model.decode(decoder[:1, :4], one, last_only=True)
        with pytest.raises(ShapeError, match="decoder ids for 2 sequences, a cache of 1"):
            model.decode(decoder[:, :1], one)
    np.testing.assert_allclose(np.concatenate([s.numpy() for s in steps], axis=1), ref["logits"], rtol=0, atol=TOL)
    assert cache.length == decoder.shape[1] and last.shape == (1, 1, 128) and one.length == 4


def test_encoder_model_matches_transformers():
    """T5EncoderModel from an encoder-only checkpoint, and from a whole T5's (its decoder ignored)."""
    ref = reference("tiny_t5_encoder")
    model = T5EncoderModel.from_pretrained(FIXTURES / "tiny_t5_encoder")
    mask = ref["attention_mask"][:, :, None] == 1
    with c.no_grad():
        hidden = model(ref["input_ids"], ref["attention_mask"]).numpy()
        np.testing.assert_allclose(np.where(mask, hidden, 0), np.where(mask, ref["encoder_hidden"], 0), rtol=0,
                                   atol=TOL)
        full = reference("tiny_t5")
        hidden = T5EncoderModel.from_pretrained(TINY)(full["input_ids"], full["attention_mask"]).numpy()
    np.testing.assert_allclose(np.where(mask, hidden, 0), np.where(mask, full["encoder_hidden"], 0), rtol=0, atol=TOL)


def test_checkpoints_with_every_tied_copy_load_alike(tmp_path):
    """Checkpoints saved by transformers 4 (pytorch_model.bin) also hold encoder.embed_tokens,
    decoder.embed_tokens and lm_head, copies of shared: the same model."""
    folder = tmp_path / "t5"
    shutil.copytree(TINY, folder)
    tensors = c.load(str(folder / "model.safetensors"))
    shared = tensors["shared.weight"]
    copies = {"encoder.embed_tokens.weight": shared, "decoder.embed_tokens.weight": shared, "lm_head.weight": shared}
    c.save({**{k: tensors[k] for k in tensors}, **copies}, folder / "model.safetensors")
    ref = reference("tiny_t5")
    with c.no_grad():
        logits = T5ForConditionalGeneration.from_pretrained(folder)(ref["input_ids"], ref["decoder_input_ids"],
                                                                    ref["attention_mask"]).numpy()
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=TOL)


def test_sampling_is_seeded_and_stops_at_the_end_of_sequence():
    model = T5ForConditionalGeneration.from_pretrained(FIXTURES / "tiny_t5_v1_1")
    ids = prompts(reference("tiny_t5_v1_1"))[0]

    def run(seed, **options):
        stats = GenerationStats()
        tokens = list(generate_seq2seq_ids(model, ids, 40, Sampler(temperature=1.5, seed=seed, **options),
                                           stats=stats))
        return tokens, stats

    first, stats = run(7)
    assert run(7)[0] == first and run(8)[0] != first
    assert all(0 <= t < 128 for t in first) and 1 not in first  # </s> (id 1) ends it, unyielded
    assert stats.finish_reason in ("stop", "length") and stats.prompt_tokens == len(ids)
    assert len(first) == stats.generated_tokens == (40 if stats.finish_reason == "length" else len(first))
    assert run(3, top_k=1)[0] == list(generate_seq2seq_ids(model, ids, 40, Sampler(temperature=0)))


def test_text2text_streams_the_decoded_greedy_tokens():
    """tokenizer.json in, text out: the pieces make the text of the greedy tokens up to </s>."""
    model, tokenizer = T5ForConditionalGeneration.from_pretrained(TINY), Tokenizer.from_pretrained(TINY)
    text = "translate English to German: the house is wonderful."
    ids = tokenizer.encode(text)
    assert ids == prompts(reference("tiny_t5"))[0]
    stats = GenerationStats()
    pieces = list(text2text(model, tokenizer, text, 20, Sampler(temperature=0), stats=stats))
    expected = list(generate_seq2seq_ids(model, ids, 20, Sampler(temperature=0)))
    assert "".join(pieces) == tokenizer.decode(expected, skip_special_tokens=True) and len(pieces) > 1
    assert stats.generated_tokens == len(expected)


def test_tokenizer_matches_transformers():
    """T5's Unigram tokenizer.json (the tokenizers library's Viterbi segmentation), </s> appended,
    sentinels kept whole, decoding with and without the special tokens, as transformers' T5Tokenizer."""
    tokenizer = Tokenizer.from_pretrained(TINY)
    cases = json.loads((FIXTURES / "t5_tokenizer_cases.json").read_text())
    assert len(cases) == 8
    for case in cases:
        assert tokenizer.encode(case["text"]) == case["ids"], case["text"]
        assert tokenizer.decode(case["ids"]) == case["decoded"]
        assert tokenizer.decode(case["ids"], skip_special_tokens=True) == case["decoded_skip"]
    assert tokenizer.stop_token_ids == {1}


@pytest.mark.parametrize("change, message", [
    ({"model_type": "bart"}, "model_type 'bart' is not T5"),
    ({"feed_forward_proj": "gated-gelu-new"}, "feed_forward_proj 'gated-gelu-new'"),
    ({"feed_forward_proj": "swiglu"}, "unsupported activation 'swiglu'"),
    ({"relative_attention_num_buckets": 32, "relative_attention_max_distance": 16}, "must exceed half"),
    ({"relative_attention_num_buckets": 2}, "at least 4"),
    ({"d_model": None}, "no 'd_model'"),
])
def test_bad_configs_are_named(change, message):
    cfg = json.loads((TINY / "config.json").read_text())
    cfg.update(change)
    for key in [k for k, v in change.items() if v is None]:
        del cfg[key]
    with pytest.raises(ValueError, match=message):
        T5Config.from_dict(cfg)


def test_bad_inputs_are_named():
    model = T5ForConditionalGeneration.from_pretrained(TINY)
    with pytest.raises(IndexOutOfRangeError, match="index 500"):
        model.encode([[5, 500]])
    with pytest.raises(DTypeError, match="integers"):
        model.encode(np.array([[1.5, 2.0]]))
    with pytest.raises(ShapeError, match=r"\(batch, length\)"):
        model.encode([1, 2, 3])
    with pytest.raises(ShapeError, match="attention_mask has shape"):
        model.encode([[5, 6, 7]], [[1, 1]])
    with pytest.raises(ValueError, match="the input is empty"):
        next(generate_seq2seq_ids(model, []))


def test_the_family_comes_from_the_config(tmp_path):
    """candle_models.causal_lm picks T5 for text generation, and the refusal names every family."""
    from candle_models import causal_lm

    assert causal_lm.family(TINY) is T5ForConditionalGeneration
    folder = tmp_path / "bart"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(ValueError, match=r"model_type 'bart' is not a supported .*t5\b"):
        causal_lm.family(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ValueError, match="candle classify"):
        causal_lm.family(folder)


def test_candle_generate_runs_t5(capsys):
    """candle generate on a T5 folder: text to text (no chat template needed), the greedy answer."""
    from candle_api.cli import main

    model, tokenizer = T5ForConditionalGeneration.from_pretrained(TINY), Tokenizer.from_pretrained(TINY)
    text = "summarize: owning a dog is good"
    expected = "".join(text2text(model, tokenizer, text, 12, Sampler(temperature=0)))
    assert main(["generate", "--model", str(TINY), "--temperature", "0", "--repeat-penalty", "1",
                 "--max-tokens", "12", text]) == 0
    out, err = capsys.readouterr()
    assert out == expected + "\n" and "tokens generated" in err
    assert main(["generate", "--model", str(TINY), "--system", "be brief", "hi"]) == 1
    assert "--system needs a chat model" in capsys.readouterr().err
