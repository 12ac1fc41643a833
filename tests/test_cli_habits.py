"""How every ``candle`` subcommand behaves as a command line (issue 21): its version, one error prefix,
one line for refused arguments and Ctrl-C, a quiet end on a closed pipe, progress bars only where they
help; and ``candle_api.save`` of one tensor, or to a format that does not write."""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.cli import main
from candle_models import progress

CANDLE = Path(sys.executable).with_name("candle")  # pip installs console scripts beside python
DISTRIBUTIONS = {"candle-api": "candle_api", "candle-models": "candle_models", "candle-formats": "candle_formats",
                 "candle-backend-cpu": "candle_backend_cpu", "candle-backend-ref": "candle_backend_ref"}


def run(capsys, *argv) -> tuple[int, str, str]:
    """``candle ARGV`` in this process: (status, stdout, stderr), argparse's exits included."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_version():
    done = subprocess.run([str(CANDLE), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"candle-api {c.__version__}\n", "")


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_has_its_version(dist):
    assert importlib.import_module(DISTRIBUTIONS[dist]).__version__ == metadata.version(dist)


@pytest.mark.parametrize("argv, status, prefix, message", [
    (["bogus"], 2, "candle", "invalid choice: 'bogus'"),
    ([], 2, "candle", "the following arguments are required: COMMAND"),
    (["info", "extra"], 2, "candle info", "unrecognized arguments: extra"),
    (["embed"], 2, "candle embed", "the following arguments are required: texts"),
    (["embed", "--bogus", "x"], 2, "candle embed", "unrecognized arguments: --bogus"),
    (["generate", "--max-tokens", "many", "hi"], 2, "candle generate", "invalid int value: 'many'"),
    (["quantize", "a.gguf", "b.gguf"], 2, "candle quantize", "the following arguments are required: --type"),
    (["serve", "--port", "x"], 2, "candle serve", "invalid int value: 'x'"),
    (["embed", "--model", "/nowhere/model", "hi"], 1, "candle embed", "'/nowhere/model' is not a file"),
    (["generate", "--model", "/nowhere/model", "hi"], 1, "candle generate", "'/nowhere/model' is not a file"),
    (["quantize", "/nowhere/model", "out.gguf", "--type", "q8_0"], 1, "candle quantize", "is not a file"),
    (["transcribe"], 2, "candle transcribe", "the following arguments are required: audio"),
    (["transcribe", "--beam-size", "wide", "a.wav"], 2, "candle transcribe", "invalid int value: 'wide'"),
    (["transcribe", "--model", "/nowhere/model", "a.wav"], 1, "candle transcribe", "'/nowhere/model' is not a file"),
    (["classify", "x.png"], 2, "candle classify", "the following arguments are required: --model"),
    (["classify", "--model", "/nowhere/model", "x.png"], 1, "candle classify", "'/nowhere/model' is not a file"),
])
def test_every_error_is_one_line_with_one_prefix(capsys, argv, status, prefix, message):
    code, out, err = run(capsys, *argv)
    assert (code, out) == (status, "")
    assert err.startswith(f"{prefix}: error: ") and message in err and err.count("\n") == 1, err
    if status == 2:  # argparse's refusals say where the usage is instead of printing it
        assert err.endswith(f" (see {prefix} --help)\n")


def test_serve_errors_have_the_same_prefix():
    """In a process of its own: the server wants a real stderr."""
    done = subprocess.run([str(CANDLE), "serve", "--host", "0.0.0.0", "--model", "none", "--embedding-model",
                           "none"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("candle serve: error: refusing to listen on 0.0.0.0 without an API key")
    assert done.stderr.count("\n") == 1


def test_info_failures_and_ctrl_c_are_one_line(capsys, monkeypatch):
    import candle_api.info

    def interrupt(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(candle_api.info, "describe", interrupt)
    assert run(capsys, "info") == (130, "", "candle info: error: interrupted\n")
    monkeypatch.setattr(candle_api.info, "describe", lambda **kwargs: 1 / 0)
    assert run(capsys, "info") == (1, "", "candle info: error: ZeroDivisionError: division by zero\n")


def test_a_command_whose_distribution_is_missing_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setattr(metadata, "entry_points", lambda group: [])  # as without candle-models
    code, out, err = run(capsys, "embed", "hello", "--json")
    assert (code, out) == (1, "")
    assert err == "candle embed: error: this command comes with candle-models: pip install ./models " \
                  "(in a checkout of candle-api)\n"


@pytest.mark.parametrize("argv", [["info"], ["--help"]])
def test_a_closed_pipe_ends_quietly(argv):
    """`candle info | head`: the reader is gone before the command writes (its end of the pipe is closed
    here before the command starts), which used to end in a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([str(CANDLE), *argv], stdout=write, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141 if argv == ["info"] else 0, b"")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """time.perf_counter, moved by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    return clock


def test_no_progress_bar_for_quick_work(clock):
    stream = Terminal()
    with progress.Progress(3, "loading", stream) as bar:
        for _ in range(3):
            clock.now += progress.DELAY / 4
            bar.update()
    assert stream.getvalue() == ""


def test_a_progress_bar_once_the_work_has_lasted_a_moment(clock):
    assert 0.1 < progress.DELAY <= 1
    stream = Terminal()
    with progress.Progress(3, "loading", stream) as bar:
        clock.now += 0.1
        bar.update()
        assert stream.getvalue() == ""
        clock.now += 1.0
        bar.update()
        bar.update()  # right after, but the last: a bar once drawn ends full
    assert stream.getvalue() == ("\rloading [####################..........] 2/3 1.1s"
                                 "\rloading [##############################] 3/3 1.1s\n")


def test_no_progress_bar_off_a_terminal(clock):
    stream = io.StringIO()
    with progress.Progress(2, "loading", stream) as bar:
        clock.now += 10
        bar.update(2)
    assert stream.getvalue() == ""


def test_save_one_tensor_as_npy(tmp_path):
    c.save(c.Tensor([[1.0, 2.0], [3.0, 4.0]]), tmp_path / "x.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), [[1, 2], [3, 4]])
    assert list(c.load(tmp_path / "x.npy")) == ["arr_0"]


@pytest.mark.parametrize("name, format", [("x.onnx", None), ("x.ggml", None), ("x.npy", "onnx")])
def test_save_to_a_format_that_does_not_write_names_those_that_do(tmp_path, name, format):
    with pytest.raises(c.FormatError, match=r"formats that write: .*safetensors \(\.safetensors") as error:
        c.save({"w": c.zeros(2)}, tmp_path / name, format=format)
    assert "npy (.npy)" in str(error.value) and "pytorch (.pt, .pth, .bin" in str(error.value)
    assert not list(tmp_path.iterdir())


def test_save_a_state_dict_as_pt(tmp_path):
    c.save({"fc.weight": c.ones((2, 3)), "fc.bias": c.zeros(2)}, tmp_path / "x.pt")
    back = c.load(tmp_path / "x.pt")
    assert back["fc.weight"].values() == [[1.0] * 3] * 2 and back["fc.bias"].values() == [0.0, 0.0]
