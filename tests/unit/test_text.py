"""The keyword tokenizer: one function for writes and queries, English stems, CJK bigrams, mixed text."""

from __future__ import annotations

from engram.domain.text import is_cjk, text_batches, tokenize


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
