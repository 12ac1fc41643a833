"""candle-pyo3's ``candle`` package as served by candle_api.compat.pyo3: the
behaviours candle-pyo3's own test suite checks (tools/run_pyo3_tests.py runs
that suite itself from a candle checkout), and its models."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import candle_api.compat.pyo3 as candle
from candle_api.compat.pyo3 import QTensor, Tensor
from candle_api.compat.pyo3.nn import Embedding, LayerNorm, Linear, Module, ModuleList, Sequential
from candle_api.compat.pyo3.testing import assert_almost_equal, assert_equal

FIXTURES = Path(__file__).parent / "models" / "fixtures"


def test_install_as_makes_import_candle_work(monkeypatch):
    for name in [n for n in sys.modules if n == "candle" or n.startswith("candle.")]:
        monkeypatch.delitem(sys.modules, name)
    candle.install_as("candle")
    import candle as aliased
    from candle.models.bert import BertModel
    from candle.nn import Linear as AliasedLinear
    from candle.typing import Shape, _ArrayLike  # noqa: F401  (candle-pyo3's type names)

    assert aliased is candle and AliasedLinear is Linear and BertModel.__module__.endswith("models.bert")
    assert aliased.utils.load_safetensors is candle.utils.load_safetensors and aliased.functional.softmax
    for name in [n for n in sys.modules if n == "candle" or n.startswith("candle.")]:
        monkeypatch.delitem(sys.modules, name)


def test_to_parses_candle_pyo3s_arguments():
    t = Tensor(3.0)
    other = Tensor(1.0).to(candle.f64)
    assert t.to(candle.f64).dtype == "f64" and t.to(dtype="f16").dtype == "f16"
    assert t.to(other).dtype == "f64" and t.to(other=other).dtype == "f64" and t.to("cpu", candle.f64).dtype == "f64"
    for args, kwargs in ((("no such dtype",), {}), ((), {"dtype": "no such dtype"}), ((candle.f32, "?"), {}),
                         ((), {})):
        with pytest.raises(TypeError):
            t.to(*args, **kwargs)
    for args, kwargs in (((candle.f16,), {"dtype": candle.f64}), ((candle.f16, candle.f32), {}),
                         (("cpu",), {"device": "cpu"})):
        with pytest.raises(ValueError, match="given twice"):
            t.to(*args, **kwargs)


def test_shape_arguments_raise_candle_pyo3s_classes():
    with pytest.raises(OverflowError):
        candle.rand((3, -1))
    with pytest.raises(OverflowError):
        candle.zeros(-2, 4)
    with pytest.raises(TypeError):
        candle.rand("a", 2)
    with pytest.raises(TypeError):
        candle.ones((2.5,))  # a float is no dim (it was truncated before)
    x = candle.rand(4, 6)
    assert x.reshape(-1, 2).shape == (12, 2) and x.reshape((2, -1)).shape == (2, 12)
    with pytest.raises(TypeError):
        x.reshape(2, "b")
    for shape in ((2, -3), (-4, 6), (5, 5), (2, -1, -1)):
        with pytest.raises(ValueError):
            x.reshape(shape)


def test_ggml_type_names_equal_every_spelling():
    q = candle.randn((4, 256)).quantize("Q4K")
    assert q.ggml_dtype == "q4k" and q.ggml_dtype == "Q4K" and "Q4_K" == q.ggml_dtype and q.ggml_dtype != "q4_0"
    assert str(q.ggml_dtype) == "q4k" and {q.ggml_dtype: 1}["q4k"] == 1 and isinstance(q, QTensor)
    assert candle.randn((4, 32)).quantize("q8_0").ggml_dtype.upper() == "Q8_0"


class _Holder(Module):
    def __init__(self, quantizable: bool = False):
        super().__init__()
        self.proj = Linear(32, 4)
        self.scale = Tensor(2.0)
        self.table = candle.randn((4, 32))
        if quantizable:
            self._quantizable_buffers.add("table")


def test_module_state_is_its_tensor_attributes():
    m = _Holder()
    assert [n for n, _ in m.named_buffers()] == ["scale", "table", "proj.weight", "proj.bias"]
    assert [n for n, _ in m.named_modules()] == ["", "proj"]
    sd = m.state_dict()
    assert list(sd) == ["scale", "table", "proj.weight", "proj.bias"] and sd._metadata[""] == {"version": 1}
    assert len(list(Module().buffers())) == 0
    m.load_state_dict({"scale": Tensor(5.0), "table": candle.ones((4, 32)), "proj.weight": candle.zeros((4, 32)),
                       "proj.bias": candle.ones((4,))})
    assert m.scale.values() == 5.0 and m.proj(candle.ones((1, 32))).values() == [[1.0] * 4]


def test_load_state_dict_names_every_problem():
    m = _Holder()
    with pytest.raises(RuntimeError, match=r"size mismatch for scale: copying a param with shape \(3,\)"):
        m.load_state_dict({**m.state_dict(), "scale": candle.ones((3,))})
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "table".') as err:
        m.load_state_dict({k: v for k, v in m.state_dict().items() if k != "table"} | {"extra": Tensor(1.0)})
    assert 'Unexpected key(s) in state_dict: "extra".' in str(err.value)
    keys = m.load_state_dict({"scale": Tensor(1.0)}, strict=False)
    assert keys.missing_keys == ["table", "proj.weight", "proj.bias"] and keys.unexpected_keys == []


def test_quantized_buffers_stay_quantized_only_where_allowed():
    q = candle.ones((4, 32)).quantize("q8_0")
    kept, decoded = _Holder(quantizable=True), _Holder()
    kept.load_state_dict({**kept.state_dict(), "table": q})
    decoded.load_state_dict({**decoded.state_dict(), "table": q})
    assert isinstance(kept.table, QTensor) and kept.table.ggml_dtype == "Q8_0"
    assert isinstance(decoded.table, Tensor) and decoded.table.allclose(q.dequantize())  # q8_0 holds 1 as 0.99994
    kept.table = candle.randn((4, 32)).quantize("f32")  # plain types are decoded: plain ops are faster
    assert isinstance(kept.table, Tensor)


@pytest.mark.parametrize("shape", [(8, 64), (3, 5, 64), (2, 2, 3, 64)])
def test_linear_multiplies_a_quantized_weight_as_it_is(shape):
    layer = Linear(64, 96)
    w = candle.randn((96, 64))
    x = candle.randn(shape)
    q = w.quantize("q8_0")
    layer.weight = q
    assert isinstance(layer.weight, QTensor)
    got = layer(x)
    want = x.matmul(q.dequantize().t()).numpy()  # within the rounding of the activations ggml quantizes too
    assert got.shape == shape[:-1] + (96,)
    np.testing.assert_allclose(got.numpy(), want, atol=0.02 * np.abs(want).max())
    assert Linear(64, 96, bias=False)(x).shape == shape[:-1] + (96,)


def test_layers_and_containers():
    norm = LayerNorm(8)
    x = candle.randn((2, 3, 8))
    out = norm(x).numpy()
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)
    emb = Embedding(10, 4)
    ids = Tensor([[1, 9], [0, 1]])
    assert emb(ids).shape == (2, 2, 4) and emb(ids)[0, 0].values() == emb.weight[1].values()
    seq = Sequential(Linear(8, 8), LayerNorm(8))
    assert seq(x).shape == (2, 3, 8) and len(seq) == 2 and isinstance(seq[1], LayerNorm)
    assert [n for n, _ in ModuleList([Linear(2, 2)]).named_buffers()] == ["0.weight", "0.bias"]


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "u32", "u8", "i64"])
def test_assertions(dtype):
    a = Tensor([1, 2, 3]).to(dtype)
    assert_equal(a, Tensor([1, 2, 3]).to(dtype))
    assert_almost_equal(a, a + 1, atol=1.5)
    assert_almost_equal(a, a + 1, rtol=1.5)
    for call in (lambda: assert_equal(a, a + 1), lambda: assert_almost_equal(a, a + 1, rtol=0.1),
                 lambda: assert_equal(a, a.to("f64" if dtype != "f64" else "f32"))):
        with pytest.raises(AssertionError):
            call()


def test_indexing_and_comparisons():
    t = Tensor([[1, 2, 1, 2], [3, 4, 3, 4], [5, 6, 5, 6]])
    assert t[Tensor([0, 2])].values() == t[[0, 2]].values() == [[1, 2, 1, 2], [5, 6, 5, 6]]
    assert t[:, Tensor([0, 2])].values() == [[1, 1], [3, 3], [5, 5]]
    assert t[None].shape == (1, 3, 4) and t[:, None, None, :].shape == (3, 1, 1, 4)
    r = Tensor([0, 1, 2])
    mask = r < (r + 1).reshape((3, 1))
    assert str(mask.dtype) == "u8" and mask.values() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert hash(t) == hash(t) and hash(t) != hash(Tensor([1]))


def test_files_round_trip(tmp_path):
    tensors = {"a": candle.randn((16, 256)), "b": candle.randn((4, 4))}
    candle.utils.save_safetensors(str(tmp_path / "x.safetensors"), tensors)
    back = candle.utils.load_safetensors(str(tmp_path / "x.safetensors"))
    assert all(back[k].values() == tensors[k].values() for k in tensors)
    metadata = {"n": 1, "s": "text", "list": [1, 2, 3], "nested": [[1, 2], [3, 4]]}
    qs = {"q": candle.randn((16, 256)).quantize("q4_0"), "f": candle.randn((4, 4)).quantize("f32")}
    candle.utils.save_gguf(str(tmp_path / "x.gguf"), qs, metadata)
    loaded, meta = candle.utils.load_gguf(str(tmp_path / "x.gguf"))
    assert meta == metadata
    for k in qs:
        assert loaded[k].ggml_dtype == qs[k].ggml_dtype and loaded[k].dequantize().values() == qs[k].dequantize().values()


def test_bert_matches_transformers():
    from candle_api.compat.pyo3.models.bert import BertModel, Config

    folder = FIXTURES / "tiny_bert" / "bert-seq"
    raw = json.loads((folder / "config.json").read_text())
    config = Config(**{f.name: raw[f.name] for f in fields(Config) if f.name in raw})
    weights = candle.utils.load_safetensors(folder / "model.safetensors")
    model = BertModel(config)
    model.load_state_dict({k.removeprefix("bert."): v for k, v in weights.items() if k.startswith("bert.")})
    expected = np.load(folder / "expected.npz")
    hidden, pooled = model.forward(Tensor(expected["input_ids"]), Tensor(expected["token_type_ids"]),
                                   attention_mask=Tensor(expected["attention_mask"]))
    np.testing.assert_allclose(hidden.numpy(), expected["last_hidden_state"], atol=1e-4)
    assert pooled.shape == (4, config.hidden_size)
    with pytest.raises(RuntimeError, match="Missing key"):
        BertModel(config).load_state_dict({})


def _tiny_llama(tmp_path) -> tuple[Path, dict]:
    """A random quantized Llama (GQA, 2 layers) as a GGUF file, and its tensors under candle-pyo3's names."""
    rng = np.random.default_rng(0)
    hidden, heads, kv_heads, ffn, vocab, layers = 64, 4, 2, 96, 48, 2

    def w(*shape, scale=0.1):
        return Tensor((rng.standard_normal(shape) * scale).astype(np.float32))

    gguf = {"token_embd.weight": w(vocab, hidden).quantize("q8_0"), "output_norm.weight": (w(hidden) + 1).quantize("f32"),
            "output.weight": w(vocab, hidden).quantize("q8_0")}
    for i in range(layers):
        b = f"blk.{i}"
        gguf |= {f"{b}.attn_q.weight": w(hidden, hidden).quantize("q8_0"),
                 f"{b}.attn_k.weight": w(hidden // heads * kv_heads, hidden).quantize("q8_0"),
                 f"{b}.attn_v.weight": w(hidden // heads * kv_heads, hidden).quantize("q8_0"),
                 f"{b}.attn_output.weight": w(hidden, hidden).quantize("q8_0"),
                 f"{b}.ffn_gate.weight": w(ffn, hidden).quantize("q4_0"),
                 f"{b}.ffn_up.weight": w(ffn, hidden).quantize("q4_0"),
                 f"{b}.ffn_down.weight": w(hidden, ffn).quantize("q8_0"),
                 f"{b}.attn_norm.weight": (w(hidden) + 1).quantize("f32"),
                 f"{b}.ffn_norm.weight": (w(hidden) + 1).quantize("f32")}
    meta = {"general.architecture": "llama", "llama.embedding_length": hidden, "llama.feed_forward_length": ffn,
            "llama.block_count": layers, "llama.attention.head_count": heads, "llama.attention.head_count_kv": kv_heads,
            "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
            "llama.context_length": 64, "llama.vocab_size": vocab}
    path = tmp_path / "tiny.gguf"
    candle.utils.save_gguf(str(path), gguf, meta)
    renames = [("token_embd", "tok_embeddings"), ("output_norm", "norm"), ("blk.", "layers."),
               (".attn_q.", ".attention.wq."), (".attn_k.", ".attention.wk."), (".attn_v.", ".attention.wv."),
               (".attn_output.", ".attention.wo."), (".ffn_gate.", ".feed_forward.w1."),
               (".ffn_down.", ".feed_forward.w2."), (".ffn_up.", ".feed_forward.w3."),
               (".attn_norm.", ".attention_norm.")]
    named = {}
    for name, q in gguf.items():
        for old, new in renames:
            name = name.replace(old, new)
        named[name] = q
    hparams = {"n_vocab": vocab, "n_embd": hidden, "n_head": heads, "n_head_kv": kv_heads, "n_layer": layers,
               "rope_freq": 10000.0, "context_length": 64}
    return path, {"hparams": hparams, "tensors": named}


def test_quantized_llama_matches_candle_models(tmp_path):
    from candle_api.compat.pyo3.models.llama import QuantizedLlama
    from candle_models.llama import LlamaForCausalLM

    path, parts = _tiny_llama(tmp_path)
    ours = QuantizedLlama(parts["hparams"], parts["tensors"])
    reference = LlamaForCausalLM.from_pretrained(path)
    prompt, step = [[3, 17, 5, 40, 2]], [[11]]
    cache = reference.new_cache()
    want_prompt = reference(Tensor(prompt), cache=cache).numpy()[:, -1]
    want_step = reference(Tensor(step), cache=cache).numpy()[:, -1]
    got_prompt = ours.forward(Tensor(prompt), 0).numpy()
    got_step = ours.forward(Tensor(step), 5).numpy()
    np.testing.assert_allclose(got_prompt, want_prompt, atol=2e-3)
    np.testing.assert_allclose(got_step, want_step, atol=2e-3)
