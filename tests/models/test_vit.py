"""ViT (candle_models.vit) and its image preprocessing (candle_models.image)
against transformers and Pillow: seeded random ViTForImageClassification and
ViTModel checkpoints made by fixtures/make_t5_vit_fixtures.py (logits, hidden
states and pooler output of real images, and at another image size with
interpolated position embeddings), Pillow's resizes with each filter, the
ViT processor's pixel values, and ``candle classify``. Reading image files
needs Pillow (the optional extra candle-models[vision]); everything else
runs on arrays."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError, DTypeError, FormatError, ShapeError
from candle_models.image import RESAMPLE_NAMES, ImageProcessor, as_rgb, read_image, resize
from candle_models.vit import ViTConfig, ViTForImageClassification, ViTModel

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_vit"
IMAGES = FIXTURES / "vit_images"
TOL = 1e-4


def reference(name: str) -> dict:
    return dict(np.load(FIXTURES / name / "reference.npz"))


def run(model, pixels, **options) -> np.ndarray:
    with c.no_grad():
        return model(pixels, **options).numpy()


def test_classifier_logits_match_transformers():
    ref = reference("tiny_vit")
    model = ViTForImageClassification.from_pretrained(TINY)
    np.testing.assert_allclose(run(model, ref["pixel_values"]), ref["logits"], rtol=0, atol=TOL)
    assert model.config.labels == ["tabby cat", "golden retriever", "pagoda", "seashore", "daisy"]


def test_another_image_size_interpolates_the_position_embeddings():
    """48 x 40 pixels: a 6 x 5 grid of patches instead of 4 x 4, the embeddings resized bicubically."""
    ref = reference("tiny_vit")
    model = ViTForImageClassification.from_pretrained(TINY)
    logits = run(model, ref["pixel_values_48x40"], interpolate_pos_encoding=True)
    np.testing.assert_allclose(logits, ref["logits_48x40"], rtol=0, atol=TOL)
    with pytest.raises(ShapeError, match="takes 32 x 32 images, got 48 x 40"):
        run(model, ref["pixel_values_48x40"])


def test_base_model_hidden_states_and_pooler_match_transformers():
    """ViTModel without q/k/v biases, GELU-tanh, its pooler; and the base model inside a classifier's
    checkpoint (weights under vit.)."""
    ref = reference("tiny_vit_base")
    model = ViTModel.from_pretrained(FIXTURES / "tiny_vit_base")
    with c.no_grad():
        hidden = model(ref["pixel_values"])
        pooled = model.pool(hidden).numpy()
    np.testing.assert_allclose(hidden.numpy(), ref["last_hidden_state"], rtol=0, atol=TOL)
    np.testing.assert_allclose(pooled, ref["pooler_output"], rtol=0, atol=TOL)
    inner = ViTModel.from_pretrained(TINY)
    assert inner.pooler is None and run(inner, reference("tiny_vit")["pixel_values"]).shape == (2, 17, 32)
    with pytest.raises(ValueError, match="without a pooler"):
        inner.pool(hidden)


def test_resize_is_pillows_pixel_for_pixel():
    """Every filter of Pillow's Resample.c, reducing and enlarging, the vertical pass first where
    Pillow 13 runs it first (the photo's 120 -> 29 rows against 160 -> 37 columns)."""
    data = np.load(IMAGES / "resize.npz")
    names = {name: number for number, name in RESAMPLE_NAMES.items()}
    cases = [key for key in data.files if key.count("_") == 2 and not key.startswith("pixel")]
    assert len(cases) == 25
    for key in cases:
        image, filt, size = key.split("_")
        width, height = map(int, size.split("x"))
        np.testing.assert_array_equal(resize(data[image], height, width, names[filt]), data[key], err_msg=key)


def test_processor_matches_transformers():
    """preprocessor_config.json's resize (bilinear), rescale and normalize: the pixel values of the
    model fixture's first image (the decoded JPEG) and of the gray PNG made RGB."""
    data = np.load(IMAGES / "resize.npz")
    processor = ImageProcessor.from_folder(TINY)
    assert (processor.height, processor.width, processor.resample) == (32, 32, 2)
    np.testing.assert_allclose(processor(data["photo"]), data["pixel_values_jpg"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(processor(data["photo"])[0], reference("tiny_vit")["pixel_values"][0], rtol=0,
                               atol=1e-6)
    assert processor([data["photo"], data["noise"]]).shape == (2, 3, 32, 32)


def test_processor_refuses_what_it_does_not_do():
    with pytest.raises(ValueError, match="do_center_crop"):
        ImageProcessor.from_dict({"do_center_crop": True})
    with pytest.raises(ValueError, match="shortest_edge"):
        ImageProcessor.from_dict({"size": {"shortest_edge": 224}})
    with pytest.raises(ValueError, match="resample 0"):
        ImageProcessor.from_dict({"resample": 0})
    with pytest.raises(DTypeError, match="uint8"):
        as_rgb(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ShapeError, match="got shape"):
        as_rgb(np.zeros((4, 4, 2), np.uint8))
    assert as_rgb(np.full((2, 3), 7, np.uint8)).shape == (2, 3, 3)
    unresized = ImageProcessor(do_resize=False)
    with pytest.raises(ShapeError, match="different sizes"):
        unresized([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)])
    with pytest.raises(ArgumentError, match="no images"):
        unresized([])


@pytest.mark.parametrize("change, message", [
    ({"model_type": "deit"}, "model_type 'deit' is not ViT"),
    ({"image_size": [32, 48]}, "only square sizes"),
    ({"hidden_act": "swiglu"}, "unsupported activation"),
    ({"num_attention_heads": 5}, "does not divide"),
    ({"patch_size": 0}, "patch_size 0 must be from 1"),
    ({"patch_size": 64}, "patch_size 64 must be from 1 to image_size"),
])
def test_bad_configs_are_named(change, message):
    cfg = json.loads((TINY / "config.json").read_text())
    cfg.update(change)
    with pytest.raises(ValueError, match=message):
        ViTConfig.from_dict(cfg)


def test_bad_pixels_are_named():
    model = ViTForImageClassification.from_pretrained(TINY)
    with pytest.raises(ShapeError, match=r"\(batch, 3, height, width\)"):
        run(model, np.zeros((1, 1, 32, 32), np.float32))
    with pytest.raises(ShapeError, match="holds no 8 x 8 patch"):
        run(model, np.zeros((1, 3, 4, 40), np.float32), interpolate_pos_encoding=True)


# ---- image files (Pillow) -----------------------------------------------------------------------

def test_image_files_are_read_as_pillow_reads_them():
    pytest.importorskip("PIL")
    data = np.load(IMAGES / "resize.npz")
    np.testing.assert_array_equal(read_image(IMAGES / "china_crop.jpg"), data["photo"])
    processor = ImageProcessor.from_folder(TINY)
    np.testing.assert_allclose(processor(IMAGES / "gray.png"), data["pixel_values_png"], rtol=0, atol=1e-6)


def test_unreadable_images_are_named(tmp_path):
    pytest.importorskip("PIL")
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(FormatError, match="not an image Pillow can read"):
        read_image(bad)
    with pytest.raises(FileNotFoundError):
        read_image(tmp_path / "missing.jpg")
    huge = tmp_path / "huge.png"  # a PNG header that asks for 40000 x 40000 pixels: a decompression bomb
    chunks = [(b"IHDR", struct.pack(">IIBBBBB", 40000, 40000, 8, 2, 0, 0, 0)), (b"IDAT", zlib.compress(b"")),
              (b"IEND", b"")]
    body = [struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
            for kind, data in chunks]
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(body))
    with pytest.raises(FormatError, match="decompression bomb"):
        read_image(huge)


def test_reading_files_without_pillow_says_what_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "PIL", None)  # import PIL now fails
    with pytest.raises(ImportError, match=r"pip install 'candle-models\[vision\]'"):
        read_image(IMAGES / "gray.png")


def test_candle_classify(capsys):
    """The printed classes are the model's top probabilities for the processor's pixels."""
    pytest.importorskip("PIL")
    from candle_api.cli import main

    jpg = str(IMAGES / "china_crop.jpg")
    logits = run(ViTForImageClassification.from_pretrained(TINY), ImageProcessor.from_folder(TINY)(jpg))[0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    labels = ViTConfig.from_dict(json.loads((TINY / "config.json").read_text())).labels
    assert main(["classify", jpg, str(IMAGES / "gray.png"), "--model", str(TINY), "--top", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in out] == [jpg, str(IMAGES / "gray.png")]
    best = [entry["label"] for entry in out[0]["labels"]]
    assert best == [labels[i] for i in np.argsort(-probs)[:2]]
    assert out[0]["labels"][0]["score"] == pytest.approx(probs.max(), abs=1e-5)
    assert main(["classify", jpg, "--model", str(TINY)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == jpg and len(lines) == 6 and lines[1].strip().endswith(best[0])
    assert main(["classify", jpg, "--model", str(FIXTURES / "tiny_t5")]) == 1
    assert "model_type 't5' is not ViT (supported: vit)" in capsys.readouterr().err
