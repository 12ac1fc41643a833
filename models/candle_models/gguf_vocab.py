"""Tokenizers built from a GGUF's ``tokenizer.ggml.*`` metadata, as llama.cpp
tokenizes with them (llama-vocab.cpp), through the ``tokenizers`` package:

- "gpt2": byte-level BPE, the text first cut by the pre-tokenizer
  ``tokenizer.ggml.pre`` names (PRE_TOKENIZERS: llama.cpp's regexes, applied
  one after the other, unmatched spans kept); Llama 3's vocabularies take a
  piece whole when the vocabulary has it (``ignore_merges``);
- "llama": SentencePiece BPE, the merges recovered from the scores, byte
  fallback, and the dummy space prefix on every piece of text that starts the
  input or follows a special token (unless add_space_prefix is false, as
  for Gemma);
- "bert": WordPiece, the vocabulary written with llama.cpp's convention (a
  word's first piece starts with U+2581, the pieces that continue a word are
  bare), on lowercased text without accents (unless the GGUF says otherwise)
  split at whitespace, punctuation and CJK characters.

A pre-tokenizer or tokenizer model not listed is refused by name: llama.cpp's
test vectors (tests/models/test_tokenizer_vectors.py) check every one that is.
"""

from __future__ import annotations

from collections.abc import Mapping

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

# The regexes of llama.cpp's pre-tokenizers (llm_tokenizer_bpe). Byte-level BPE vocabularies were learned on
# text cut this way; the byte-level step after them maps bytes to the vocabulary's alphabet. Where llama.cpp
# rewrites a tokenizer.json regex for its engine ((?i:...) as character classes), the original is kept: they
# cut alike, and gguf_export names a tokenizer.json's pre-tokenizer by its original regexes.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGIT = r"\p{N}"  # StarCoder-style vocabularies (SmolLM2): every digit on its own, then GPT-2's split
_GPT2_NO_TAIL = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2_NO_TAIL, r"\p{N}+", r"[0-9][0-9][0-9]")
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2_NO_TAIL, r"[0-9][0-9][0-9]")
# DeepSeek's letter ranges and CJK ranges, written as escapes: a file's editor may normalize some of these
# characters (U+1F7D is canonically U+03CE, and a range ending there would be empty).
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM = (r"[\r\n]", r"\s?[" + _DEEPSEEK_LETTERS + "]+",
                 r"\s?[!-/:-~" + "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$", _CJK,
                 r"\p{N}+")
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")

#: tokenizer.ggml.pre -> the regexes llama.cpp cuts text with, grouped as llama.cpp groups the names.
PRE_TOKENIZERS = {
    "default": _DEFAULT,
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais"), (_GPT2,)),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx"), (_LLAMA3,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"), (_QWEN2,)),
    "qwen35": (_QWEN35,),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"),
                    (_DIGIT, _GPT2)),
    "falcon": _FALCON,
    "deepseek-llm": _DEEPSEEK_LLM,
    "deepseek-coder": _DEEPSEEK_CODER,
}
#: Pre-tokenizers whose vocabularies take a piece whole when it is a token, before any merge.
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3"})

# GGUF token types (llama.cpp's llama_token_type).
CONTROL, USER_DEFINED = 3, 4
WORD_START = "\u2581"  # SentencePiece's space, and llama.cpp's mark of a WordPiece token that starts a word


