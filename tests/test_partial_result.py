"""A result printed in part, or no result at all: the note the model reads next
(rlm.agent.policy.partial, the PartialResult rule). Scripted fenced-code model like the
local one, a real kernel, the agent built by the composition root; the assertions are on
what reached the model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlm.agent.policy.partial import partial_note
from tests.fenced import cell, run_on_input


def _seen_after(home, path, replies: list[str]) -> list[str]:
    return run_on_input(home, path, "What was the average price of AAPL in 2009?", replies)[1]


@pytest.fixture
def stocks(tmp_path):
    days = pd.date_range("2008-01-01", "2010-12-31", freq="D")
    df = pd.DataFrame({"symbol": ["AAPL"] * len(days),
                       "date": [f"{d:%b} {d.day} {d.year}" for d in days],
                       "price": np.linspace(100, 200, len(days)).round(2)})
    path = tmp_path / "stocks.csv"
    df.to_csv(path, index=False)
    return path


def test_a_filter_that_selects_nothing_is_named_before_the_model_answers(
        _isolated_home, stocks):
    seen = _seen_after(_isolated_home, stocks, [
        cell("sel = stocks[(stocks['symbol'] == 'AAPL') & stocks['date'].str.startswith('2009')]"
              "\nprint(round(sel['price'].mean(), 2))"),
        cell("print(stocks['date'].head())"),
        "FINAL(done)"])
    assert "nan" in seen[0] and "This result is empty (nan)" in seen[0]
    assert "how they are written" in seen[0]
    assert "This result is empty" not in seen[1] and "Only part" not in seen[1]


def test_a_long_series_printed_in_part_says_so_and_a_short_one_does_not(_isolated_home, stocks):
    seen = _seen_after(_isolated_home, stocks, [
        cell("print(stocks['price'])"),            # 1,096 rows: pandas elides the middle
        cell("print(stocks['price'].head())"),      # 5 rows: all shown
        cell("print(stocks.set_index('date')['price'])"),
        "FINAL(done)"])
    assert "Only part of this result was printed (1096 rows" in seen[0]
    assert "Only part" not in seen[1]
    assert "Only part of this result was printed (1096 rows" in seen[2]


@pytest.mark.parametrize("text, note", [
    (repr(pd.Series(np.arange(365.0), name="t")), "365 rows"),
    (str(pd.DataFrame({"a": range(100), "b": range(100)})), "100 rows"),
    (repr(pd.DataFrame({"a": range(1000)})), "1000 rows"),
    (repr(np.arange(5000)), "a long array"),
    (str(np.arange(5000)), "a long array"),
    (repr(pd.DataFrame({"a": []})), "empty (no rows)"),
    (repr(pd.Series([], dtype=float)), "empty (Series([]"),
    ("nan", "empty (nan)"),
    ("Average price: nan", "empty (nan)"),
    ("total = NaT", "empty (NaT)"),
    ("[]", "empty ([])"),
])
def test_the_shapes_of_a_partial_or_empty_result(text, note):
    got = partial_note(text)
    assert got is not None and note in got


@pytest.mark.parametrize("text", [
    "344", "", repr(pd.Series(range(5))), str(pd.DataFrame({"a": range(10)})),
    "a ... b", "x = 3\nnan count: 5", "see the docs...", "Loading ...\ndone: 12 rows",
    "values: [1, 2, 3]", "None",
])
def test_complete_results_get_no_note(text):
    assert partial_note(text) is None


def test_an_empty_filter_shows_how_the_column_is_written(_isolated_home, stocks):
    """The everyday suite's stocks question: `date.str.startswith('2009')` on dates written
    'Jan 1 2009' selected nothing; told to look at the values, the model printed them and
    answered with the printout. The note now shows how the column is written, which values
    hold the literal, and, for dates written as text, how to compare them as dates."""
    seen = _seen_after(_isolated_home, stocks, [
        cell("sel = stocks[(stocks['symbol'] == 'AAPL') & stocks['date'].str.startswith('2009')]"
             "\nprint(sel['price'].mean())"),
        cell("print(stocks[stocks.symbol.isin(['aapl'])]['price'].mean())"),
        cell("print(stocks[stocks['date'] == '2009-01-01']['price'].sum())"),
        "FINAL(done)"])
    assert "How `stocks['date']` is written: 'Jan 1 2008', 'Jan 2 2008', 'Jan 3 2008'" in seen[0]
    assert "No value starts with '2009'; 365 contain it, e.g. 'Jan 1 2009'" in seen[0]
    assert "`pd.to_datetime(stocks['date']).dt.year == 2009`" in seen[0]
    assert "symbol" not in seen[0].split("How `")[1]  # its condition selected rows
    # another spelling, another column: a value that exists only in another case
    assert "How `stocks['symbol']` is written: 'AAPL'. No value equals 'aapl'; 1,096 " \
        "contain it" in seen[1]
    assert "dates written as text" not in seen[1]
    # a sum of nothing prints 0, not nan: no empty-result note, so no data note either
    assert "How `stocks" not in seen[2]


@pytest.mark.parametrize("code, want", [
    ("t[t['c'] == 'x']", [("t", "c", "x", "equal")]),
    ("t[t.c != 'x']", [("t", "c", "x", "equal")]),
    ("t[t['c'].str.contains('x') & (t['d'] == 'y')]", [("t", "c", "x", "contains"),
                                                       ("t", "d", "y", "equal")]),
    ("t[t[t.a > 0]['c'].str.startswith('x')]", [("t", "c", "x", "starts")]),
    ("t[t['c'].isin(['x', 'y'])]", [("t", "c", "x", "equal"), ("t", "c", "y", "equal")]),
    ("t[t['n'] == 3]", []),
    ("t.query(\"c == 'x'\")", []),
])
def test_the_conditions_a_filter_compares_text_with(code, want):
    from rlm.agent.policy.partial import filters_of

    assert sorted(filters_of(code)) == sorted(want)
