"""CTranslate2's Whisper (``WhisperSpec``: faster-whisper's model folders) in
transformers' names: the config, the generation settings and every weight,
and a conversion to a transformers folder (config.json, generation_config.json,
model.safetensors, tokenizer.json).

CTranslate2 stores the self-attention's q, k and v as one fused matrix
(``self_attention/linear_0``) and the cross-attention's k and v as another
(``attention/linear_1``); their k parts have zero biases, which transformers
does not have. Norms are gamma/beta; the output projection is an alias of the
token embeddings. Weights quantized to int8 (a scale per output row) or int16
(one scale) are dequantized: value / scale.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import candle_api as c
from candle_api.errors import FormatError

#: CTranslate2's ActivationType ids -> transformers' activation_function.
ACTIVATIONS = {0: "relu", 1: "gelu_new", 3: "gelu"}
SPEC = "WhisperSpec"


def _layers(tensors, stack: str) -> int:
    found = {int(m[1]) for name in tensors if (m := re.match(rf"{stack}/layer_(\d+)/", name))}
    if found != set(range(len(found))):
        raise FormatError(getattr(tensors, "path", ""), None, f"{stack} layers {sorted(found)} are not 0..n-1")
    return len(found)


def _scalar(tensors, name: str, default: int) -> int:
    return int(tensors[name].numpy()) if name in tensors else default


def _require(tensors, *names: str) -> None:
    missing = [n for n in names if n not in tensors]
    if missing:
        raise FormatError(getattr(tensors, "path", ""), None, f"not a CTranslate2 Whisper model: no {missing[0]!r}")


def hf_config(tensors) -> dict:
    """transformers' config.json for a ``WhisperSpec`` model.bin's variables."""
    _require(tensors, "encoder/conv1/weight", "decoder/embeddings/weight", "encoder/position_encodings/encodings",
             "decoder/position_encodings/encodings", "encoder/layer_0/ffn/linear_0/weight",
             "decoder/layer_0/ffn/linear_0/weight")
    d_model, mels, _ = tensors["encoder/conv1/weight"].shape
    activation = _scalar(tensors, "decoder/activation", 3)
    if activation not in ACTIVATIONS:
        raise FormatError(getattr(tensors, "path", ""), None, f"unsupported CTranslate2 activation id {activation}")
    return {
        "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
        "vocab_size": tensors["decoder/embeddings/weight"].shape[0], "num_mel_bins": mels, "d_model": d_model,
        "encoder_layers": _layers(tensors, "encoder"), "decoder_layers": _layers(tensors, "decoder"),
        "encoder_attention_heads": _scalar(tensors, "encoder/num_heads", d_model // 64),
        "decoder_attention_heads": _scalar(tensors, "decoder/num_heads", d_model // 64),
        "encoder_ffn_dim": tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        "decoder_ffn_dim": tensors["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        "max_source_positions": tensors["encoder/position_encodings/encodings"].shape[0],
        "max_target_positions": tensors["decoder/position_encodings/encodings"].shape[0],
        "activation_function": ACTIVATIONS[activation],
    }


def generation_config(ct2_config: dict) -> dict:
    """transformers' generation_config.json fields from CTranslate2's config.json: the suppressed tokens."""
    names = {"suppress_ids": "suppress_tokens", "suppress_ids_begin": "begin_suppress_tokens",
             "alignment_heads": "alignment_heads"}
    return {ours: ct2_config[theirs] for theirs, ours in names.items() if theirs in ct2_config}


def _special_ids(tokens, config: dict, generation: dict) -> tuple[dict, dict]:
    """config.json's and generation_config.json's special token ids, as transformers' Whisper checkpoints
    give them (the initial timestamp at most 1 s, as openai-whisper decodes)."""
    ids = {"bos_token_id": tokens.sot, "decoder_start_token_id": tokens.sot, "eos_token_id": tokens.eot,
           "pad_token_id": tokens.eot}
    generation = {**generation, **ids, "no_timestamps_token_id": tokens.no_timestamps,
                  "prev_sot_token_id": tokens.sot_prev, "is_multilingual": tokens.multilingual,
                  "max_initial_timestamp_index": 50, "max_length": config["max_target_positions"],
                  "return_timestamps": False}
    if tokens.multilingual:
        generation["lang_to_id"] = {f"<|{code}|>": i for code, i in tokens.languages.items()}
        generation["task_to_id"] = {"transcribe": tokens.transcribe, "translate": tokens.translate}
    return {**config, **ids}, generation


def _dequantized(tensors, name: str) -> c.Tensor:
    t = tensors[name]
    scale_name = name + "_scale"
    if scale_name not in tensors:
        return t
    scale = tensors[scale_name].to_dtype("f32")
    if scale.rank == 1:
        scale = scale.reshape((scale.shape[0],) + (1,) * (t.rank - 1))
    return t.to_dtype("f32") / scale


def _split(t: c.Tensor, parts: int, index: int) -> c.Tensor:
    n = t.shape[0] // parts
    return t.narrow(0, index * n, n)


def _attention(out: dict, tensors, ours: str, theirs: str, cross: bool) -> None:
    """q/k/v/out projections of one attention block; CT2's fused rows are q|k|v (self) or k|v (cross)."""
    def w(i, part=None, parts=1, bias=False):
        name = f"{theirs}/linear_{i}/{'bias' if bias else 'weight'}"
        return (lambda: _split(_dequantized(tensors, name), parts, part)) if part is not None else \
            (lambda: _dequantized(tensors, name))

    if cross:
        fused, out_index = 1, 2
        out[f"{ours}.q_proj.weight"], out[f"{ours}.q_proj.bias"] = w(0), w(0, bias=True)
        out[f"{ours}.k_proj.weight"] = w(fused, 0, 2)
        out[f"{ours}.v_proj.weight"], out[f"{ours}.v_proj.bias"] = w(fused, 1, 2), w(fused, 1, 2, True)
    else:
        fused, out_index = 0, 1
        out[f"{ours}.q_proj.weight"], out[f"{ours}.q_proj.bias"] = w(fused, 0, 3), w(fused, 0, 3, True)
        out[f"{ours}.k_proj.weight"] = w(fused, 1, 3)
        out[f"{ours}.v_proj.weight"], out[f"{ours}.v_proj.bias"] = w(fused, 2, 3), w(fused, 2, 3, True)
    out[f"{ours}.out_proj.weight"], out[f"{ours}.out_proj.bias"] = w(out_index), w(out_index, bias=True)