def _byte_level_bpe(metadata: Mapping) -> tokenizers.Tokenizer:
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"GGUF pre-tokenizer {pre!r} is not supported (supported: "
                         f"{', '.join(sorted(PRE_TOKENIZERS))})")
    # Tokens as llama.cpp looks them up: the ones merges make are spelled in the byte alphabet; control and
    # user-defined ones (matched whole in the raw text) are written as plain text; of two equal ones, the
    # later wins. A merge whose parts or result are not tokens can make no token: left out.
    vocab = {tok: i for i, tok in enumerate(metadata["tokenizer.ggml.tokens"])}
    merges = [(left, right) for left, _, right in (m.partition(" ") for m in metadata["tokenizer.ggml.merges"])
              if left in vocab and right in vocab and left + right in vocab]
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=pre in IGNORE_MERGES))
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_TOKENIZERS[pre]]
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                    use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(metadata: Mapping) -> tokenizers.Tokenizer:
    """llama.cpp's "llama" vocabularies (SentencePiece BPE), built as
    transformers' LlamaTokenizer: merges recovered from the scores (a pair
    merges with the score of the piece it makes; ties: longer left pieces
    first, then vocabulary order), byte fallback for what the vocabulary lacks."""
    tokens, scores = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.scores"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for t, score in zip(tokens, scores):
        pairs = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab]
        merges += [(left, right, score) for left, right in sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]]))]
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    unk = metadata.get("tokenizer.ggml.unknown_token_id", 0)
    tok = tokenizers.Tokenizer(models.BPE(vocab, [m[:2] for m in merges], unk_token=tokens[unk], fuse_unk=True,
                                          byte_fallback=True))
    prefix = metadata.get("tokenizer.ggml.add_space_prefix", True)
    # llama.cpp adds the space to every piece of text that starts the input or follows a special token, even
    # one that starts with a space (" Hello" -> "__Hello"); the normalizer sees exactly those pieces.
    spaces = [normalizers.Replace(" ", WORD_START)]
    tok.normalizer = normalizers.Sequence(([normalizers.Prepend(WORD_START)] if prefix else []) + spaces)
    tok.decoder = decoders.Sequence([decoders.Replace(WORD_START, " "), decoders.ByteFallback(), decoders.Fuse()]
                                    + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    return tok


def _wordpiece(metadata: Mapping) -> tokenizers.Tokenizer:
    """llama.cpp's "bert" vocabularies (llm_tokenizer_wpm) as a WordPiece model: its word-start pieces
    ("\u2581the") become WordPiece's bare ones, its bare continuation pieces WordPiece's "##" ones; the
    longest piece first, a word with a part that is no piece is the unknown token."""
    tokens, types = metadata["tokenizer.ggml.tokens"], metadata.get("tokenizer.ggml.token_type") or ()
    vocab = {}
    for i, (t, kind) in enumerate(zip(tokens, types or [1] * len(tokens))):
        name = t if kind == CONTROL else t[1:] if t.startswith(WORD_START) else "##" + t
        vocab.setdefault(name, i)
    unk = tokens[metadata.get("tokenizer.ggml.unknown_token_id", 100)]
    tok = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=1 << 30))
    # tokenizer.ggml.normalizer.*: lowercase by default, accents stripped (after NFD) when lowercased
    lowercase = metadata.get("tokenizer.ggml.normalizer.lowercase", True)
    strip = metadata.get("tokenizer.ggml.normalizer.strip_accents", lowercase)
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=strip,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return tok


_BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe, "bert": _wordpiece}


def tokenizer_from_gguf(metadata: Mapping) -> tokenizers.Tokenizer:
    """A ``tokenizers.Tokenizer`` from a GGUF's tokenizer.ggml.* metadata."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in _BUILDERS:
        raise ValueError(f"GGUF tokenizer model {kind!r} is not supported (supported: {', '.join(_BUILDERS)})")
    tok = _BUILDERS[kind](metadata)
    tokens, types = metadata["tokenizer.ggml.tokens"], metadata.get("tokenizer.ggml.token_type") or ()
    # Control tokens (<|im_start|>...) and user-defined ones are matched whole in the text, never split.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind in zip(tokens, types) if kind == USER_DEFINED])
    tok.post_processor = _special_tokens(metadata, kind)
    return tok


def _special_tokens(metadata: Mapping, kind: str):
    """The post-processor adding what llama.cpp adds with add_special: BOS (a BERT vocabulary's CLS) when
    add_bos_token says so (by default for SentencePiece and WordPiece), and a BERT vocabulary's SEP."""
    tokens = metadata["tokenizer.ggml.tokens"]
    key = "cls" if kind == "bert" else "bos"
    first = metadata.get(f"tokenizer.ggml.{key}_token_id")
    if not metadata.get("tokenizer.ggml.add_bos_token", kind in ("llama", "bert")) or first is None:
        return None
    last = metadata.get("tokenizer.ggml.seperator_token_id") if kind == "bert" else None
    ends = [(tokens[first], first)] + ([(tokens[last], last)] if last is not None else [])
    after = f" {tokens[last]}" if last is not None else ""
    return processors.TemplateProcessing(single=f"{tokens[first]} $A{after}", pair=f"{tokens[first]} $A $B{after}",
                                         special_tokens=list(dict(ends).items()))
