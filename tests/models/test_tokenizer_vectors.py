"""GGUF vocabularies tokenize as llama.cpp does: its own test vectors
(llama.cpp's models/ggml-vocab-*.gguf with their .inp/.out files, from the
llama-cpp-python 0.3.36 sdist), for every tokenizer model and pre-tokenizer
candle_models.gguf_vocab claims; the others are refused by name.

Every run: fixtures/llama_cpp_vocabs.json.xz (made by
fixtures/make_vocab_extracts.py), each vocabulary cut to the tokens its texts
can reach, and the pre-tokenizer names without vectors of their own under
llama.cpp's ids for them (fixtures/make_vocab_alias_vectors.py). With CANDLE_LLAMA_CPP_VOCABS set to the sdist's
``vendor/llama.cpp/models`` folder (CI fetches the sdist), also the whole
vocab-only GGUFs, claimed or refused, and the extract checked to cover them.
"""

from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import pytest

from candle_models.gguf_vocab import PRE_TOKENIZERS, tokenizer_from_gguf
from candle_models.tokenizer import Tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXTRACTS = json.loads(lzma.decompress((FIXTURES / "llama_cpp_vocabs.json.xz").read_bytes()))
SDIST_MODELS = os.environ.get("CANDLE_LLAMA_CPP_VOCABS")
SEPARATOR = "\n__ggml_vocab_test__\n"


def mismatches(tokenizer, cases) -> list:
    """The (text, want, got) of the cases ``tokenizer`` tokenizes otherwise (no special tokens added)."""
    bad = []
    for text, want in cases:
        got = tokenizer.encode(text, add_special_tokens=False).ids
        if got != want:
            bad.append((text[:60], want[:12], got[:12]))
    return bad


def test_the_extract_covers_the_claimed_pre_tokenizers():
    """Every tokenizer model read here and every pre-tokenizer name claimed: the vocabularies llama.cpp
    ships vectors for, SentencePiece (Llama 2, Phi-3), WordPiece (BGE) and byte-level BPE, and each other
    name llama.cpp groups with one of them, on that vocabulary with llama.cpp's ids under that name
    (fixtures/make_vocab_alias_vectors.py)."""
    pres = {v["metadata"].get("tokenizer.ggml.pre") for v in EXTRACTS.values()
            if v["metadata"]["tokenizer.ggml.model"] == "gpt2"}
    assert pres == set(PRE_TOKENIZERS)
    assert {v["metadata"]["tokenizer.ggml.model"] for v in EXTRACTS.values()} == {"gpt2", "llama", "bert"}


@pytest.mark.parametrize("name", sorted(EXTRACTS))
def test_llama_cpp_vectors(name):
    vocab = EXTRACTS[name]
    tokenizer = tokenizer_from_gguf(vocab["metadata"])
    cases = [(case["text"], case["ids"]) for case in vocab["cases"]]
    assert len(cases) >= 46
    assert mismatches(tokenizer, cases) == []


def test_space_prefix_of_sentencepiece():
    """A text that starts with a space keeps the dummy prefix: " Hello" is "__Hello" (llama.cpp and
    SentencePiece), not "_Hello" as when the prefix were skipped."""
    tokenizer = Tokenizer.from_gguf_metadata(EXTRACTS["llama-spm"]["metadata"])
    tokens = tokenizer.inner.encode(" Hello", add_special_tokens=False).tokens
    assert tokens == ["\u2581", "\u2581Hello"]
    assert tokenizer.decode(tokenizer.encode(" Hello"), skip_special_tokens=True) == " Hello"


def test_wordpiece_adds_cls_and_sep():
    tokenizer = Tokenizer.from_gguf_metadata(EXTRACTS["bert-bge"]["metadata"])
    tokens = tokenizer.inner.encode("Hello, world!").tokens
    assert tokens == ["[CLS]", "hello", ",", "world", "!", "[SEP]"]
    assert tokenizer.decode(tokenizer.encode("Hello, world!"), skip_special_tokens=True) == "hello, world!"


@pytest.mark.parametrize("key, value, message", [
    ("tokenizer.ggml.pre", "tekken", "GGUF pre-tokenizer 'tekken' is not supported (supported: codeshell, "),
    ("tokenizer.ggml.model", "gemma4", "GGUF tokenizer model 'gemma4' is not supported (supported: gpt2, llama, bert)"),
    ("tokenizer.ggml.model", "t5", "GGUF tokenizer model 't5' is not supported"),
])
def test_what_is_not_claimed_is_refused_by_name(key, value, message):
    metadata = dict(EXTRACTS["gpt-2"]["metadata"], **{key: value})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tokenizer_from_gguf(metadata)


# ---- the whole vocab-only GGUFs, when the sdist is at hand ------------------------------------------

def sdist_vocabs() -> list:
    if not SDIST_MODELS:
        return [pytest.param(None, marks=pytest.mark.skip(reason="CANDLE_LLAMA_CPP_VOCABS is not set"))]
    return sorted(p for p in Path(SDIST_MODELS).glob("ggml-vocab-*.gguf") if p.with_name(p.name + ".inp").exists())


def sdist_cases(gguf: Path) -> list:
    raw = gguf.with_name(gguf.name + ".inp").read_bytes().decode("utf-8")  # bytes: the texts hold \r
    texts = raw.split(SEPARATOR)[:-1] if raw.endswith(SEPARATOR) else raw.split(SEPARATOR)
    lines = gguf.with_name(gguf.name + ".out").read_bytes().decode("utf-8").splitlines()
    assert len(texts) == len(lines)
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts, lines)]


@pytest.mark.parametrize("gguf", sdist_vocabs(), ids=lambda p: p.name if p else "none")
def test_whole_vocabularies_from_the_sdist(gguf):
    """A vocabulary whose tokenizer model and pre-tokenizer are claimed passes every case, and the
    committed extract holds it; any other is refused, naming what is not supported."""
    import candle_api as c

    metadata = c.load(str(gguf)).metadata
    try:
        tokenizer = tokenizer_from_gguf(metadata)
    except ValueError as exc:
        assert "is not supported (supported: " in str(exc)
        return
    name = gguf.name[len("ggml-vocab-"):-len(".gguf")]
    assert name in EXTRACTS, f"{name} is claimed but fixtures/llama_cpp_vocabs.json.xz lacks it"
    assert mismatches(tokenizer, sdist_cases(gguf)) == []
