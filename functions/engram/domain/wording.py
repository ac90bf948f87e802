"""Do two texts state the same fact? Decided on the words, not on embeddings alone.

Embedding cosines of same-topic sentences run high (the local e5 model scores "his wife teaches in
Shanghai" and "...moved to a school in Hangzhou" at 0.96), so a cosine threshold alone drops changed
facts as duplicates. Two rules replace it:

- ``same_wording``: equal up to case, width, whitespace, punctuation, contractions and filler words
  ("the", "really", "now", 的, 了 ...), in the same order. The only sameness an explicit write gets.
- ``salient_difference``: the texts differ in numbers (digits, number words, CJK numerals), names or
  places (capitalized words; any changed CJK character, since Han script has no capitals to tell a
  name by), or negation. A near-duplicate by cosine with such a difference is a different fact.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from engram.domain.text import STOPWORDS, is_cjk


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words whose presence or absence does not change what a memory states.
FILLER_WORDS = _words(
    "a an the that is are am be just really very actually basically currently now still quite so indeed "
    "truly also too please 的 了 呢 吧 啊 呀 嘛 啦 哦 喔 很 真"
)
NUMBER_WORDS = _words(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
    "million billion dozen half once twice first second third fourth fifth sixth seventh eighth ninth tenth "
    "零 〇 一 二 两 兩 三 四 五 六 七 八 九 十 百 千 万 萬 亿 億 半"
)
NEGATIONS = _words(
    "not no never none nobody nothing neither nor without nicht kein keine keinen nie nunca jamais pas "
    "不 没 沒 无 無 非 别 別 未 勿 莫"
)
_CONTRACTIONS = (
    (re.compile(r"\b(can)'?t\b|\bcannot\b", re.IGNORECASE), "can not"),
    (re.compile(r"\bwon't\b", re.IGNORECASE), "will not"),
    (re.compile(r"n't\b", re.IGNORECASE), " not"),
    (re.compile(r"'m\b", re.IGNORECASE), " am"),
    (re.compile(r"'re\b", re.IGNORECASE), " are"),
    (re.compile(r"'ve\b", re.IGNORECASE), " have"),
    (re.compile(r"'ll\b", re.IGNORECASE), " will"),
)
_COMMON_START = frozenset({"user", "users"})  # memories are written about "the user"
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?。！？\n]")


@dataclass(frozen=True)
class _Token:
    text: str  # case-folded
    capitalized: bool  # written with a capital letter where a sentence does not start


@lru_cache(maxsize=1024)  # a write compares the same two texts several times
def _tokens(text: str) -> tuple[_Token, ...]:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    out: list[_Token] = []
    last_end = 0
    starts_sentence = True
    for match in _WORD.finditer(text):
        if _SENTENCE_END.search(text, last_end, match.start()):
            starts_sentence = True
        last_end = match.end()
        word = match.group()
        run: list[str] = []
        for ch in word:  # a CJK character is a word of its own; Latin runs stay whole
            if is_cjk(ch):
                if run:
                    out.append(_latin("".join(run), starts_sentence))
                    starts_sentence, run = False, []
                out.append(_Token(ch, False))
                starts_sentence = False
            else:
                run.append(ch)
        if run:
            out.append(_latin("".join(run), starts_sentence))
            starts_sentence = False
    return tuple(out)


def _latin(word: str, starts_sentence: bool) -> _Token:
    folded = word.casefold()
    # A sentence's first word counts as a name only when it is not a common word ("My", "The", "User").
    capitalized = word[0].isupper() and not (starts_sentence and (folded in STOPWORDS or folded in _COMMON_START))
    return _Token(folded, capitalized)


def _content_words(text: str) -> list[str]:
    return [t.text for t in _tokens(text) if t.text not in FILLER_WORDS]


def same_wording(a: str, b: str) -> bool:
    """Equal up to case, whitespace, punctuation, contractions and filler words, in the same order."""
    return _content_words(a) == _content_words(b)


def _numbers(text: str) -> Counter[str]:
    return Counter(t.text for t in _tokens(text) if t.text in NUMBER_WORDS or any(ch.isdigit() for ch in t.text))


def _negations(text: str) -> Counter[str]:
    return Counter(t.text for t in _tokens(text) if t.text in NEGATIONS)


def _is_name(token: _Token) -> bool:
    """A capitalized word, or a CJK character that is not a filler, number or negation."""
    if token.capitalized:
        return True
    return len(token.text) == 1 and is_cjk(token.text) and token.text not in _NOT_NAMES


_NOT_NAMES = FILLER_WORDS | NUMBER_WORDS | NEGATIONS


def _names_differ(a: str, b: str) -> bool:
    """The words that are names in either text, in order: "Alice loves Bob" is not "Bob loves
    Alice", while "Mochi" and "mochi" are the same name."""
    ta, tb = _tokens(a), _tokens(b)
    names = {t.text for t in (*ta, *tb) if _is_name(t)}
    return [t.text for t in ta if t.text in names] != [t.text for t in tb if t.text in names]


def salient_difference(a: str, b: str) -> str | None:
    """Why two texts state different facts whatever their cosine, or None: numbers, names or
    places, or negation differ."""
    if _numbers(a) != _numbers(b):
        return "numbers changed"
    if _negations(a) != _negations(b):
        return "negation changed"
    if _names_differ(a, b):
        return "names or places changed"
    return None


def near_duplicate(a: str, b: str, similarity: float | None, threshold: float) -> bool:
    """Whether ``b`` restates ``a``: the same wording, or a cosine at or above ``threshold`` with no
    difference in numbers, names, places or negation."""
    if same_wording(a, b):
        return True
    return similarity is not None and similarity >= threshold and salient_difference(a, b) is None
