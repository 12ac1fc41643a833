"""Tokenizers of the Llama family through the ``tokenizers`` package: from
a folder's tokenizer.json, or built from a GGUF's ``tokenizer.ggml.*``
metadata as llama.cpp reads it (gguf_vocab); chat templates rendered with jinja2 (as
transformers does); the tokens that end a turn; streaming detokenization.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import tokenizers

from candle_api.errors import ArgumentError, FormatError

from .gguf_vocab import tokenizer_from_gguf


def check_text(text: str, name: str) -> str:
    """``text``, if UTF-8 can encode it; else an ArgumentError naming ``name``. Python decodes bytes
    that are not UTF-8 (in argv, through os.fsdecode or errors="surrogateescape") to lone
    surrogates, which the tokenizers library refuses with a bare TypeError."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    if text.isascii():  # O(1): a str knows whether it is all ASCII
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = (f"the byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF
                else f"a lone surrogate U+{code:04X}")
        raise ArgumentError(f"{name} is not UTF-8: character {exc.start} is {what}") from None
    return text


# ---- chat templates -----------------------------------------------------------------------------

def _jinja_env():
    """The environment transformers renders chat templates in."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        from datetime import datetime

        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    return env


def token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


class Tokenizer:
    """A ``tokenizers.Tokenizer`` with what generation needs besides: the chat
    template, the special tokens it uses and the ids that stop generation."""

    def __init__(self, inner: tokenizers.Tokenizer, chat_template: str | None = None, bos_token: str | None = None,
                 eos_token: str | None = None, eos_token_ids=()):
        self.inner = inner
        self.chat_template = chat_template
        self.bos_token, self.eos_token = bos_token, eos_token
        self._template = _jinja_env().from_string(chat_template) if chat_template else None
        ids = set(eos_token_ids)
        if eos_token is not None and inner.token_to_id(eos_token) is not None:
            ids.add(inner.token_to_id(eos_token))
        end = self._turn_end_token()
        if end is not None:
            ids.add(end)
        #: generation stops at these: the end of sequence and the token that ends a turn in the chat template.
        self.stop_token_ids = frozenset(ids)

    # ---- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping) -> "Tokenizer":
        tokens = metadata["tokenizer.ggml.tokens"]

        def token(key):
            i = metadata.get(f"tokenizer.ggml.{key}")
            return tokens[i] if i is not None and 0 <= i < len(tokens) else None

        ends = [metadata[f"tokenizer.ggml.{k}_token_id"] for k in ("eos", "eot", "eom")
                if f"tokenizer.ggml.{k}_token_id" in metadata]
        return cls(tokenizer_from_gguf(metadata), metadata.get("tokenizer.chat_template"), token("bos_token_id"),
                   token("eos_token_id"), ends)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "Tokenizer":
        """From tokenizer.json, with tokenizer_config.json (chat template,
        special tokens), chat_template.jinja and generation_config.json (the
        end-of-sequence ids) when present."""
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FormatError(path, None, "the model folder has no tokenizer.json")
        try:
            inner = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a plain Exception for malformed files
            raise FormatError(path, None, f"not a valid tokenizer.json: {exc}") from None
        config = read_json_object(folder / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if (folder / "chat_template.jinja").exists():
            template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        eos = read_json_object(folder / "generation_config.json").get("eos_token_id")
        if eos is None:
            eos = read_json_object(folder / "config.json").get("eos_token_id")
        eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
        return cls(inner, template, token_text(config.get("bos_token")), token_text(config.get("eos_token")),
                   eos_ids)

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, revision: str | None = None) -> "Tokenizer":
        """From a GGUF file, a model folder or a Hugging Face repo id (offline from the cache)."""
        from .gguf_models import find_gguf, load_gguf
        from .hub import model_folder, resolve

        path = resolve(repo_or_path, revision=revision)
        gguf = find_gguf(path)
        if gguf is not None:
            return cls.from_gguf_metadata(load_gguf(gguf).metadata)
        return cls.from_folder(model_folder(path))

    # ---- text <-> ids ------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.inner.encode(check_text(text, "text"), add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def stream(self, skip_special_tokens: bool = True) -> "TokenStream":
        return TokenStream(self, skip_special_tokens)

    # ---- chat --------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The conversation as the model's chat template writes it."""
        if self._template is None:
            raise ValueError("this tokenizer has no chat template (generate from raw text instead)")
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        return self.apply_chat_template(messages + [{"role": "user", "content": user}])

    def encode_chat(self, user: str, system: str | None = None) -> list[int]:
        """The ids of a one-message conversation, ready for the assistant's answer (the template
        writes its own special tokens, so none are added)."""
        return self.encode(self.chat_prompt(user, system), add_special_tokens=False)

    def _turn_end_token(self) -> int | None:
        """The special token the chat template writes after an assistant's message
        (<|im_end|>, <|eot_id|>...): found by rendering a conversation."""
        import jinja2

        if self._template is None:
            return None
        marker = "\u2063candle\u2063"
        try:
            text = self.apply_chat_template([{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": marker}], add_generation_prompt=False)
        except jinja2.TemplateError:
            return None
        after = text.rpartition(marker)[2]
        ids = self.encode(after, add_special_tokens=False) if marker in text else []
        special = self.inner.get_added_tokens_decoder()
        return ids[0] if ids and ids[0] in special and special[ids[0]].special else None


def read_json_object(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(path, None, f"not valid JSON: {exc}") from None
    return value if isinstance(value, dict) else {}


class TokenStream:
    """Text of generated tokens as they come (candle's TokenOutputStream):
    a byte-level token may hold part of a UTF-8 character, and SentencePiece
    decoders treat a leading space differently at the start of a text, so each
    new piece is the difference between decoding the recent tokens with and
    without the new ones, emitted once it ends on a whole character."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self.tokenizer, self.skip = tokenizer, skip_special_tokens
        self.tokens: list[int] = []
        self._prev = self._cur = 0  # tokens[_prev:_cur] were emitted last; tokens[_cur:] are pending

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def push(self, token_id: int) -> str:
        """Adds a token; returns the text it completes ("" while a character is incomplete)."""
        self.tokens.append(int(token_id))
        before = self._decode(self.tokens[self._prev:self._cur])
        text = self._decode(self.tokens[self._prev:])
        if len(text) > len(before) and not text.endswith("\ufffd"):
            self._prev, self._cur = self._cur, len(self.tokens)
            return text[len(before):]
        return ""

    def flush(self) -> str:
        """What is still pending at the end (an incomplete character shows as U+FFFD)."""
        before = self._decode(self.tokens[self._prev:self._cur])
        text = self._decode(self.tokens[self._prev:])
        self._prev = self._cur = len(self.tokens)
        return text[len(before):] if len(text) > len(before) else ""
