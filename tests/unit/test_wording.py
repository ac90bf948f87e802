"""Same wording and salient differences (domain/wording.py): the text rules behind "seen"."""

from __future__ import annotations

import pytest
from engram.domain.wording import near_duplicate, salient_difference, same_wording


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("My cat is called Mochi.", "my cat is called mochi"),
        ("The user prefers dark roast coffee", "The user really prefers dark-roast coffee!"),
        ("I'm vegan", "I am vegan"),
        ("User doesn't eat pork", "The user does not eat pork."),
        ("User likes tea. Berlin is home", "The user likes tea; Berlin is home"),
        ("用户很喜欢喝绿茶", "用户喜欢喝绿茶了。"),
        ("ＡＢＣ　１２３", "abc 123"),
    ],
)
def test_same_wording_ignores_case_width_punctuation_contractions_and_fillers(a: str, b: str) -> None:
    assert same_wording(a, b) and same_wording(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("My cat is called Mochi", "My cat is named Mochi"),
        ("Alice loves Bob", "Bob loves Alice"),
        ("The user lives in Berlin", "The user lived in Berlin"),
        ("用户的老婆叫周婷，在上海一所公立高中教英语。", "用户的老婆周婷换了工作，现在在杭州滨江一所国际学校教英语。"),
    ],
)
def test_other_changes_are_not_the_same_wording(a: str, b: str) -> None:
    assert not same_wording(a, b)


def test_salient_differences_and_what_is_not_one() -> None:
    # Numbers as digits, words and CJK numerals; names and places by capitals or any CJK character;
    # negation in English, German and Chinese
    assert salient_difference("Standup at 9:30", "Standup at 10:30") == "numbers changed"
    assert salient_difference("two cats", "three cats") == "numbers changed"
    assert salient_difference("Er trinkt Kaffee", "Er trinkt nicht Kaffee") == "negation changed"
    assert salient_difference("The user moved to Lisbon", "The user moved to Porto") == "names or places changed"
    assert salient_difference("用户住在北京", "用户住在上海") == "names or places changed"
    assert salient_difference("用户没有车", "用户有车") == "negation changed"
    # A reworded sentence with the same facts, and a name whose case changed, differ in nothing salient
    assert (
        salient_difference("The user drinks green tea every morning", "The user likes green tea each morning") is None
    )
    assert salient_difference("Mochi is the user's cat", "mochi is the user's cat") is None


def test_near_duplicate_needs_the_same_wording_or_a_high_cosine_without_a_salient_difference() -> None:
    a, b = "The user drinks green tea every morning", "The user likes green tea each morning"
    assert near_duplicate(a, "the user drinks green tea every morning!", None, 0.96)
    assert near_duplicate(a, b, 0.97, 0.96)
    assert not near_duplicate(a, b, 0.95, 0.96)
    assert not near_duplicate(a, b, None, 0.96)
    assert not near_duplicate("The user has two cats.", "The user has three cats.", 0.99, 0.96)
