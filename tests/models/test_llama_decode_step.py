"""The bound decoding step (candle_models.decode_step) against the model's own forward: the same
kernels on the same inputs, so the same logits bit for bit, on the real SmolLM2-135M Q4_1 (weights
kept quantized); and the cases it must leave to the forward."""

import numpy as np
import pytest

import candle_api as c
from candle_models import decode_step as ds


def _steps(model, tokens, capacity, use_step: bool, one_call: bool = True) -> np.ndarray:
    """Logits of a prompt's last position and of each decoding step, with the step bound or not (and
    bound as the cpu device's one call, or as its kernels called one by one)."""
    model.bound_decoding = use_step
    try:
        cache = model.new_cache(capacity=capacity)
        out = [model([tokens[:5]], cache, last_only=True).numpy()]
        for t in tokens[5:]:
            step = ds.decode_step(model, cache)
            if step is not None and not one_call and step.one_call is not None:
                step.one_call = None  # this step's kernels from Python
            out.append(model([[t]], cache, last_only=True).numpy())
        step = ds.decode_step(model, cache)
        assert (step is not None) == use_step
        assert step is None or (step.one_call is not None) == one_call
        return np.concatenate(out)
    finally:
        model.bound_decoding = True


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call", "kernel-by-kernel"])
def test_bound_step_gives_the_forwards_logits_bit_for_bit(smollm2_chat, one_call):
    model, _ = smollm2_chat
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 2114, 284, 12, 1675, 3, 9]
    with c.no_grad():
        # capacity 8: the cache grows twice during the steps, and the step binds its new buffers
        bound, forward = (_steps(model, tokens, 8, use, one_call) for use in (True, False))
    assert bound.shape == (len(tokens) - 4, 1, model.config.vocab_size)
    assert np.array_equal(bound, forward)


def test_the_step_serves_only_the_plain_case(smollm2_chat):
    model, _ = smollm2_chat
    assert ds.plan_for(model) is not None
    with c.no_grad():
        batch = model.new_cache(batch=2, capacity=8)
        assert ds.decode_step(model, batch) is None  # batch 2: the forward's
    assert ds.decode_step(model, model.new_cache(capacity=8)) is None  # gradients on: the forward's


def test_dequantized_weights_take_the_forward():
    """A model with plain f32 weights has no quantized products to bind: plan_for gives None."""
    from candle_models import ModelNotFoundError, default_model
    from candle_models.llama import LlamaForCausalLM

    try:
        path = default_model("generate")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    assert ds.plan_for(LlamaForCausalLM.from_pretrained(path, dtype="f32")) is None


def test_projections_of_mixed_types_are_bound_part_by_part():
    """A Q4_K_M-like fused projection: q rows of a type without a packed layout (q8_1, the qmatmul
    kernel), k/v rows packed (q8_0); the step writes each part's columns as the forward's cat does."""
    from candle_api.quantized import QTensor
    from candle_models import ModelNotFoundError, default_model
    from candle_models.llama import LlamaForCausalLM

    try:
        model = LlamaForCausalLM.from_pretrained(default_model("generate"))
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    for layer in model.model.layers[:2]:
        proj = layer.self_attn.qkv_proj
        w = proj.quantized[0].dequantize()
        q_rows = model.config.num_attention_heads * model.config.head_dim
        q = QTensor.quantize(w.narrow(0, 0, q_rows), "q8_1")
        kv = QTensor.quantize(w.narrow(0, q_rows, w.shape[0] - q_rows), "q8_0")
        kv.pack()
        proj.quantized = [q, kv]
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 2114]
    with c.no_grad():
        bound, forward = (_steps(model, tokens, 16, use) for use in (True, False))
        by_kernel = _steps(model, tokens, 16, True, one_call=False)
    assert np.array_equal(bound, forward) and np.array_equal(by_kernel, forward)


def test_sliding_windows_are_bound_as_the_forward_masks_them(smollm2_chat):
    """Layers of alternating windows (as Mistral's or Gemma's): the one-call step and the kernels one by
    one see the same keys as the forward's mask, once the window slides."""
    model, _ = smollm2_chat
    attns = [layer.self_attn for layer in model.model.layers]
    saved = [a.window for a in attns]
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 2114, 284, 12]
    try:
        for i, a in enumerate(attns):
            a.window = 4 if i % 2 == 0 else None
        model.__dict__.pop("_decode_step", None)
        with c.no_grad():
            forward = _steps(model, tokens, 16, False)
            assert np.array_equal(_steps(model, tokens, 16, True), forward)
            assert np.array_equal(_steps(model, tokens, 16, True, one_call=False), forward)
    finally:
        for a, w in zip(attns, saved):
            a.window = w
        model.__dict__.pop("_decode_step", None)


def test_the_one_call_step_refuses_a_position_past_its_cache(smollm2_chat):
    model, _ = smollm2_chat
    with c.no_grad():
        cache = model.new_cache(capacity=8)
        model([[1, 504, 3458]], cache, last_only=True)
        step = ds.decode_step(model, cache)
    x = model.embed(c.tensor([[9]]))
    cos, sin = model.rotary.cos_sin(0, 1)
    out = c.zeros(model.config.vocab_size)
    with pytest.raises(c.CandleError, match="position 8 is outside the cache's 8"):
        step.one_call(8, x._storage.ptr, cos._storage.ptr, sin._storage.ptr, out._storage.ptr)
