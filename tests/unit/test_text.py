"""The keyword tokenizer: one function for writes and queries, English stems, CJK bigrams, mixed text."""

from __future__ import annotations

from engram.domain.text import is_cjk, tokenize


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
