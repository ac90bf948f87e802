"""Tokenization for keyword search: one function for writes and queries.

English (and other Latin-script) words are lower-cased, stop words dropped and Snowball-stemmed;
CJK runs (Han, Kana, Hangul) become overlapping bigrams (a lone character stays a unigram), so
Chinese needs no dictionary and mixed text works.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import snowballstemmer

_CJK_RANGES = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x2FA1F),  # Extensions B..
)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "did",
        "does",
        "also",
        "just",
    ]
)


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


@lru_cache(maxsize=1)
def _stemmer() -> snowballstemmer.stemmer:
    # Imported on the first word stemmed, not with this module: the package imports the stemmers of all
    # its ~30 languages (~40-90 ms), and a function's init or a request that tokenizes nothing (a listing,
    # an MCP session) need none of them (bench/README.md, "Cold start per HTTP function").
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _cjk_tokens(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _cjk_class() -> str:
    return "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES)


def _compiled_on_first_use(pattern: str) -> Callable[[], re.Pattern[str]]:
    """``pattern`` compiled by the first call (then the same object). Compiling a class of the CJK ranges
    is ~1.5 ms of CPU (Python's ``re`` compiler marks each of its ~40k code points below U+10000 one by
    one), and only non-ASCII text needs one: a process that sees only ASCII text (an English cold start's
    init and requests) never compiles them (bench/README.md, "Cold start per HTTP function")."""
    return lru_cache(maxsize=1)(lambda: re.compile(pattern))


# One pass: a CJK run, or a run of other letters/digits ("ai记忆" -> "ai", "记忆"). Only word
# characters count, as before: CJK punctuation inside the ranges (such as "・") separates runs.
_RUNS = _compiled_on_first_use(f"((?:(?=[{_cjk_class()}])[^\\W_])+)|((?:(?![{_cjk_class()}])[^\\W_])+)")


def tokenize(text: str) -> list[str]:
    """Search tokens of ``text`` in order (duplicates kept, for term frequency)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    tokens: list[str] = []
    append = tokens.append
    # Word runs first; only a run with a non-ASCII character can hold CJK, so only those take ``_RUNS``'s
    # per-character look-ahead (the same runs as ``_RUNS`` over the whole text: no run crosses a non-word
    # character). Recall tokenizes every candidate it has not seen yet: bench/latency.py --stages.
    for word in _TOKEN.findall(text):
        if word.isascii():
            if word not in STOPWORDS:
                append(word if word.isdigit() else _stem(word))
            continue
        for cjk, other in _RUNS().findall(word):
            if cjk:
                tokens.extend(_cjk_tokens(cjk))
            elif other not in STOPWORDS:
                append(other if other.isdigit() else _stem(other))
    return tokens


_CJK_CHARS = _compiled_on_first_use(f"[{_cjk_class()}]")
_NOT_ASCII_LETTERS = re.compile("[^A-Za-z]+")
_NOT_CJK = _compiled_on_first_use(f"[^{_cjk_class()}]+")
_ASCII_OR_CJK = _compiled_on_first_use(f"[\\x00-\\x7f{_cjk_class()}]+")


def script_letters(text: str) -> tuple[int, int]:
    """``text``'s CJK characters (``is_cjk``) and its other letters (ASCII letters and any other alphabetic
    character), counted by C loops (regular expressions over runs, ``map``) rather than character by
    character in Python: recall reads the script of every candidate it has not seen yet
    (bench/latency.py --stages)."""
    ascii_letters = len(_NOT_ASCII_LETTERS.sub("", text))
    if text.isascii():
        return 0, ascii_letters
    other = sum(map(str.isalpha, _ASCII_OR_CJK().sub("", text)))
    return len(_NOT_CJK().sub("", text)), ascii_letters + other


def estimate_tokens(text: str) -> int:
    """A conservative model-token count for embedders whose tokenizer is not at hand: one per CJK
    character (subword tokenizers rarely merge them) and one per three other characters (English runs
    about four characters per token)."""
    cjk = 0 if text.isascii() else len(_CJK_CHARS().findall(text))
    return cjk + -(-(len(text) - cjk) // 3)


def clip_to_tokens(
    text: str, limit: int, count: Callable[[str], int], *, keep: Literal["head", "tail"] = "head"
) -> str:
    """``text`` cut at a character boundary to at most ``limit`` tokens by ``count``, keeping its
    start (``head``) or its end (``tail``). ``count`` runs a few times at most (each cut aims 5% low)."""
    if limit <= 0 or len(text) * 4 + 2 <= limit:  # UTF-8 bytes bound tokens for any subword tokenizer
        return text
    tokens = count(text)
    while tokens > limit and text:
        size = max(1, int(len(text) * limit / tokens * 0.95))
        text = text[:size] if keep == "head" else text[-size:]
        tokens = count(text)
    return text


def text_batches(texts: Iterable[str], *, max_items: int, max_chars: int) -> Iterator[list[str]]:
    """``texts`` in order, in batches of at most ``max_items`` and about ``max_chars`` characters (a text
    longer than that alone is a batch of one): what one embedding call is given."""
    batch: list[str] = []
    size = 0
    for text in texts:
        if batch and (len(batch) >= max_items or size + len(text) > max_chars):
            yield batch
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        yield batch
