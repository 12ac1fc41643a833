"""``candle serve``: load the models, refuse an unsafe binding, and run the
app under uvicorn until SIGTERM or Ctrl-C (arguments: see cli.py, which
also reports the errors raised here)."""

from __future__ import annotations

import faulthandler
import ipaddress
import os
import signal
import socket
import sys
from pathlib import Path

from candle_api.errors import ArgumentError

#: The environment variable that may hold the API key (so that it is not in the process list).
API_KEY_ENV = "CANDLE_API_KEY"
LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def model_id(spec, name: str | None, task: str) -> str:
    """The name /v1/models lists and requests send: ``name`` when given, else the default model's name,
    a file's or folder's name, or a repo id as given."""
    from ..hub import default_model_name

    if name is not None:
        return name
    if spec is None:
        return default_model_name(task)
    path = Path(spec)
    return path.stem if path.suffix == ".gguf" else (path.name if path.exists() else str(spec))


def main(args) -> int:
    try:
        faulthandler.enable()  # a fault in native code leaves the Python stacks of every thread in the log
    except (AttributeError, ValueError, OSError):  # stderr is no file (captured, closed): no stacks, still serve
        pass
    for name in ("max_concurrent", "max_queue", "max_body_bytes"):
        if getattr(args, name) < (0 if name == "max_queue" else 1):
            raise ArgumentError(f"--{name.replace('_', '-')} must be at least {0 if name == 'max_queue' else 1}, "
                                f"got {getattr(args, name)}")
    if args.grace_period < 0:
        raise ArgumentError(f"--grace-period must be >= 0, got {args.grace_period}")
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    if not is_loopback(args.host) and api_key is None and not args.insecure:
        raise ArgumentError(f"refusing to listen on {args.host} without an API key: anyone who reaches it could use "
                            f"it; pass --api-key KEY (or set {API_KEY_ENV}), or --insecure to allow it")
    try:
        import uvicorn

        from .app import GracefulServer, Served, create_app
    except ImportError as exc:
        raise ArgumentError(f"candle serve needs its web dependencies ({exc.name} is missing): "
                            f"pip install './models[serve]'") from None
    from .engine import Engine

    chat, tokenizer, embedder = _load(args)
    if chat is None and embedder is None:
        raise ArgumentError("--model none and --embedding-model none leave nothing to serve")
    context = chat.config.context_length if chat is not None else 0
    if args.context_length is not None:
        if not 1 <= args.context_length <= max(context, 1):
            raise ArgumentError(f"--context-length must be in [1, {context}] (the model's), got {args.context_length}")
        context = args.context_length
    engine = Engine(chat, tokenizer, embedder, max_batch=args.max_concurrent, max_queue=args.max_queue)
    served = Served(engine, model_id(args.model, args.model_name, "generate") if chat is not None else None,
                    model_id(args.embedding_model, args.embedding_model_name, "embed") if embedder is not None else None,
                    context, api_key, args.max_body_bytes)
    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def ready():
        print(f"candle serve: listening on {url} (chat: {served.chat_model}, embeddings: {served.embedding_model})",
              file=sys.stderr, flush=True)

    server = GracefulServer(uvicorn.Config(create_app(served, ready), log_level="warning", access_log=False,
                                    timeout_graceful_shutdown=args.grace_period))
    server.run(sockets=[sock])
    return 130 if server.signal == signal.SIGINT else 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so that --port 0 gets a free port and the address it says is real."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(2048)
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock



def _load(args):
    """The chat model, its tokenizer and the embedder; None for a kind turned off with 'none'."""
    from .. import causal_lm
    from ..hub import default_model
    from ..progress import Progress
    from ..sentence import SentenceEmbedder
    from ..tokenizer import Tokenizer

    chat = embedder = tokenizer = None
    if args.model != "none":
        chat_path = args.model if args.model is not None else default_model("generate")
        family = causal_lm.family(chat_path)  # every causal LM family decodes in a batch cache
        if family in causal_lm.TEXT2TEXT.values():
            raise ArgumentError(f"{chat_path} is a {family.__name__}, an encoder-decoder: candle serve batches "
                                "causal LMs only (run it with candle generate)")
        with Progress(0, "loading the chat model") as progress:
            tokenizer = Tokenizer.from_pretrained(chat_path)
            chat = family.from_pretrained(chat_path, dtype=args.dtype, device=args.device, progress=progress)
        if tokenizer.chat_template is None:  # a base model (GPT-2, Falcon): completions only
            print(f"candle serve: note: {chat_path} has no chat template: /v1/chat/completions answers 400, "
                  "/v1/completions serves it", file=sys.stderr, flush=True)
    if args.embedding_model != "none":
        embed_path = args.embedding_model if args.embedding_model is not None else default_model("embed")
        embedder = SentenceEmbedder.from_pretrained(embed_path, device=args.device, progress=True)
    return chat, tokenizer, embedder
