"""Bilingual recall check: Chinese, English and mixed memories, paraphrased queries in either language.

    python bench/bilingual.py [--fusion score|rrf] [--no-vectors]

Each query names the one memory it should find; the script prints hit@1 / hit@3 per query and in total.
The set is our own (no labels leak into the pipeline: the pipeline only sees memory texts and queries).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from bench.common import Pipeline  # noqa: E402

MEMORIES: dict[str, str] = {
    "peanut": "我对花生过敏，吃了会起疹子",
    "spring": "每年春节我都回成都老家陪爸妈",
    "cat": "My cat is called 小满, a ginger tabby",
    "job": "I work as a backend engineer at a logistics startup in Shenzhen",
    "coffee": "早上只喝燕麦拿铁，不加糖",
    "marathon": "Training for the Shanghai marathon in November",
    "mom_bday": "妈妈的生日是 8 月 14 日",
    "python": "正在用 Python 和 FastAPI 写一个记忆系统",
    "vim": "Prefers vim keybindings in every editor",
    "sister": "我姐姐住在多伦多，是一名护士",
    "insomnia": "最近睡不好，经常凌晨三点醒来",
    "budget": "This month's budget for eating out is 800 yuan",
    "allergy_med": "Carries an EpiPen in the backpack at all times",
    "guitar": "学吉他两年了，最喜欢弹民谣",
    "car": "开一辆白色的比亚迪海豚",
    "vegetarian": "Has been vegetarian since 2019, but eats eggs",
    "japan": "明年四月想去京都看樱花",
    "dog_fear": "Is afraid of big dogs after being bitten as a kid",
    "spicy": "不太能吃辣，火锅要点清汤锅",
    "deadline": "The thesis draft is due to the supervisor on March 3rd",
}

QUERIES: list[tuple[str, str]] = [
    ("过年回哪里？", "spring"),
    ("where do I go for Chinese New Year?", "spring"),
    ("what snacks should I avoid", "peanut"),
    ("有什么食物过敏吗", "peanut"),
    ("what's my cat's name", "cat"),
    ("我是做什么工作的", "job"),
    ("how do I take my coffee", "coffee"),
    ("我在准备什么比赛", "marathon"),
    ("when is my mother's birthday", "mom_bday"),
    ("what am I building with FastAPI", "python"),
    ("用什么编辑器快捷键", "vim"),
    ("where does my sister live", "sister"),
    ("why am I so tired lately", "insomnia"),
    ("下馆子的预算是多少", "budget"),
    ("紧急过敏药带了吗", "allergy_med"),
    ("what instrument do I play", "guitar"),
    ("我开什么车", "car"),
    ("do I eat meat", "vegetarian"),
    ("spring trip plans to Japan", "japan"),
    ("which animals scare me", "dog_fear"),
    ("hotpot order for me", "spicy"),
    ("论文什么时候交", "deadline"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fusion", choices=["score", "rrf"], default=None)
    parser.add_argument("--no-vectors", action="store_true", help="keyword only (no embedder)")
    args = parser.parse_args()
    overrides = {"fusion": args.fusion} if args.fusion else {}
    pipe = Pipeline(embed=not args.no_vectors, **overrides)
    ids = pipe.add_memories("bilingual", list(MEMORIES.values()))
    key_of = dict(zip(ids, MEMORIES, strict=True))
    at1 = at3 = 0
    t0 = time.perf_counter()
    print(f"{'query':<40} {'expected':<12} {'top-3':<40} ok")
    for query, expected in QUERIES:
        got = [key_of[m] for m in pipe.recall("bilingual", query, 3)]
        at1 += got[:1] == [expected]
        at3 += expected in got
        print(f"{query:<40} {expected:<12} {', '.join(got):<40} {'yes' if expected in got else 'NO'}")
    n = len(QUERIES)
    ms = (time.perf_counter() - t0) * 1000 / n
    print(f"\nhit@1 {at1}/{n} = {at1 / n:.2f}   hit@3 {at3}/{n} = {at3 / n:.2f}   ({ms:.1f} ms/query)")


if __name__ == "__main__":
    main()
