"""Generate ``bench/data/bilingual.json``: an invented Chinese/English personal-memory set.

    python bench/data/make_bilingual.py            # rewrite the JSON (deterministic, seed fixed)
    python bench/data/make_bilingual.py --check    # fail if the committed JSON differs from a fresh run

Everything here is invented for Engram's benchmarks: four people, the facts they told an assistant
(in Chinese, English or both mixed), and questions about those facts. Four personas: two for tuning,
two held out (split by person, as LoCoMo is split by conversation, so no memory is shared).

Each fact kind has memory templates (zh / en / mixed) and question templates per label:

- ``lexical``        the question repeats the memory's key words (names, codes, numbers)
- ``paraphrase``     same language as the memory, no search token shared with it (checked here)
- ``cross_lingual``  the question is in the other language than the memory's main language
- ``multi``          the answer is spread over 2-3 memories (all of them are labelled)
- ``temporal``       asks when something happens, or what holds *now* after a change
- ``no_answer``      asks about something this person never said (questions of kinds they lack)

Some facts changed over time: the older versions are written under the same ``fact_key`` with status
``superseded``; returning one of them for a question about that fact counts as a leak.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "functions")]

from engram.domain.text import is_cjk, tokenize  # noqa: E402

OUT = Path(__file__).with_name("bilingual.json")
SEED = 20261201

# -- fact kinds ------------------------------------------------------------------------------------
# Slots are written {name}; each persona gives every slot a (zh, en) pair. In a "zh" template {x}
# takes the Chinese value, in "en" the English one; {x:en} / {x:zh} force one (mixed templates).
# Memory templates: list of (language, text); "mixed" memories say whether Chinese or English leads.
# Questions: label -> language -> list of templates.

KINDS: dict[str, dict[str, Any]] = {
    "allergy": {
        "key": "health:allergy",
        "mem": [
            ("zh", "我对{allergen}过敏，吃了会起疹子，严重时喉咙发紧"),
            ("en", "I'm allergic to {allergen}: hives, and my throat tightens if it's bad"),
            ("mixed_zh", "我对{allergen}过敏，之前误食过一次直接去了 ER"),
        ],
        "q": {
            "lexical": {"zh": ["我对{allergen}过敏吗"], "en": ["am I allergic to {allergen}"]},
            "paraphrase": {
                "zh": ["有没有哪样食物是我绝对不能碰的", "点外卖的时候要避开什么"],
                "en": ["is there any food that could put me in hospital", "what should a waiter know before I order"],
            },
            "cross_lingual": {
                "zh": ["我有什么食物过敏", "哪种食物会让我起疹子"],
                "en": ["do I have any food allergies", "which food gives me a reaction"],
            },
        },
    },
    "hometown": {
        "key": "person:hometown",
        "mem": [
            ("zh", "我老家在{hometown}，小时候住在外婆家旁边"),
            ("en", "I grew up in {hometown}, right next to my grandmother's place"),
            ("mixed_zh", "老家是{hometown}，每年 Chinese New Year 都回去"),
        ],
        "q": {
            "lexical": {"zh": ["我老家是{hometown}的吗"], "en": ["did I grow up in {hometown}"]},
            "paraphrase": {"zh": ["我是哪里人", "我出生长大的城市"], "en": ["where am I originally from"]},
            "cross_lingual": {
                "zh": ["我是在哪座城市长大的"],
                "en": ["which city is my hometown", "where was I raised"],
            },
        },
    },
    "employer": {
        "key": "work:employer",
        "mem": [
            ("zh", "现在在{company}做{role}"),
            ("en", "I work at {company} as a {role}"),
            ("mixed_zh", "目前在 {company:en} 当 {role:en}，组里一共八个人"),
        ],
        "old": [
            ("zh", "在{old_company}做{role}，通勤要一个小时"),
            ("en", "Working at {old_company} as a {role}, the commute is an hour each way"),
        ],
        "q": {
            "lexical": {"zh": ["我在{company}做什么"], "en": ["what do I do at {company}"]},
            "paraphrase": {"zh": ["我目前在哪上班", "我的东家是谁"], "en": ["who pays my salary these days"]},
            "cross_lingual": {"zh": ["我现在在哪家公司工作"], "en": ["which company do I work for now"]},
            "temporal": {"zh": ["我现在在哪家公司"], "en": ["where am I working at the moment"]},
        },
    },
    "home_city": {
        "key": "home:city",
        "mem": [
            ("zh", "{moved}搬到了{city}，租的房子在{district}"),
            ("en", "Moved to {city} in {moved}; renting a flat in {district}"),
            ("mixed_zh", "{moved}搬来{city}了，住在 {district:en} 附近"),
        ],
        "old": [("zh", "住在{old_city}，离公司很近"), ("en", "Living in {old_city}, close to the office")],
        "q": {
            "lexical": {"zh": ["我住在{district}吗"], "en": ["do I live in {district}"]},
            "paraphrase": {"zh": ["我家在哪儿"], "en": ["what's my current address area"]},
            "cross_lingual": {"zh": ["我现在住在哪个城市"], "en": ["which city do I live in now"]},
            "temporal": {"zh": ["我是什么时候搬家的"], "en": ["when did I move to my current city"]},
        },
    },
    "pet": {
        "key": "pet:main",
        "mem": [
            ("zh", "家里养了一只{pet_kind}，叫{pet_name}，{pet_trait}"),
            ("en", "We have a {pet_kind} called {pet_name}; {pet_trait}"),
            ("mixed_en", "Our {pet_kind:en} {pet_name} is {pet_trait:en}, 特别粘人"),
        ],
        "q": {
            "lexical": {"zh": ["{pet_name}是什么动物"], "en": ["what kind of animal is {pet_name}"]},
            "paraphrase": {"zh": ["我养的小动物叫啥"], "en": ["who's waiting for me at home with four paws"]},
            "cross_lingual": {"zh": ["我的宠物叫什么名字"], "en": ["what is my pet's name"]},
        },
    },
    "partner": {
        "key": "family:partner",
        "mem": [
            ("zh", "我{partner_rel}叫{partner}，是{partner_job}"),
            ("en", "My {partner_rel} is {partner}, a {partner_job}"),
            ("mixed_zh", "{partner:en} 是我{partner_rel}，在做 {partner_job:en}"),
        ],
        "q": {
            "lexical": {"zh": ["{partner}是做什么的"], "en": ["what does {partner} do for a living"]},
            "paraphrase": {"zh": ["另一半的职业"], "en": ["who am I married to and what's their work"]},
            "cross_lingual": {"zh": ["我的伴侣是做什么工作的"], "en": ["what is my spouse's job"]},
        },
    },
    "sibling": {
        "key": "family:sibling",
        "mem": [
            ("zh", "我{sib_rel}{sibling}住在{sib_city}，是一名{sib_job}"),
            ("en", "My {sib_rel} {sibling} lives in {sib_city} and works as a {sib_job}"),
        ],
        "q": {
            "lexical": {"zh": ["{sibling}住在哪"], "en": ["where does {sibling} live"]},
            "paraphrase": {
                "zh": ["跟我同一对父母的那位现在在哪个地方"],
                "en": ["where is the other kid my parents raised"],
            },
            "cross_lingual": {"zh": ["我的兄弟姐妹住在哪里"], "en": ["where does my sibling live"]},
        },
    },
    "mom_bday": {
        "key": "family:mother_birthday",
        "mem": [
            ("zh", "妈妈的生日是{mom_bday}，每年都要订蛋糕"),
            ("en", "Mum's birthday is {mom_bday}; I always order a cake"),
            ("mixed_zh", "老妈生日 {mom_bday:en}，记得提前订 cake"),
        ],
        "q": {
            "lexical": {"zh": ["妈妈生日是哪天"], "en": ["when is mum's birthday"]},
            "paraphrase": {"zh": ["给我母亲庆生是几号"], "en": ["which day should I call my mother with wishes"]},
            "cross_lingual": {"zh": ["我妈妈的生日是几月几号"], "en": ["when is my mother's birthday"]},
            "temporal": {"zh": ["母亲过生日在几月"], "en": ["what month is my mother's birthday in"]},
        },
    },
    "coffee": {
        "key": "pref:coffee",
        "mem": [
            ("zh", "早上只喝{coffee}，不加糖"),
            ("en", "Mornings are {coffee} only, no sugar"),
            ("mixed_zh", "每天早上一杯 {coffee:en}，no sugar"),
        ],
        "q": {
            "lexical": {"zh": ["我喝{coffee}加糖吗"], "en": ["do I take sugar in my {coffee}"]},
            "paraphrase": {
                "zh": ["起床后习惯来一杯什么", "醒来头一件事要喝点啥"],
                "en": ["how do I like my caffeine first thing"],
            },
            "cross_lingual": {"zh": ["我早上喜欢喝什么咖啡"], "en": ["what coffee do I drink in the morning"]},
        },
    },
    "diet": {
        "key": "pref:diet",
        "mem": [
            ("zh", "从{diet_since}开始吃素，但是吃鸡蛋和牛奶"),
            ("en", "Vegetarian since {diet_since}, though eggs and dairy are fine"),
        ],
        "q": {
            "lexical": {"zh": ["我吃素多久了"], "en": ["how long have I been vegetarian"]},
            "paraphrase": {"zh": ["我能吃肉吗", "请我吃饭点牛排合适吗"], "en": ["can I order steak when we go out"]},
            "cross_lingual": {"zh": ["我是素食者吗"], "en": ["am I a vegetarian"]},
        },
    },
    "instrument": {
        "key": "hobby:instrument",
        "mem": [
            ("zh", "学{instrument}{instr_years}了，最喜欢弹{instr_style}"),
            ("en", "Been learning {instrument} for {instr_years}, {instr_style} is my favourite to play"),
            ("mixed_zh", "{instrument:zh}练了{instr_years}，最近在扒 {instr_style:en} 的谱"),
        ],
        "q": {
            "lexical": {"zh": ["我学{instrument}多久了"], "en": ["how long have I played {instrument}"]},
            "paraphrase": {"zh": ["我会摆弄哪样乐器"], "en": ["what music do I make myself"]},
            "cross_lingual": {"zh": ["我会弹什么乐器"], "en": ["what instrument do I play"]},
        },
    },
    "race": {
        "key": "goal:race",
        "mem": [
            ("zh", "在准备{race_month}的{race}，每周跑四次"),
            ("en", "Training for the {race} in {race_month}, running four times a week"),
            ("mixed_en", "Signed up for {race:en} ({race_month:en})，目标 sub-4"),
        ],
        "q": {
            "lexical": {"zh": ["{race}是几月"], "en": ["when is the {race}"]},
            "paraphrase": {"zh": ["我最近在为哪场比赛练体能"], "en": ["what event am I getting fit for"]},
            "cross_lingual": {"zh": ["我在准备哪个马拉松"], "en": ["which marathon am I training for"]},
            "temporal": {"zh": ["我的比赛在什么时候"], "en": ["what month is my big race"]},
        },
    },
    "car": {
        "key": "thing:car",
        "mem": [
            ("zh", "开一辆{car_color}的{car}，车牌{plate}"),
            ("en", "I drive a {car_color} {car}, plate {plate}"),
        ],
        "old": [("zh", "开的是一辆二手的{old_car}"), ("en", "Driving a second-hand {old_car}")],
        "q": {
            "lexical": {"zh": ["车牌{plate}是哪辆车"], "en": ["which car has plate {plate}"]},
            "paraphrase": {"zh": ["我平时开哪款"], "en": ["what am I behind the wheel of these days"]},
            "cross_lingual": {"zh": ["我开的是什么车"], "en": ["what car do I drive"]},
            "temporal": {"zh": ["我现在开什么车"], "en": ["what do I drive now"]},
        },
    },
    "phone": {
        "key": "thing:phone",
        "mem": [("zh", "手机换成了{phone}"), ("en", "Switched my phone to a {phone}")],
        "old": [("zh", "用的手机是{old_phone}"), ("en", "Using {old_phone} as my phone")],
        "q": {
            "lexical": {"zh": ["我是不是在用{phone}"], "en": ["am I using a {phone}"]},
            "paraphrase": {"zh": ["我兜里揣的是哪个牌子"], "en": ["which handset do I carry"]},
            "cross_lingual": {"zh": ["我现在用什么手机"], "en": ["what phone do I have now"]},
            "temporal": {"zh": ["我现在的手机是哪款"], "en": ["what's my current phone"]},
        },
    },
    "language": {
        "key": "learning:language",
        "mem": [
            ("zh", "在学{lang_learning}，每天用多邻国打卡二十分钟"),
            ("en", "Studying {lang_learning} with a tutor on Tuesdays and Thursdays"),
            ("mixed_zh", "在学 {lang_learning:en}，目标是明年考过 {lang_exam}"),
        ],
        "q": {
            "lexical": {"zh": ["我在学{lang_learning}吗"], "en": ["am I studying {lang_learning}"]},
            "paraphrase": {"zh": ["我最近在攻哪门外语"], "en": ["which tongue am I trying to pick up"]},
            "cross_lingual": {"zh": ["我正在学习什么语言"], "en": ["what language am I learning"]},
        },
    },
    "sleep": {
        "key": "health:sleep",
        "mem": [
            ("zh", "最近睡不好，经常凌晨{wake_hour}点醒来就睡不着了"),
            ("en", "Sleeping badly lately, I keep waking at {wake_hour} a.m. and can't drop off again"),
        ],
        "q": {
            "lexical": {"zh": ["我最近睡得好吗"], "en": ["have I been sleeping badly"]},
            "paraphrase": {"zh": ["为什么我白天总是犯困"], "en": ["why am I so tired all day"]},
            "cross_lingual": {"zh": ["我有失眠的问题吗"], "en": ["do I have trouble with insomnia"]},
        },
    },
    "fear": {
        "key": "person:fear",
        "mem": [
            ("zh", "很怕{fear}，{fear_why}"),
            ("en", "Really scared of {fear}; {fear_why}"),
        ],
        "q": {
            "lexical": {"zh": ["我怕{fear}吗"], "en": ["am I scared of {fear}"]},
            "paraphrase": {"zh": ["什么东西会让我紧张发抖"], "en": ["what makes me panic"]},
            "cross_lingual": {"zh": ["我害怕什么"], "en": ["what am I afraid of"]},
        },
    },
    "book": {
        "key": "pref:author",
        "mem": [
            ("zh", "最喜欢的作家是{author}，{book}看了三遍"),
            ("en", "Favourite author is {author}; I've read {book} three times"),
            ("mixed_en", "{author:en} is my favourite writer, 《{book:zh}》 reread three times"),
        ],
        "q": {
            "lexical": {"zh": ["{book}是谁写的"], "en": ["who wrote {book}"]},
            "paraphrase": {"zh": ["我反复读的那本小说"], "en": ["which novel do I keep going back to"]},
            "cross_lingual": {"zh": ["我最喜欢哪位作家"], "en": ["who is my favorite writer"]},
        },
    },
    "dislike_food": {
        "key": "pref:dislike",
        "mem": [
            ("zh", "不吃{dislike}，一点都不能放"),
            ("en", "Can't stand {dislike}, not even a little"),
        ],
        "q": {
            "lexical": {"zh": ["我吃{dislike}吗"], "en": ["do I eat {dislike}"]},
            "paraphrase": {"zh": ["做菜时哪样配料千万别加"], "en": ["which ingredient should a cook leave out for me"]},
            "cross_lingual": {"zh": ["我讨厌吃什么"], "en": ["what food do I hate"]},
        },
    },
    "door_code": {
        "key": "home:door_code",
        "mem": [
            ("zh", "小区单元门密码是{door_code}"),
            ("en", "The building door code is {door_code}"),
            ("mixed_zh", "楼下门禁 code 是 {door_code}"),
        ],
        "q": {
            "lexical": {"zh": ["{door_code}是什么密码"], "en": ["what is {door_code} the code for"]},
            "paraphrase": {"zh": ["进楼要按几位数"], "en": ["how do I get into my building"]},
            "cross_lingual": {"zh": ["单元门的密码是多少"], "en": ["what's the entrance code for my building"]},
        },
    },
    "dentist": {
        "key": "appt:dentist",
        "mem": [
            ("zh", "{dentist_date}下午三点约了牙医洗牙，在{clinic}"),
            ("en", "Dentist cleaning booked for {dentist_date} at 3pm, at {clinic}"),
        ],
        "q": {
            "lexical": {"zh": ["{clinic}的预约是几点"], "en": ["what time is my appointment at {clinic}"]},
            "paraphrase": {"zh": ["什么时候去看牙"], "en": ["when are my teeth getting checked"]},
            "cross_lingual": {"zh": ["我的牙医预约是哪天"], "en": ["when is my dentist appointment"]},
            "temporal": {"zh": ["洗牙约在哪天"], "en": ["on what date is my dental cleaning"]},
        },
    },
    "trip": {
        "key": "plan:trip",
        "mem": [
            ("zh", "计划{trip_month}去{trip_place}玩一周"),
            ("en", "Planning a week in {trip_place} in {trip_month}"),
            ("mixed_zh", "{trip_month}想去 {trip_place:en}，机票还没订"),
        ],
        "q": {
            "lexical": {"zh": ["我什么时候去{trip_place}"], "en": ["when am I going to {trip_place}"]},
            "paraphrase": {"zh": ["假期打算出门去哪", "下回出远门的目的地"], "en": ["where's my next holiday"]},
            "cross_lingual": {"zh": ["我下一次旅行去哪里"], "en": ["where am I travelling next"]},
            "temporal": {"zh": ["{trip_month}我有什么安排"], "en": ["what am I doing in {trip_month}"]},
        },
    },
    "rent": {
        "key": "money:rent",
        "mem": [
            ("zh", "房租每月{rent}，押一付三"),
            ("en", "Rent is {rent} a month, three months paid up front"),
        ],
        "q": {
            "lexical": {"zh": ["房租{rent}是月付吗"], "en": ["is the rent {rent} monthly"]},
            "paraphrase": {"zh": ["住的地方一个月要花多少"], "en": ["how much does my flat cost me"]},
            "cross_lingual": {"zh": ["我每个月的房租是多少"], "en": ["how much is my monthly rent"]},
        },
    },
    "medication": {
        "key": "health:medication",
        "mem": [
            ("zh", "每天早饭后吃一片{med}，{med_for}"),
            ("en", "I take one {med} after breakfast every day, {med_for}"),
        ],
        "q": {
            "lexical": {"zh": ["{med}怎么吃"], "en": ["when do I take {med}"]},
            "paraphrase": {"zh": ["我每天要服的药", "日常要服用哪种药片"], "en": ["what pill is part of my routine"]},
            "cross_lingual": {"zh": ["我每天吃什么药"], "en": ["what medicine do I take daily"]},
        },
    },
    "show": {
        "key": "pref:show",
        "mem": [
            ("zh", "最近在追{show}，已经看到第二季"),
            ("en", "Currently watching {show}, halfway through season two"),
            ("mixed_zh", "最近在追 {show:en}，周末一口气刷了五集"),
        ],
        "q": {
            "lexical": {"zh": ["{show}看到第几季了"], "en": ["how far am I in {show}"]},
            "paraphrase": {"zh": ["晚上放松时盯着屏幕看的那部"], "en": ["which series am I bingeing"]},
            "cross_lingual": {"zh": ["我最近在看什么剧"], "en": ["what TV show am I watching"]},
        },
    },
    "project": {
        "key": "work:project",
        "mem": [
            ("zh", "负责的项目代号叫{codename}，{deadline}要上线"),
            ("en", "I lead project {codename}; it has to ship by {deadline}"),
            ("mixed_zh", "手上的 project 叫 {codename}，deadline 是 {deadline:en}"),
        ],
        "q": {
            "lexical": {"zh": ["{codename}什么时候上线"], "en": ["when does {codename} ship"]},
            "paraphrase": {"zh": ["我手头那个活儿最晚哪天交付"], "en": ["when is my work thing due"]},
            "cross_lingual": {"zh": ["我负责的项目截止日期是什么时候"], "en": ["what is my project's deadline"]},
            "temporal": {"zh": ["工作上的截止日期是哪天"], "en": ["by what date must my project launch"]},
        },
    },
    "wedding": {
        "key": "event:wedding",
        "mem": [
            ("zh", "{friend}的婚礼在{wedding_date}，我是伴{best_role}"),
            ("en", "{friend}'s wedding is on {wedding_date}; I'm the {best_role}"),
        ],
        "q": {
            "lexical": {"zh": ["{friend}什么时候结婚"], "en": ["when is {friend} getting married"]},
            "paraphrase": {
                "zh": ["我要去当伴郎伴娘的那场喜事在哪天", "好朋友办喜酒是哪一天"],
                "en": ["which celebration do I stand up at"],
            },
            "cross_lingual": {"zh": ["我朋友的婚礼是哪天"], "en": ["when is my friend's wedding"]},
            "temporal": {"zh": ["{wedding_date}我要干嘛"], "en": ["what's happening on {wedding_date}"]},
        },
    },
    "university": {
        "key": "person:university",
        "mem": [
            ("zh", "{grad_year}年从{uni}毕业，学的是{major}"),
            ("en", "Graduated from {uni} in {grad_year}, majored in {major}"),
        ],
        "q": {
            "lexical": {"zh": ["我在{uni}学什么专业"], "en": ["what did I study at {uni}"]},
            "paraphrase": {"zh": ["我念的是哪所学校", "我在哪儿念的书"], "en": ["where did I get my degree"]},
            "cross_lingual": {"zh": ["我大学读的是什么专业"], "en": ["what was my major at university"]},
            "temporal": {"zh": ["我哪一年毕业的"], "en": ["what year did I graduate"]},
        },
    },
    "gym": {
        "key": "routine:gym",
        "mem": [
            ("zh", "每周{gym_days}去健身房练力量"),
            ("en", "Strength training at the gym every {gym_days}"),
        ],
        "q": {
            "lexical": {"zh": ["我周几去健身房"], "en": ["which days do I go to the gym"]},
            "paraphrase": {"zh": ["我啥时候撸铁"], "en": ["when do I lift weights"]},
            "cross_lingual": {"zh": ["我每周哪几天锻炼"], "en": ["what days do I work out"]},
        },
    },
    "tea": {
        "key": "pref:tea",
        "mem": [("zh", "下午习惯泡一壶{tea}"), ("en", "Afternoons I brew a pot of {tea}")],
        "q": {
            "lexical": {"zh": ["我爱喝{tea}吗"], "en": ["do I like {tea}"]},
            "paraphrase": {"zh": ["午后我会来点什么热饮"], "en": ["what hot drink do I have after lunch"]},
            "cross_lingual": {"zh": ["我喜欢喝什么茶"], "en": ["what tea do I like"]},
        },
    },
    "manager": {
        "key": "work:manager",
        "mem": [
            ("zh", "我的直属领导是{manager}，每周一对一"),
            ("en", "My manager is {manager}; we have a one-on-one every week"),
        ],
        "old": [("zh", "领导换成了{old_manager}"), ("en", "My new boss is {old_manager}")],
        "q": {
            "lexical": {"zh": ["{manager}是我什么人"], "en": ["who is {manager} to me"]},
            "paraphrase": {"zh": ["我向谁汇报"], "en": ["who do I report to"]},
            "cross_lingual": {"zh": ["我的上司是谁"], "en": ["who is my boss"]},
            "temporal": {"zh": ["我现在的领导是谁"], "en": ["who is my manager now"]},
        },
    },
    "lease": {
        "key": "home:lease",
        "mem": [
            ("zh", "租房合同{lease_end}到期，要提前一个月跟房东说"),
            ("en", "The lease ends {lease_end}; I must tell the landlord a month ahead"),
        ],
        "q": {
            "lexical": {"zh": ["租房合同哪天到期"], "en": ["when does the lease end"]},
            "paraphrase": {
                "zh": ["我得在什么时候之前决定续不续住"],
                "en": ["by when must I decide whether to stay in the flat", "until when can I keep renting this place"],
            },
            "cross_lingual": {"zh": ["我的租约什么时候结束"], "en": ["when does my rental contract expire"]},
            "temporal": {"zh": ["房子住到几月"], "en": ["until which month can I stay in my flat"]},
        },
    },
    "anniversary": {
        "key": "family:anniversary",
        "mem": [
            ("zh", "结婚纪念日是{anniv}，今年想去{anniv_place}"),
            ("en", "Our wedding anniversary is {anniv}; thinking of {anniv_place} this year"),
        ],
        "q": {
            "lexical": {
                "zh": ["结婚纪念日去{anniv_place}吗"],
                "en": ["are we going to {anniv_place} for the anniversary"],
            },
            "paraphrase": {"zh": ["我们俩领证的日子"], "en": ["which date did I tie the knot"]},
            "cross_lingual": {"zh": ["我的结婚纪念日是哪天"], "en": ["when is my wedding anniversary"]},
            "temporal": {"zh": ["纪念日在几月"], "en": ["what month is our anniversary"]},
        },
    },
    "shoe": {
        "key": "person:size",
        "mem": [("zh", "鞋码是{shoe}，买跑鞋要大半码"), ("en", "Shoe size {shoe}; running shoes half a size up")],
        "q": {
            "lexical": {"zh": ["{shoe}码是我的鞋码吗"], "en": ["is {shoe} my shoe size"]},
            "paraphrase": {
                "zh": ["给我买运动鞋挑多大"],
                "en": ["what size trainers should someone buy me", "what fits my feet when buying trainers"],
            },
            "cross_lingual": {"zh": ["我穿多大的鞋"], "en": ["what is my shoe size"]},
        },
    },
    "kid": {
        "key": "family:child",
        "mem": [
            ("zh", "女儿{kid}今年{kid_age}岁，在{school}上学"),
            ("en", "My daughter {kid} is {kid_age}, at {school}"),
        ],
        "q": {
            "lexical": {"zh": ["{kid}在哪上学"], "en": ["which school does {kid} go to"]},
            "paraphrase": {"zh": ["我家小朋友几岁了"], "en": ["how old is my little one"]},
            "cross_lingual": {"zh": ["我女儿多大了"], "en": ["how old is my daughter"]},
        },
    },
}

# Multi-memory facts: one question, 2-3 memories hold parts of the answer.
MULTI: dict[str, dict[str, Any]] = {
    "pets": {
        "mem": [
            [("zh", "还养了一只{pet2_kind}叫{pet2}"), ("en", "Also have a {pet2_kind} named {pet2}")],
            [("zh", "阳台上有个鱼缸，养了几条{fish}"), ("en", "There's a tank of {fish} on the balcony")],
        ],
        "with": "pet",
        "q": {
            "zh": ["家里都养了哪些动物", "我有几只宠物"],
            "en": ["what animals do I keep at home", "list all my pets"],
        },
    },
    "allergies": {
        "mem": [
            [("zh", "对{drug}也过敏，看病要提醒医生"), ("en", "Also allergic to {drug}, tell any doctor")],
        ],
        "with": "allergy",
        "q": {"zh": ["我所有的过敏原都有哪些"], "en": ["list everything I'm allergic to"]},
    },
    "trips_done": {
        "mem": [
            [("zh", "{t1_when}去了{t1}，吃得很满意"), ("en", "Went to {t1} in {t1_when}, loved the food")],
            [("zh", "{t2_when}带爸妈去了{t2}"), ("en", "Took my parents to {t2} in {t2_when}")],
            [("zh", "{t3_when}出差去了{t3}"), ("en", "Business trip to {t3} in {t3_when}")],
        ],
        "q": {
            "zh": ["今年我都去过哪些地方", "今年的旅行记录"],
            "en": ["where have I travelled this year", "which places did I visit this year"],
        },
    },
    "weekends": {
        "mem": [
            [("zh", "周末喜欢去{hike}爬山"), ("en", "Weekends I like hiking around {hike}")],
            [("zh", "周末常去{craft}，一弄就是一下午"), ("en", "Spending my weekends on {craft} lately")],
        ],
        "q": {"zh": ["我周末一般都干些什么"], "en": ["what do I usually do on weekends"]},
    },
    "food_needs": {
        "mem": [[("zh", "胃不好，不能吃太辣"), ("en", "Weak stomach, nothing too spicy")]],
        "with": "dislike_food",
        "q": {"zh": ["请我吃饭口味上要注意什么"], "en": ["which flavours should a host avoid when cooking for me"]},
    },
}

# Filler memories (no question points at them): everyday notes that share common words with the facts.
FILLER_ZH = [
    "周{wd}和{friend}去{place_zh}吃了{dish}，{verdict}",
    "今天开会讨论{topic}，拖到很晚才结束",
    "{friend}推荐了一部电影叫{film}，还没看",
    "下班路上买了{buy}",
    "周末把{chore}做完了，累但是很满足",
    "和{friend}约好下周{wd}一起{activity}",
    "看了一篇关于{topic}的文章，挺有启发",
    "今天天气{weather}，{activity}取消了",
    "给{friend}寄了{buy}当礼物",
    "想在家里添一个{furniture}",
    "附近新开了一家{shop}，排队的人很多",
    "晚上做了{dish}，味道一般",
]
FILLER_EN = [
    "Had {dish_en} with {friend} at {place} on {wd_en}; {verdict_en}",
    "Long meeting about {topic_en} today, ran way over",
    "{friend} recommended a film called {film_en}, haven't watched it yet",
    "Picked up {buy_en} on the way home",
    "Finally did {chore_en} this weekend",
    "Planning to {activity_en} with {friend} next {wd_en}",
    "Read an article on {topic_en}, quite interesting",
    "Weather was {weather_en} so {activity_en} got cancelled",
    "Sent {friend} {buy_en} as a gift",
    "Thinking about getting a {furniture_en} for the living room",
    "A new {shop_en} opened near {place}, long queue outside",
    "Cooked {dish_en} tonight, it was only okay",
]
FILLER_MIXED = [
    "今天的 standup 又讲了很久 {topic_en}",
    "和{friend}在 {place_zh} 喝了杯 latte，聊了聊 {topic_en}",
    "周末 binge 了 {film_en}，有点上头",
    "{friend} 说下周 {wd_en} 要一起 {activity_en}",
    "买了个新的 {furniture_en}，放在客厅刚好",
]
POOLS: dict[str, list[str]] = {
    "wd": ["一", "二", "三", "四", "五", "六", "日"],
    "wd_en": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "dish": ["牛肉面", "小笼包", "烤鱼", "酸菜鱼", "煲仔饭", "寿司", "披萨", "麻辣烫", "生煎"],
    "dish_en": ["ramen", "dumplings", "grilled fish", "pizza", "sushi", "pasta", "a curry", "tacos"],
    "verdict": ["下次还来", "有点贵", "一般般", "排队太久了", "服务很好"],
    "verdict_en": ["would go again", "a bit pricey", "nothing special", "the queue was too long"],
    "topic": ["季度预算", "招聘计划", "新版本的设计", "用户反馈", "团队周报", "数据迁移"],
    "topic_en": ["the quarterly budget", "hiring", "the new design", "user feedback", "the data migration", "OKRs"],
    "film": ["《海边的房子》", "《长夜》", "《风起时》", "《白色港口》"],
    "film_en": ["The Quiet Harbour", "Paper Kites", "Northern Lights Diner", "The Long Field"],
    "buy": ["一束花", "一袋橙子", "两本书", "一盒饼干", "新的雨伞"],
    "buy_en": ["some flowers", "a bag of oranges", "two books", "a box of biscuits", "a new umbrella"],
    "chore": ["大扫除", "整理衣柜", "洗车", "给植物换盆"],
    "chore_en": ["the big clean", "sorting the wardrobe", "washing the car", "repotting the plants"],
    "activity": ["打羽毛球", "逛展", "看电影", "骑车", "打桌游"],
    "activity_en": ["play badminton", "see an exhibition", "go to the cinema", "go cycling", "play board games"],
    "weather": ["下大雨", "特别热", "刮大风", "雾霾很重"],
    "weather_en": ["awful", "boiling hot", "really windy", "grey and smoggy"],
    "furniture": ["书架", "落地灯", "沙发", "地毯"],
    "furniture_en": ["bookshelf", "floor lamp", "sofa", "rug"],
    "shop": ["面包店", "奶茶店", "书店", "火锅店"],
    "shop_en": ["bakery", "bubble tea shop", "bookshop", "noodle bar"],
}

# -- personas ---------------------------------------------------------------------------------------
# "langs": weights of the memory language (zh / en / mixed). "friends": names used in fillers.
# "kinds": slot values; a kind missing here gives this persona's no_answer questions.
PERSONAS: list[dict[str, Any]] = [
    {
        "id": "linwei",
        "split": "tuning",
        "langs": {"zh": 0.6, "en": 0.15, "mixed": 0.25},
        "friends": ["小雅", "阿杰", "Mia", "老周"],
        "places": [("湖滨银泰", "Hubin Intime"), ("西溪天街", "Xixi Paradise Walk"), ("武林广场", "Wulin Square")],
        "slots": {
            "allergen": ("芒果", "mango"),
            "hometown": ("绍兴", "Shaoxing"),
            "company": ("网易", "NetEase"),
            "old_company": ("一家广告公司", "an ad agency"),
            "role": ("交互设计师", "interaction designer"),
            "moved": ("2023年3月", "March 2023"),
            "city": ("杭州", "Hangzhou"),
            "district": ("滨江区", "Binjiang"),
            "old_city": ("上海", "Shanghai"),
            "pet_kind": ("猫", "cat"),
            "pet_name": ("年糕", "Niangao"),
            "pet_trait": ("橘色的，特别能吃", "ginger and always hungry"),
            "pet2_kind": ("仓鼠", "hamster"),
            "pet2": ("豆豆", "Doudou"),
            "fish": ("孔雀鱼", "guppies"),
            "sib_rel": ("弟弟", "younger brother"),
            "sibling": ("林舟", "Lin Zhou"),
            "sib_city": ("成都", "Chengdu"),
            "sib_job": ("中学老师", "secondary school teacher"),
            "mom_bday": ("9月21日", "21 September"),
            "coffee": ("燕麦拿铁", "oat latte"),
            "instrument": ("尤克里里", "ukulele"),
            "instr_years": ("两年", "two years"),
            "instr_style": ("民谣", "folk songs"),
            "phone": ("小米14", "Xiaomi 14"),
            "old_phone": ("iPhone 11", "iPhone 11"),
            "lang_learning": ("日语", "Japanese"),
            "lang_exam": ("JLPT N2", "JLPT N2"),
            "wake_hour": ("三", "3"),
            "fear": ("蜘蛛", "spiders"),
            "fear_why": ("看到图片都会起鸡皮疙瘩", "even a photo gives me goosebumps"),
            "author": ("余华", "Yu Hua"),
            "book": ("活着", "To Live"),
            "dislike": ("香菜", "coriander"),
            "door_code": ("4827#", "4827#"),
            "dentist_date": ("6月12日", "12 June"),
            "clinic": ("拜博口腔", "Bybo Dental"),
            "trip_month": ("明年四月", "next April"),
            "trip_place": ("京都", "Kyoto"),
            "rent": ("4200元", "4,200 yuan"),
            "show": ("漫长的季节", "The Long Season"),
            "codename": ("青鸟", "Bluebird"),
            "deadline": ("11月30日", "30 November"),
            "friend": ("小雅", "Xiaoya"),
            "wedding_date": ("10月2日", "2 October"),
            "best_role": ("娘", "bridesmaid"),
            "tea": ("龙井", "Longjing tea"),
            "manager": ("赵磊", "Zhao Lei"),
            "old_manager": ("何静", "He Jing"),
            "lease_end": ("2025年8月", "August 2025"),
            "shoe": ("37", "37"),
            "t1": ("厦门", "Xiamen"),
            "t1_when": ("三月", "March"),
            "t2": ("黄山", "Huangshan"),
            "t2_when": ("五一", "the May Day holiday"),
            "t3": ("深圳", "Shenzhen"),
            "t3_when": ("七月", "July"),
            "hike": ("九溪", "Jiuxi"),
            "craft": ("做陶艺", "pottery"),
        },
        "kinds": [
            "allergy",
            "hometown",
            "employer",
            "home_city",
            "pet",
            "sibling",
            "mom_bday",
            "coffee",
            "instrument",
            "phone",
            "language",
            "sleep",
            "fear",
            "book",
            "dislike_food",
            "door_code",
            "dentist",
            "trip",
            "rent",
            "show",
            "project",
            "wedding",
            "tea",
            "manager",
            "lease",
            "shoe",
        ],
        "multi": ["pets", "trips_done", "weekends", "food_needs"],
    },
    {
        "id": "daniel",
        "split": "tuning",
        "langs": {"zh": 0.15, "en": 0.6, "mixed": 0.25},
        "friends": ["Tom", "王磊", "Sophie", "Kemi"],
        "places": [("静安寺", "Jing'an Temple"), ("外滩", "the Bund"), ("新天地", "Xintiandi")],
        "slots": {
            "allergen": ("青霉素", "penicillin"),
            "hometown": ("拉各斯", "Lagos"),
            "company": ("字节跳动", "ByteDance"),
            "old_company": ("一家咨询公司", "a consultancy"),
            "role": ("后端工程师", "backend engineer"),
            "moved": ("2022年9月", "September 2022"),
            "city": ("上海", "Shanghai"),
            "district": ("静安区", "Jing'an"),
            "old_city": ("伦敦", "London"),
            "partner_rel": ("妻子", "wife"),
            "partner": ("Grace", "Grace"),
            "partner_job": ("儿科医生", "paediatrician"),
            "sib_rel": ("姐姐", "older sister"),
            "sibling": ("Ada", "Ada"),
            "sib_city": ("多伦多", "Toronto"),
            "sib_job": ("护士", "nurse"),
            "mom_bday": ("3月8日", "8 March"),
            "coffee": ("双份浓缩", "double espresso"),
            "race_month": ("11月", "November"),
            "race": ("上海马拉松", "Shanghai Marathon"),
            "car": ("特斯拉Model 3", "Tesla Model 3"),
            "car_color": ("白色", "white"),
            "plate": ("沪A·7K392", "沪A·7K392"),
            "old_car": ("大众高尔夫", "VW Golf"),
            "lang_learning": ("中文", "Mandarin"),
            "lang_exam": ("HSK 5", "HSK 5"),
            "fear": ("高处", "heights"),
            "fear_why": ("在玻璃栈道上腿都软了", "my legs went to jelly on a glass bridge"),
            "author": ("奇玛曼达·阿迪契", "Chimamanda Adichie"),
            "book": ("半轮黄日", "Half of a Yellow Sun"),
            "med": ("氯沙坦", "losartan"),
            "med_for": ("控制血压", "for blood pressure"),
            "dentist_date": ("7月3日", "3 July"),
            "clinic": ("百佳牙科", "Bestcare Dental"),
            "trip_month": ("十二月", "December"),
            "trip_place": ("清迈", "Chiang Mai"),
            "codename": ("ORCA-7", "ORCA-7"),
            "deadline": ("1月15日", "15 January"),
            "university": ("", ""),
            "uni": ("爱丁堡大学", "Edinburgh University"),
            "grad_year": ("2014", "2014"),
            "major": ("计算机科学", "computer science"),
            "gym_days": ("二、四、六", "Tuesday, Thursday and Saturday"),
            "manager": ("Priyanka", "Priyanka"),
            "old_manager": ("刘洋", "Liu Yang"),
            "anniv": ("6月18日", "18 June"),
            "anniv_place": ("莫干山", "Moganshan"),
            "shoe": ("46", "46"),
            "drug": ("磺胺类药物", "sulfa drugs"),
            "t1": ("成都", "Chengdu"),
            "t1_when": ("二月", "February"),
            "t2": ("西安", "Xi'an"),
            "t2_when": ("国庆", "Golden Week"),
            "t3": ("新加坡", "Singapore"),
            "t3_when": ("八月", "August"),
            "hike": ("佘山", "Sheshan"),
            "craft": ("手冲咖啡", "pour-over coffee"),
            "instrument": ("萨克斯", "saxophone"),
            "instr_years": ("五年", "five years"),
            "instr_style": ("爵士", "jazz"),
        },
        "kinds": [
            "allergy",
            "hometown",
            "employer",
            "home_city",
            "partner",
            "sibling",
            "mom_bday",
            "coffee",
            "race",
            "car",
            "language",
            "fear",
            "book",
            "medication",
            "dentist",
            "trip",
            "project",
            "university",
            "gym",
            "manager",
            "anniversary",
            "shoe",
            "instrument",
        ],
        "multi": ["allergies", "trips_done", "weekends"],
    },
    {
        "id": "chenhao",
        "split": "held-out",
        "langs": {"zh": 0.4, "en": 0.25, "mixed": 0.35},
        "friends": ["Lukas", "小林", "Anna", "师兄"],
        "places": [
            ("玛利亚广场", "Marienplatz"),
            ("维克图阿连市场", "Viktualienmarkt"),
            ("英国花园", "the Englischer Garten"),
        ],
        "slots": {
            "allergen": ("虾", "shrimp"),
            "hometown": ("长沙", "Changsha"),
            "company": ("慕尼黑工业大学", "TU Munich"),
            "old_company": ("华为", "Huawei"),
            "role": ("博士生", "PhD student"),
            "moved": ("2021年10月", "October 2021"),
            "city": ("慕尼黑", "Munich"),
            "district": ("Schwabing", "Schwabing"),
            "old_city": ("深圳", "Shenzhen"),
            "pet_kind": ("兔子", "rabbit"),
            "pet_name": ("Mochi", "Mochi"),
            "pet_trait": ("白色的，爱啃电线", "white and chews every cable"),
            "pet2_kind": ("乌龟", "tortoise"),
            "pet2": ("慢慢", "Manman"),
            "fish": ("斗鱼", "bettas"),
            "partner_rel": ("女朋友", "girlfriend"),
            "partner": ("Lena", "Lena"),
            "partner_job": ("建筑师", "architect"),
            "mom_bday": ("12月2日", "2 December"),
            "coffee": ("美式", "Americano"),
            "diet_since": ("2020年", "2020"),
            "instrument": ("吉他", "guitar"),
            "instr_years": ("八年", "eight years"),
            "instr_style": ("指弹", "fingerstyle"),
            "race_month": ("十月", "October"),
            "race": ("慕尼黑马拉松", "Munich Marathon"),
            "phone": ("Pixel 8", "Pixel 8"),
            "old_phone": ("华为P30", "Huawei P30"),
            "lang_learning": ("德语", "German"),
            "lang_exam": ("TestDaF", "TestDaF"),
            "wake_hour": ("四", "4"),
            "dislike": ("芹菜", "celery"),
            "door_code": ("2291", "2291"),
            "dentist_date": ("9月9日", "9 September"),
            "clinic": ("Zahnarzt Dr. Huber", "Zahnarzt Dr. Huber"),
            "trip_month": ("圣诞假期", "the Christmas break"),
            "trip_place": ("冰岛", "Iceland"),
            "rent": ("980欧", "980 euros"),
            "show": ("黑暗", "Dark"),
            "codename": ("NeuroSLAM", "NeuroSLAM"),
            "deadline": ("3月1日", "1 March"),
            "friend": ("Lukas", "Lukas"),
            "wedding_date": ("8月16日", "16 August"),
            "best_role": ("郎", "best man"),
            "uni": ("浙江大学", "Zhejiang University"),
            "grad_year": ("2019", "2019"),
            "major": ("自动化", "automation engineering"),
            "manager": ("Prof. Becker", "Prof. Becker"),
            "old_manager": ("Dr. Weiss", "Dr. Weiss"),
            "lease_end": ("2026年3月", "March 2026"),
            "t1": ("布拉格", "Prague"),
            "t1_when": ("四月", "April"),
            "t2": ("维也纳", "Vienna"),
            "t2_when": ("六月", "June"),
            "t3": ("苏黎世", "Zurich"),
            "t3_when": ("九月", "September"),
            "hike": ("楚格峰", "the Zugspitze"),
            "craft": ("拍胶片", "film photography"),
        },
        "kinds": [
            "allergy",
            "hometown",
            "employer",
            "home_city",
            "pet",
            "partner",
            "mom_bday",
            "coffee",
            "diet",
            "instrument",
            "race",
            "phone",
            "language",
            "sleep",
            "dislike_food",
            "door_code",
            "dentist",
            "trip",
            "rent",
            "show",
            "project",
            "wedding",
            "university",
            "manager",
            "lease",
        ],
        "multi": ["pets", "trips_done", "weekends", "food_needs"],
    },
    {
        "id": "priya",
        "split": "held-out",
        "langs": {"zh": 0.25, "en": 0.5, "mixed": 0.25},
        "friends": ["Meera", "张敏", "Hannah", "Raj"],
        "places": [("荷兰村", "Holland Village"), ("武吉士", "Bugis"), ("牛车水", "Chinatown")],
        "slots": {
            "allergen": ("坚果", "tree nuts"),
            "hometown": ("金奈", "Chennai"),
            "company": ("新加坡中央医院", "Singapore General Hospital"),
            "old_company": ("陈笃生医院", "Tan Tock Seng Hospital"),
            "role": ("麻醉科医生", "consultant anaesthetist"),
            "moved": ("2019年6月", "June 2019"),
            "city": ("新加坡", "Singapore"),
            "district": ("Tiong Bahru", "Tiong Bahru"),
            "old_city": ("孟买", "Mumbai"),
            "partner_rel": ("丈夫", "husband"),
            "partner": ("张明", "Zhang Ming"),
            "partner_job": ("数据分析师", "data analyst"),
            "sib_rel": ("哥哥", "older brother"),
            "sibling": ("Arjun", "Arjun"),
            "sib_city": ("班加罗尔", "Bangalore"),
            "sib_job": ("律师", "lawyer"),
            "mom_bday": ("1月27日", "27 January"),
            "diet_since": ("小时候", "childhood"),
            "car": ("丰田卡罗拉", "Toyota Corolla"),
            "car_color": ("银色", "silver"),
            "plate": ("SKL 4821 K", "SKL 4821 K"),
            "old_car": ("本田飞度", "Honda Jazz"),
            "phone": ("三星 Galaxy S24", "Samsung Galaxy S24"),
            "old_phone": ("iPhone 12", "iPhone 12"),
            "sleep": ("", ""),
            "wake_hour": ("两", "2"),
            "fear": ("深水", "deep water"),
            "fear_why": ("小时候差点溺水", "I nearly drowned as a kid"),
            "med": ("左甲状腺素", "levothyroxine"),
            "med_for": ("治甲减", "for my thyroid"),
            "dentist_date": ("4月22日", "22 April"),
            "clinic": ("Smile Inc", "Smile Inc"),
            "trip_month": ("五月", "May"),
            "trip_place": ("北海道", "Hokkaido"),
            "show": ("请回答1988", "Reply 1988"),
            "gym_days": ("一、三、五", "Monday, Wednesday and Friday"),
            "tea": ("印度奶茶", "masala chai"),
            "anniv": ("11月11日", "11 November"),
            "anniv_place": ("巴厘岛", "Bali"),
            "kid": ("Anika", "Anika"),
            "kid_age": ("6", "6"),
            "school": ("南洋小学", "Nanyang Primary"),
            "shoe": ("38", "38"),
            "drug": ("布洛芬", "ibuprofen"),
            "t1": ("槟城", "Penang"),
            "t1_when": ("一月", "January"),
            "t2": ("巴厘岛", "Bali"),
            "t2_when": ("三月", "March"),
            "t3": ("悉尼", "Sydney"),
            "t3_when": ("十月", "October"),
            "hike": ("麦里芝", "MacRitchie"),
            "craft": ("画水彩", "watercolour painting"),
            "dislike": ("榴莲", "durian"),
        },
        "kinds": [
            "allergy",
            "hometown",
            "employer",
            "home_city",
            "partner",
            "sibling",
            "mom_bday",
            "diet",
            "car",
            "phone",
            "sleep",
            "fear",
            "medication",
            "dentist",
            "trip",
            "show",
            "gym",
            "tea",
            "anniversary",
            "kid",
            "shoe",
            "dislike_food",
        ],
        "multi": ["allergies", "trips_done", "weekends", "food_needs"],
    },
]

# Questions about things nobody in the set ever said (asked of every persona).
NO_ANSWER_GENERIC = {
    "zh": ["我的血型是什么", "我最支持哪支足球队", "我的护照号码是多少", "我会开飞机吗", "我小学班主任叫什么"],
    "en": [
        "what is my blood type",
        "which football club do I support",
        "what's my passport number",
        "do I own a boat",
        "what was my first teacher called",
    ],
}

SLOT = re.compile(r"\{(\w+)(?::(zh|en))?\}")


def render(template: str, lang: str, slots: dict[str, tuple[str, str]]) -> str:
    """Fill ``{slot}`` with the value in ``lang`` (``{slot:en}`` forces a language)."""

    def value(m: re.Match[str]) -> str:
        name, forced = m.group(1), m.group(2)
        if name in POOLS:
            raise KeyError(name)
        zh, en = slots[name]
        return zh if (forced or lang.removeprefix("mixed_")) == "zh" else en

    return SLOT.sub(value, template)


def fill_pools(template: str, fill: dict[str, str]) -> str:
    """Fill every ``{slot}`` from ``fill`` (filler templates name only pool and place slots)."""
    return SLOT.sub(lambda m: fill[m.group(1)], template)


def sharing(tokens: set[str], shared: bool) -> Callable[[str], bool]:
    """A test of a question: does it share a search token with ``tokens`` (``shared``) or none (not)?"""
    return lambda q: bool(set(tokenize(q)) & tokens) == shared


def not_in(lang: str) -> Callable[[str], bool]:
    """A test of a question: is its main language other than ``lang``?"""
    return lambda q: main_lang(q) != lang


def slots_of(template: str) -> set[str]:
    return {m.group(1) for m in SLOT.finditer(template)}


def main_lang(text: str) -> str:
    """'zh' when most letters are CJK, else 'en'."""
    cjk = sum(1 for ch in text if is_cjk(ch))
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    return "zh" if cjk >= latin / 3 else "en"


def script_of(tag: str) -> str:
    return {"zh": "zh", "en": "en", "mixed_zh": "mixed", "mixed_en": "mixed"}[tag]


def generate() -> dict[str, Any]:
    rng = random.Random(SEED)
    out: list[dict[str, Any]] = []
    for persona in PERSONAS:
        out.append(make_persona(persona, rng))
    return {
        "about": "Invented Chinese/English personal memories for Engram's benchmarks (bench/data/make_bilingual.py).",
        "labels": ["lexical", "paraphrase", "cross_lingual", "multi", "temporal", "no_answer"],
        "personas": out,
    }


def make_persona(persona: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    slots: dict[str, tuple[str, str]] = persona["slots"]
    pid = persona["id"]
    memories: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    start = datetime(2024, 1, 1, tzinfo=UTC)

    def when(lo: int = 0, hi: int = 540) -> datetime:
        return start + timedelta(days=rng.randint(lo, hi), minutes=rng.randint(0, 1439))

    def add_memory(text: str, tag: str, created: datetime, fact_key: str | None, status: str = "active") -> str:
        mid = f"{pid}-m{len(memories) + 1:03d}"
        memories.append(
            {
                "id": mid,
                "text": text,
                "script": script_of(tag),
                "lang": main_lang(text),
                "fact_key": fact_key,
                "status": status,
                "created_at": created.isoformat(),
            }
        )
        return mid

    def pick_tag(options: list[str]) -> str:
        weights = persona["langs"]
        choices = [t for t in options]
        w = [weights["mixed"] if t.startswith("mixed") else weights[t] for t in choices]
        return rng.choices(choices, weights=w)[0]

    def ask(q: str, label: str, answers: list[str], superseded: list[str] = ()) -> None:  # type: ignore[assignment]
        questions.append(
            {
                "id": f"{pid}-q{len(questions) + 1:03d}",
                "q": q,
                "label": label,
                "lang": main_lang(q),
                "answers": answers,
                "superseded": list(superseded),
            }
        )

    def answer_text(mid: str) -> str:
        text: str = next(m["text"] for m in memories if m["id"] == mid)
        return text

    def choose(templates: list[str], lang: str, ok: Callable[[str], bool]) -> str | None:
        """A random template (in ``lang``) whose rendering passes ``ok``."""
        pool = list(templates)
        rng.shuffle(pool)
        for t in pool:
            if not slots_of(t) <= set(slots):
                continue
            text = render(t, lang, slots)
            if ok(text):
                return text
        return None

    # Single facts
    for kind_name in persona["kinds"]:
        kind = KINDS[kind_name]
        usable = [(tag, t) for tag, t in kind["mem"] if slots_of(t) <= set(slots)]
        tag = pick_tag(sorted({tag for tag, _ in usable}))
        template = rng.choice([t for tg, t in usable if tg == tag])
        text = render(template, tag, slots)
        old_ids: list[str] = []
        created = when(120, 540)
        if "old" in kind:
            otag, otemplate = rng.choice([(tg, t) for tg, t in kind["old"] if slots_of(t) <= set(slots)])
            old_ids.append(
                add_memory(
                    render(otemplate, otag, slots),
                    otag,
                    created - timedelta(days=rng.randint(90, 400)),
                    kind["key"],
                    "superseded",
                )
            )
        mid = add_memory(text, tag, created, kind["key"])
        lang = main_lang(text)
        other = "en" if lang == "zh" else "zh"
        mem_tokens = set(tokenize(text))
        qs = kind["q"]
        # paraphrase: same language, no shared search token
        para = choose(qs["paraphrase"].get(lang, []), lang, sharing(mem_tokens, False))
        if para:
            ask(para, "paraphrase", [mid], old_ids)
        else:
            print(f"  ({pid}/{kind_name}: no paraphrase without shared tokens in {lang})", file=sys.stderr)
        cross = choose(qs["cross_lingual"][other], other, not_in(lang))
        if cross:
            ask(cross, "cross_lingual", [mid], old_ids)
        if rng.random() < 0.5 or old_ids:
            lex = choose(qs["lexical"].get(lang, []), lang, sharing(mem_tokens, True))
            if lex:
                ask(lex, "lexical", [mid], old_ids)
        if "temporal" in qs:
            tl = rng.choice([lang, other])
            temporal = choose(qs["temporal"][tl], tl, lambda q: True)
            if temporal:
                ask(temporal, "temporal", [mid], old_ids)

    # Multi-memory facts
    current_of = {m["fact_key"]: m["id"] for m in memories if m["status"] == "active" and m["fact_key"]}
    for group_name in persona["multi"]:
        group = MULTI[group_name]
        ids: list[str] = []
        for part in group["mem"]:
            tag = pick_tag(sorted({tg for tg, _ in part} | set()))
            text = render(rng.choice([t for tg, t in part if tg == tag]), tag, slots)
            ids.append(add_memory(text, tag, when(), None))
        with_kind = group.get("with")
        if with_kind and with_kind in persona["kinds"]:
            ids.insert(0, current_of[KINDS[with_kind]["key"]])
        if len(ids) < 2:
            continue
        for ql in ("zh", "en"):
            ask(rng.choice(group["q"][ql]), "multi", ids)

    # No-answer questions: kinds this persona never talked about, plus a few generic ones.
    missing = [k for k in KINDS if k not in persona["kinds"]]
    for kind_name in missing:
        kind = KINDS[kind_name]
        lang = rng.choice(["zh", "en"])
        free = [t for t in kind["q"]["cross_lingual"][lang] + kind["q"]["paraphrase"].get(lang, []) if not slots_of(t)]
        if free:
            ask(rng.choice(free), "no_answer", [])
    for lang in ("zh", "en"):
        for q in rng.sample(NO_ANSWER_GENERIC[lang], 2):
            ask(q, "no_answer", [])

    # Fillers: everyday notes sharing common words with the facts, none holding a fact's value.
    values = {v for name, pair in slots.items() if name != "friend" for v in pair if len(v) >= 2}
    seen = {m["text"] for m in memories}
    target = persona.get("fillers", 78)
    added = 0
    while added < target:
        tag = pick_tag(["zh", "en", "mixed_zh"])
        template = rng.choice({"zh": FILLER_ZH, "en": FILLER_EN, "mixed_zh": FILLER_MIXED}[tag])
        place_zh, place_en = rng.choice(persona["places"])
        fill = {"friend": rng.choice(persona["friends"]), "place": place_en, "place_zh": place_zh}
        for name in sorted(slots_of(template)):
            if name in POOLS:
                fill[name] = rng.choice(POOLS[name])
        text = fill_pools(template, fill)
        if text in seen or any(v in text for v in values):
            continue
        seen.add(text)
        add_memory(text, tag, when(), None)
        added += 1
    # Memories in time order (as a person would have written them); ids stay stable.
    memories.sort(key=lambda m: m["created_at"])
    return {"id": pid, "split": persona["split"], "memories": memories, "questions": questions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON is not what this script makes")
    args = parser.parse_args()
    data = generate()
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            sys.exit(f"{OUT} is stale: run python bench/data/make_bilingual.py")
        return
    OUT.write_text(text, encoding="utf-8")
    n_mem = sum(len(p["memories"]) for p in data["personas"])
    n_q = sum(len(p["questions"]) for p in data["personas"])
    labels: dict[str, int] = {}
    for p in data["personas"]:
        for q in p["questions"]:
            labels[q["label"]] = labels.get(q["label"], 0) + 1
    print(f"wrote {OUT.name}: {len(data['personas'])} personas, {n_mem} memories, {n_q} questions {labels}")


if __name__ == "__main__":
    main()