def _norm(out: dict, tensors, ours: str, theirs: str) -> None:
    out[f"{ours}.weight"] = lambda: tensors[f"{theirs}/gamma"]
    out[f"{ours}.bias"] = lambda: tensors[f"{theirs}/beta"]


def _linear(out: dict, tensors, ours: str, theirs: str) -> None:
    out[f"{ours}.weight"] = lambda: _dequantized(tensors, f"{theirs}/weight")
    out[f"{ours}.bias"] = lambda: tensors[f"{theirs}/bias"]


def _layer(out: dict, tensors, stack: str, i: int) -> None:
    ours, theirs = f"model.{stack}.layers.{i}", f"{stack}/layer_{i}"
    _attention(out, tensors, f"{ours}.self_attn", f"{theirs}/self_attention", cross=False)
    _norm(out, tensors, f"{ours}.self_attn_layer_norm", f"{theirs}/self_attention/layer_norm")
    if stack == "decoder":
        _attention(out, tensors, f"{ours}.encoder_attn", f"{theirs}/attention", cross=True)
        _norm(out, tensors, f"{ours}.encoder_attn_layer_norm", f"{theirs}/attention/layer_norm")
    _linear(out, tensors, f"{ours}.fc1", f"{theirs}/ffn/linear_0")
    _linear(out, tensors, f"{ours}.fc2", f"{theirs}/ffn/linear_1")
    _norm(out, tensors, f"{ours}.final_layer_norm", f"{theirs}/ffn/layer_norm")


def hf_tensors(tensors) -> c.io.TensorFile:
    """transformers' names -> the model.bin's tensors (views of its fused matrices), read lazily."""
    config = hf_config(tensors)
    out: dict = {}
    for name in ("conv1", "conv2"):
        _linear(out, tensors, f"model.encoder.{name}", f"encoder/{name}")
    for stack in ("encoder", "decoder"):
        out[f"model.{stack}.embed_positions.weight"] = \
            lambda stack=stack: tensors[f"{stack}/position_encodings/encodings"]
        _norm(out, tensors, f"model.{stack}.layer_norm", f"{stack}/layer_norm")
        for i in range(config[f"{stack}_layers"]):
            _layer(out, tensors, stack, i)
    out["model.decoder.embed_tokens.weight"] = lambda: _dequantized(tensors, "decoder/embeddings/weight")
    if "decoder/projection/weight" in tensors:
        out["proj_out.weight"] = lambda: _dequantized(tensors, "decoder/projection/weight")
    return c.io.TensorFile(out, {}, "ctranslate2 (as transformers' names)", getattr(tensors, "path", ""))


def is_ct2_model(path: Path) -> bool:
    """Whether ``path`` is a CTranslate2 model.bin, or a folder holding one."""
    from candle_api.io import format_for

    file = path / "model.bin" if path.is_dir() else path
    try:
        return file.is_file() and format_for(file).name == "ctranslate2"
    except (FormatError, OSError):
        return False


def load(path: Path) -> tuple[dict, dict, c.io.TensorFile]:
    """(config.json, generation settings, tensors in transformers' names) of a CTranslate2 Whisper model."""
    from ..tokenizer import read_json_object

    file = path / "model.bin" if path.is_dir() else path
    tensors = c.load(file, format="ctranslate2")
    spec = tensors.metadata.get("ctranslate2.spec")
    if spec != SPEC:
        raise FormatError(file, None, f"a CTranslate2 {spec or 'model'}, not Whisper's {SPEC}")
    return hf_config(tensors), generation_config(read_json_object(file.parent / "config.json")), hf_tensors(tensors)


def convert(src: str | Path, dst: str | Path, dtype: str | None = None) -> Path:
    """Writes the CTranslate2 Whisper model at ``src`` (its folder or model.bin, with tokenizer.json beside
    it) as a transformers folder ``dst`` that transformers' WhisperForConditionalGeneration loads and
    generates from: config.json, generation_config.json (special token ids, suppressed tokens),
    model.safetensors (in ``dtype``, default the file's float dtype; quantized weights become f32) and
    the tokenizer files. Returns ``dst``."""
    from ..tokenizer import Tokenizer
    from .tokens import WhisperTokens

    src, dst = Path(src), Path(dst)
    config, generation, tensors = load(src)
    folder = src if src.is_dir() else src.parent
    tokens = WhisperTokens(Tokenizer.from_folder(folder), config["vocab_size"])
    config, generation = _special_ids(tokens, config, generation)
    dst.mkdir(parents=True, exist_ok=True)
    weights = {}
    for name in tensors:
        t = tensors[name]
        weights[name] = t.to_dtype(dtype) if dtype is not None else t.contiguous()
    c.save(weights, dst / "model.safetensors")
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (dst / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    for name in ("tokenizer.json", "vocabulary.json", "vocabulary.txt", "preprocessor_config.json"):
        if (folder / name).is_file():
            shutil.copyfile(folder / name, dst / name)
    return dst
