"""The keyword tokenizer: one function for writes and queries, English stems, CJK bigrams, mixed text."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

from engram.domain.text import _RUNS, STOPWORDS, _stem, is_cjk, script_letters, text_batches, tokenize


def test_english_is_lowercased_stemmed_and_stopworded() -> None:
    assert tokenize("The Running dogs were HIKING in the hills") == ["run", "dog", "hike", "hill"]
    assert tokenize("hikes") == tokenize("hiking") == ["hike"]


def test_chinese_becomes_overlapping_bigrams() -> None:
    assert tokenize("我对花生过敏") == ["我对", "对花", "花生", "生过", "过敏"]
    assert tokenize("猫") == ["猫"]


def test_mixed_text_splits_scripts() -> None:
    assert tokenize("我在用Python写AI记忆系统") == ["我在", "在用", "python", "写", "ai", "记忆", "忆系", "系统"]


def test_width_case_and_punctuation_fold() -> None:
    assert tokenize("ＰＹＴＨＯＮ，３．１２！") == ["python", "3", "12"]
    assert tokenize("...!?") == []


def test_japanese_and_korean_are_cjk() -> None:
    assert is_cjk("カ") and is_cjk("한") and not is_cjk("a")
    assert tokenize("ラーメン") == ["ラー", "ーメ", "メン"]


def test_query_and_document_share_tokens() -> None:
    doc = set(tokenize("我对花生过敏，吃了会起疹子"))
    query = set(tokenize("花生过敏怎么办"))
    assert {"花生", "生过", "过敏"} <= doc & query


def test_text_batches_keep_order_and_bound_items_and_characters() -> None:
    # Given texts of various lengths, one longer than a batch may hold
    texts = ["aa", "bbb", "c", "d" * 20, "ee", "f", "g"]
    # When they are batched by at most 3 items and about 6 characters
    batches = list(text_batches(texts, max_items=3, max_chars=6))
    # Then the order is kept, no batch passes either bound but the one long text, alone
    assert batches == [["aa", "bbb", "c"], ["d" * 20], ["ee", "f", "g"]]
    assert list(text_batches([], max_items=3, max_chars=6)) == []


def _one_pass(text: str) -> list[str]:
    """The tokenizer as it was written first (one ``_RUNS`` pass over the whole text): the reference the
    faster word-runs-first form must equal."""
    text = unicodedata.normalize("NFKC", text).casefold()
    tokens: list[str] = []
    for cjk, other in _RUNS().findall(text):
        if cjk:
            tokens.extend([cjk] if len(cjk) == 1 else [cjk[i : i + 2] for i in range(len(cjk) - 1)])
        elif other not in STOPWORDS:
            tokens.append(other if other.isdigit() else _stem(other))
    return tokens


def test_tokens_equal_the_one_pass_reference_on_mixed_scripts() -> None:
    # Given texts mixing ASCII, fullwidth, CJK, kana, Hangul, accents, ligatures, combining marks,
    # superscripts, enclosed and Roman numerals, underscores, zero-width spaces and CJK punctuation
    rng = random.Random(23)
    alphabet = "abcXYZ 019_-'.,!?，。、・　ａｂｃ１２３ﬁ記憶记忆ひらがなカタカナ한국어éüßİΣσς\u0301\u200b\t\nＡ①ⅷ²ǅ"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20000)]
    texts += ["The Running dogs", "我在用Python写AI记忆系统", "ＰＹＴＨＯＮ，３．１２！", "ラーメン", "isn't it"]
    # Then every text's tokens are the reference's
    assert [tokenize(t) for t in texts] == [_one_pass(t) for t in texts]


def test_script_letters_count_as_a_character_by_character_loop() -> None:
    # Given texts of every kind of character, astral CJK and the ranges' edges included
    rng = random.Random(29)
    alphabet = "abcXYZ 019_.,，。・　ａ１ﬁ記憶记忆ひらカタ한국éüßİΣς\u0301\u200bＡ①ⅷ²ǅ\U00020000\U0002fa1f\U0002fa20"
    alphabet += "\u3040\u30ff\u33ff\u3400\u4dbf\u4dc0\uac00\ud7af\ud7b0\uf900\ufaff\U0001f600"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20000)]
    texts += ["", "plain ascii only", "我对芒果过敏", "每天早上一杯 Americano，no sugar"]

    def by_character(text: str) -> tuple[int, int]:
        cjk = latin = 0
        for ch in text:
            if ch.isascii():
                latin += ch.isalpha()
            elif is_cjk(ch):
                cjk += 1
            elif ch.isalpha():
                latin += 1
        return cjk, latin

    # Then the counts (CJK characters, other letters) are the loop's
    assert [script_letters(t) for t in texts] == [by_character(t) for t in texts]


def test_ascii_text_compiles_no_cjk_pattern() -> None:
    # Given a fresh interpreter (a cold start) / When it imports the tokenizer and reads ASCII text only
    probe = (
        "import json\n"
        "from engram.domain import text\n"
        "patterns = (text._RUNS, text._CJK_CHARS, text._NOT_CJK, text._ASCII_OR_CJK)\n"
        "seen = [text.tokenize('The hikers ran 3 miles'), text.estimate_tokens('hello there'),\n"
        "        text.script_letters('hello')]\n"
        "before = [p.cache_info().currsize for p in patterns]\n"
        "seen += [text.tokenize('ai记忆'), text.estimate_tokens('记忆 ok'), text.script_letters('记忆 é')]\n"
        "print(json.dumps([before, [p.cache_info().currsize for p in patterns], seen]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "functions")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    before, after, seen = json.loads(done.stdout)
    # Then none of the CJK ranges' patterns was compiled (~1.5 ms of CPU each); non-ASCII text compiles
    # each once, with the results the patterns give
    assert before == [0, 0, 0, 0] and after == [1, 1, 1, 1]
    assert seen == [["hiker", "ran", "3", "mile"], 4, [0, 5], ["ai", "记忆"], 3, [2, 1]]
