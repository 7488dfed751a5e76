"""Issue 58 item 10: a user's sentence becomes a stored convention only when it states a
durable rule ("always use UTC", "from now on ..."), never a one-off instruction ("Never
mind, just plot sales by month."). The classifier is pure (rlm.memory.capture.
is_standing_rule): a fixture table it was written against, and a second table written
before the classifier and never tuned on (HELD_OUT), which it must classify as well."""

from __future__ import annotations

import pytest

from rlm.memory.capture import is_standing_rule, stated_conventions

# (sentence, is a standing rule) — the table the classifier was written against
TUNED = [
    ("Always use UTC for timestamps", True),
    ("From now on, round money to 2 decimals", True),
    ("Never write to data/raw", True),
    ("Going forward, exclude test accounts from every count", True),
    ("Revenue excludes refunds", True),
    ("Please always label the axes", True),
    ("Don't ever overwrite the input files", True),
    ("Round money to 2 decimals from now on", True),
    ("By convention, weeks start on Monday", True),
    ("We always report amounts in euros", True),
    ("You should never drop rows with a missing region", True),
    ("Never mind, just plot sales by month", False),
    ("Never mind", False),
    ("Nevermind, plot it by week instead", False),
    ("Just plot sales by month", False),
    ("Now plot revenue by region", False),
    ("Plot sales by region and tell me which grew fastest", False),
    ("Always plot this one as a bar chart for now", False),
    ("Never use the cache for this run", False),
    ("Just this once, skip the validation", False),
    ("I always wondered why sales dip in May", False),
    ("What is the total revenue", False),
    ("The columns include region and revenue", False),
    ("Use UTC this time", False),
]

# written before is_standing_rule, and never used to change it
HELD_OUT = [
    ("Henceforth, dates are written as YYYY-MM-DD", True),
    ("In future, keep every chart under 10 categories", True),
    ("Never commit credentials to the repository", True),
    ("Always keep the original column names", True),
    ("As a rule, prefer parquet over csv", True),
    ("Make sure to always sort the output by date", True),
    ("Profit is defined as revenue minus cost", True),
    ("Never mind the last chart, just show the table", False),
    ("Now just give me the top five", False),
    ("Just rerun the last cell", False),
    ("Redo the plot with a log scale", False),
    ("Okay never mind, sum it by quarter", False),
    ("Today, only look at the March file", False),
    ("For this report always use the median", False),
]


@pytest.mark.parametrize("sentence,rule", TUNED)
def test_the_tuned_table(sentence, rule):
    assert is_standing_rule(sentence) is rule


@pytest.mark.parametrize("sentence,rule", HELD_OUT)
def test_sentences_the_classifier_was_not_tuned_on(sentence, rule):
    assert is_standing_rule(sentence) is rule


@pytest.mark.parametrize("text,expected", [
    ("Never mind, just plot sales by month.", []),
    ("Never mind. Always use UTC. Plot sales by month.", ["Always use UTC"]),
    ("Never mind, always use UTC.", ["always use UTC"]),
    ("Plot sales by month. From now on, label every axis!", ["From now on, label every axis"]),
])
def test_stated_conventions_keep_only_the_rules_of_a_prompt(text, expected):
    assert stated_conventions(text) == expected
