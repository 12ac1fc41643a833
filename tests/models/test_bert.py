"""BERT, RoBERTa, XLM-RoBERTa and DistilBERT with seeded random weights
against transformers' outputs (fixtures/tiny_bert, made by
fixtures/make_bert_fixtures.py), and loading: prefixes, formats, the Hugging
Face cache, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import FormatError, ShapeError, TensorNameError
from candle_models import ModelNotFoundError
from candle_models import bert, distilbert
from candle_models.weights import weight_files

TINY = Path(__file__).parent / "fixtures" / "tiny_bert"
TOL = 1e-4

HEADS = {"mlm": "ForMaskedLM", "seq": "ForSequenceClassification", "tok": "ForTokenClassification"}
CHECKPOINTS = sorted(p.name for p in TINY.iterdir() if p.is_dir())


def model_class(family: str, suffix: str):
    if family == "distilbert":
        return getattr(distilbert, "DistilBert" + suffix)
    return getattr(bert, "Bert" + suffix)


def expected(name: str) -> tuple[dict, dict]:
    """(model inputs, transformers' outputs) of a fixture checkpoint."""
    data = np.load(TINY / name / "expected.npz")
    inputs = {k: data[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in data}
    return inputs, {k: data[k] for k in data.files if k not in inputs}


def run(model, **inputs) -> np.ndarray:
    with c.no_grad():
        return model(**inputs).numpy()


def test_fixtures_cover_every_family_and_head():
    assert len(CHECKPOINTS) == 13
    for family in ("bert", "roberta", "xlm-roberta", "distilbert"):
        for task in HEADS:
            assert f"{family}-{task}" in CHECKPOINTS


@pytest.mark.parametrize("name", [n for n in CHECKPOINTS if not n.endswith("-base")])
def test_head_logits_match_transformers(name):
    family, task = name.rsplit("-", 1)
    inputs, outputs = expected(name)
    logits = run(model_class(family, HEADS[task]).from_pretrained(TINY / name), **inputs)
    assert logits.shape == outputs["logits"].shape
    np.testing.assert_allclose(logits, outputs["logits"], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_base_model_last_hidden_state_matches_transformers(name):
    """The base model loads from checkpoints with a head (weights under
    bert./roberta./distilbert.) and from a base model's (no prefix)."""
    family = name.rsplit("-", 1)[0]
    inputs, outputs = expected(name)
    hidden = run(model_class(family, "Model").from_pretrained(TINY / name), **inputs)
    np.testing.assert_allclose(hidden, outputs["last_hidden_state"], rtol=0, atol=TOL)


def test_roberta_positions_come_from_the_ids():
    """Positions count real tokens from padding_idx + 1, so a left-padded row
    (the fixture's last) equals the same tokens without the padding."""
    inputs, _ = expected("roberta-mlm")
    model = bert.BertModel.from_pretrained(TINY / "roberta-mlm")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    real = mask[3] == 1
    assert not real[0], "the fixture's last row is left-padded"
    padded = run(model, input_ids=ids[3:], attention_mask=mask[3:])[0, real]
    alone = run(model, input_ids=ids[3:, real])[0]
    np.testing.assert_allclose(padded, alone, rtol=0, atol=1e-5)
    positions = bert.roberta_position_ids(c.Tensor(ids[3:]), padding_idx=1).numpy()[0]
    assert positions.tolist() == [1] * 5 + list(range(2, 9))


@pytest.mark.parametrize("name", ["bert-tok", "distilbert-mlm", "xlm-roberta-base"])
def test_padding_does_not_change_real_tokens(name):
    family = name.rsplit("-", 1)[0]
    model = model_class(family, "Model").from_pretrained(TINY / name)
    inputs, _ = expected(name)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    batch = run(model, input_ids=ids, attention_mask=mask)
    row, n = 1, int(mask[1].sum())  # 7 real tokens on the right of the row, padding after them
    alone = run(model, input_ids=ids[row:row + 1, :n])
    np.testing.assert_allclose(batch[row, :n], alone[0], rtol=0, atol=1e-5)


def test_token_types_matter():
    """The BERT fixture's token types are those of sentence pairs: dropping them changes the output."""
    inputs, outputs = expected("bert-tok")
    model = bert.BertModel.from_pretrained(TINY / "bert-tok")
    without = run(model, input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert np.abs(without - outputs["last_hidden_state"]).max() > 10 * TOL


def test_pytorch_checkpoint_loads_through_the_format_plugin():
    folder = TINY / "distilbert-tok"
    assert weight_files(folder) == [folder / "pytorch_model.bin"]
    inputs, outputs = expected("distilbert-tok")
    logits = run(distilbert.DistilBertForTokenClassification.from_pretrained(folder, dtype="f64"), **inputs)
    np.testing.assert_allclose(logits, outputs["logits"], rtol=0, atol=TOL)


def test_loads_from_the_hugging_face_cache_offline(tmp_path, monkeypatch):
    """A repo id resolves to its snapshot in the cache with HF_HUB_OFFLINE=1."""
    import huggingface_hub.constants as hub

    commit = "0" * 40
    repo = tmp_path / "models--tiny--roberta-seq"
    shutil.copytree(TINY / "roberta-seq", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    inputs, outputs = expected("roberta-seq")
    logits = run(bert.BertForSequenceClassification.from_pretrained("tiny/roberta-seq"), **inputs)
    np.testing.assert_allclose(logits, outputs["logits"], rtol=0, atol=TOL)


def test_missing_repo_offline_is_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache.*offline"):
        bert.BertModel.from_pretrained("nobody/no-such-bert")
    with pytest.raises(ModelNotFoundError, match="not a file, a folder or a Hugging Face repo id"):
        bert.BertModel.from_pretrained(tmp_path / "missing-folder")


def test_a_folder_without_config_is_a_format_error(tmp_path):
    shutil.copy(TINY / "bert-mlm" / "model.safetensors", tmp_path)
    with pytest.raises(FormatError, match="no config.json"):
        bert.BertModel.from_pretrained(tmp_path)


def test_config_of_another_family_is_refused():
    with pytest.raises(ValueError, match="DistilBERT has its own classes"):
        bert.BertModel.from_pretrained(TINY / "distilbert-mlm")
    with pytest.raises(ValueError, match="not DistilBERT"):
        distilbert.DistilBertModel.from_pretrained(TINY / "bert-mlm")


def test_missing_head_weights_name_the_tensor():
    """A masked-LM checkpoint has no pooler, so it cannot make a BERT classifier."""
    with pytest.raises(TensorNameError, match="bert.pooler.dense.weight"):
        bert.BertForSequenceClassification.from_pretrained(TINY / "bert-mlm")


def test_input_longer_than_the_positions_is_a_shape_error():
    model = bert.BertModel.from_pretrained(TINY / "roberta-tok")  # 22 positions: 20 tokens after padding_idx
    assert run(model, input_ids=np.full((1, 20), 5)).shape == (1, 20, 12)
    with pytest.raises(ShapeError, match="21 tokens, more than the 20 positions"):
        run(model, input_ids=np.full((1, 21), 5))


def test_bad_inputs_are_clear_errors():
    model = bert.BertModel.from_pretrained(TINY / "bert-tok")
    with pytest.raises(ShapeError, match=r"\(batch, length\)"):
        run(model, input_ids=np.arange(5))
    with pytest.raises(ShapeError, match="attention_mask has shape"):
        run(model, input_ids=np.ones((2, 5), dtype=np.int64), attention_mask=np.ones((2, 4)))
    with pytest.raises(c.DTypeError, match="integers"):
        run(model, input_ids=c.ones((2, 5)))
