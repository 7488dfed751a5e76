"""The aggregate a question names that no cell computed (rlm.agent.policy.operations, the
QuestionOperation rule): a mean, median, standard deviation, sum, or a count of distinct
things. Scripted fenced-code model like the local one, a real kernel, the input loaded and
described by the host; assertions on what reached the model and how the run ended."""

from __future__ import annotations

import pandas as pd
import pytest

from rlm.agent.policy.decisions import Answer, Facts
from rlm.agent.policy.operations import asked, computed
from rlm.agent.policy.rules import QuestionOperation
from rlm.agent.policy.verify import Shown
from rlm.session.entries import MessageEntry
from tests.fenced import cell, run_on_input

COUNTRIES = [("Chad", "Africa", 30), ("Mali", "Africa", 32), ("Peru", "Americas", 50),
             ("Chile", "Americas", 52), ("Laos", "Asia", 45), ("Iran", "Asia", 47),
             ("Fiji", "Oceania", 60), ("Spain", "Europe", 70), ("Italy", "Europe", 72),
             ("Greece", "Europe", 74)]


@pytest.fixture
def gapminder(tmp_path):
    """10 countries x 2 years: Oceania has the fewest rows, Africa the lowest mean."""
    rows = [(c, k, y, e, 10) for c, k, e in COUNTRIES for y in (1952, 2007)]
    path = tmp_path / "gapminder.csv"
    pd.DataFrame(rows, columns=["country", "continent", "year", "lifeExp", "pop"]).to_csv(
        path, index=False)
    return path


HOW_MANY = "How many different countries in Europe are in gapminder.csv?"
ROWS = cell('print(gapminder[gapminder["continent"] == "Europe"].shape[0])')
LOWEST = "Which continent had the lowest average life expectancy in 1952?"


def _refusals(seen: list[str]) -> list[str]:
    return [s for s in seen if s.startswith("Not accepted yet")]


def test_a_count_of_rows_for_how_many_countries_is_refused_once_naming_the_column(
        _isolated_home, gapminder):
    end, seen = run_on_input(_isolated_home, gapminder, HOW_MANY, [
        ROWS, "FINAL(6)",
        cell("print(gapminder[gapminder['continent'] == 'Europe']['country'].nunique())"),
        "FINAL(3)"])
    assert seen[1].startswith("Not accepted yet: the question asks how many countries; "
                              "`country` repeats in gapminder (20 rows, 10 distinct values)")
    assert "`gapminder[...]['country'].nunique()`" in seen[1]
    assert len(_refusals(seen)) == 1 and end.final == "3"


def test_a_pick_by_counts_for_the_lowest_average_is_refused_naming_the_mean(
        _isolated_home, gapminder):
    end, seen = run_on_input(_isolated_home, gapminder, LOWEST, [
        cell('print(gapminder[gapminder["year"] == 1952]["continent"].value_counts().idxmin())'),
        "FINAL(Oceania)",
        cell("g = gapminder[gapminder['year'] == 1952]\n"
             "print(g.groupby('continent')['lifeExp'].mean().idxmin())"),
        "FINAL(Africa)"])
    assert "Oceania" in seen[0]
    assert seen[1].startswith("Not accepted yet: the question asks for the average (mean), but "
                              "none of the cells you ran computes a mean")
    assert "`gapminder.groupby('continent')['lifeExp'].mean()`" in seen[1]
    assert len(_refusals(seen)) == 1 and end.final == "Africa"


EUROPE = "gapminder[gapminder['continent'] == 'Europe']"


@pytest.mark.parametrize("question, code, answer", [
    ("What is the average life expectancy in Europe?",
     f"print({EUROPE}['lifeExp'].agg('mean'))", "72.0"),
    ("What is the mean life expectancy in Europe?",
     f"import numpy as n\nprint(n.average({EUROPE}['lifeExp']))", "72.0"),
    ("What is the avg life expectancy in Europe?",
     f"x = list({EUROPE}['lifeExp'])\nprint(sum(x) / len(x))", "72.0"),
    ("What was the total population of Europe?", f"print({EUROPE}['pop'].sum())", "60"),
    (HOW_MANY, f"print({EUROPE}['country'].nunique())", "3"),
    (HOW_MANY, f"print(len({EUROPE}.drop_duplicates('country')))", "3"),
    (HOW_MANY, f"print(len(set({EUROPE}['country'])))", "3"),
    (HOW_MANY, f"print({EUROPE}.groupby('country').ngroups)", "3"),
])
def test_the_operation_computed_in_any_usual_spelling_is_accepted_at_once(
        _isolated_home, gapminder, question, code, answer):
    end, seen = run_on_input(_isolated_home, gapminder, question, [cell(code), f"FINAL({answer})"])
    assert not _refusals(seen) and end.final == answer


@pytest.fixture
def flights(tmp_path):
    path = tmp_path / "flights.csv"
    pd.DataFrame({"flight": [11, 11, 12, 13], "origin": ["JFK", "JFK", "LGA", "JFK"],
                  "carrier": ["UA", "UA", "DL", "AA"]}).to_csv(path, index=False)
    return path


@pytest.fixture
def penguins(tmp_path):
    path = tmp_path / "penguins.csv"
    pd.DataFrame({"species": ["Adelie", "Adelie", "Gentoo"],
                  "island": ["Biscoe", "Biscoe", "Dream"]}).to_csv(path, index=False)
    return path


@pytest.fixture
def stocks(tmp_path):
    path = tmp_path / "stocks.csv"
    pd.DataFrame({"symbol": ["AAPL", "AAPL", "MSFT"], "year": [2009, 2009, 2010],
                  "price": [10.0, 20.5, 7.0]}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("table, question, code, answer", [
    ("flights", "How many flights departed JFK?",  # `flight` is a number column
     "print(len(flights[flights['origin'] == 'JFK']))", "3"),
    ("penguins", "How many penguins live on Biscoe?",  # no `penguin` column
     "print(len(penguins[penguins['island'] == 'Biscoe']))", "2"),
    ("stocks", "What was the average price of AAPL in 2009? Round to 2 decimals.",
     "s = stocks[(stocks['symbol'] == 'AAPL') & (stocks['year'] == 2009)]\n"
     "print(round(s['price'].mean(), 2))", "15.25"),
    ("flights", "How many flights departed JFK in total?",  # "total" of a count
     "print(len(flights[flights['origin'] == 'JFK']))", "3"),
])
def test_no_refusal_when_the_word_means_something_else_or_the_cell_computed_it(
        _isolated_home, request, table, question, code, answer):
    end, seen = run_on_input(_isolated_home, request.getfixturevalue(table), question,
                             [cell(code), f"FINAL({answer})"])
    assert not _refusals(seen) and end.final == answer


def test_the_refusal_is_given_once_per_run(_isolated_home, gapminder):
    end, seen = run_on_input(_isolated_home, gapminder, HOW_MANY, [ROWS, "FINAL(6)", "FINAL(6)"])
    assert len(_refusals(seen)) == 1 and end.final == "6"


def test_no_refusal_on_the_last_turn(_isolated_home, gapminder):
    end, seen = run_on_input(_isolated_home, gapminder, HOW_MANY, [ROWS, "FINAL(6)"], max_turns=2)
    assert not _refusals(seen) and end.final == "6"


def _asked(*questions: str) -> list[MessageEntry]:
    return [MessageEntry(message={"role": "user", "content": q}) for q in questions]


def test_a_native_tools_model_is_not_refused():
    """Native-tools models compute what they are asked; the rule reads no branch for them."""
    facts = Facts(native_tools=True, shown=[Shown("e1", "6", ROWS)], turn=2, max_turns=30)
    assert QuestionOperation().on_answer(facts, Answer("6", "text"), [HOW_MANY], []) is None


def test_a_follow_up_question_is_not_refused():
    """"The mean bonus you found" was computed by an earlier run, whose cells this run does
    not see: only a session's first question is checked."""
    facts = Facts(shown=[Shown("e1", "12", cell("print(4 * 3)"))], turn=2, max_turns=30)
    follow_up = "Multiply the number of employees by the mean bonus you found."
    rule, answer = QuestionOperation(), Answer("12", "text")
    assert rule.on_answer(facts, answer, [], _asked(follow_up)) is not None
    assert rule.on_answer(facts, answer, [], _asked("What is the mean bonus?", follow_up)) is None


DESC = ("- t: pandas.DataFrame, 1,704 rows x 4 columns\n  columns (dtype: values):\n"
        "  country (str): 142 distinct, most frequent: 'Chad', 'Mali', 'Peru'\n"
        "  name (str): 1,704 distinct, e.g. 'a', 'b', 'c'\n"
        "  total_bill (float64): 3 .. 50\n"
        "  flight (int64): 1 .. 8500\n")


@pytest.mark.parametrize("question, kinds", [
    ("How many Countries are there?", []),  # rows or countries: only the data can tell
    ("How many unique Countries are there?", ["distinct"]),
    ("How many names are there?", []),  # every value different
    ("How many flights left?", []),
    ("What is the average total bill?", ["mean"]),  # "total bill" is the column
    ("What does the column flight mean?", []),
    ("What is the total number of flights?", []),
    ("What is the sum of total_bill and the median flight?", ["sum", "median"]),
    ("What is the standard deviation of total_bill?", ["std"]),
    ("How many different airlines are in data.csv?", ["distinct"]),
    # one spelling of each value first, when the question says they vary
    ("The country names are spelled inconsistently. How many unique countries are there?",
     ["normalise", "distinct"]),
    ("How many customers are there, ignoring typos?", ["normalise"]),
    ("Customer names were entered in different ways; count the distinct customers.",
     ["normalise", "distinct"]),
    ("Which country is spelled inconsistently?", []),  # no count
    ("How many rows have 'Inc' vs 'Ltd'?", []),
])
def test_the_operations_a_question_names(question, kinds):
    assert [op.kind for op in asked(question, [DESC])] == kinds


@pytest.mark.parametrize("kind, code, ok", [
    ("mean", "df.pivot_table(values='x', aggfunc='mean')", True),
    ("mean", "s.sum() / s.count()", True),
    ("mean", "mean = df.x.value_counts().idxmin()\nprint(mean)", False),
    ("mean", "duckdb.sql('SELECT AVG(x) FROM t')", True),
    ("median", "np.percentile(x, 50)", True),
    ("median", "df.x.quantile(0.9)", False),
    ("sum", "total = 0\nfor v in xs:\n    total += v", True),
    ("distinct", "%time print(df.x.nunique())", True),
    ("distinct", "print(len(df))", False),
    ("normalise", "df.vendor.str.casefold().nunique()", True),
    ("normalise", "re.sub(r'\\s+', ' ', v)", True),
    ("normalise", "{v.strip() for v in names}", True),
    ("normalise", "df.vendor.nunique()", False),
])
def test_an_operation_is_computed_in_the_usual_spellings(kind, code, ok):
    assert computed(kind, [code]) is ok


def test_a_mean_a_failed_cell_computed_before_its_error_counts(_isolated_home, gapminder):
    """The everyday suite's worst-airline question: the first cell computed the means per
    carrier, then failed on its last line (a lookup); the cell that ran after used those
    means, and the answer was refused as "none of the cells you ran computes a mean". The
    lines a failed cell ran before its error are computed; the line that failed is not."""
    end, seen = run_on_input(_isolated_home, gapminder, LOWEST, [
        cell("g = gapminder[gapminder['year'] == 1952]\n"
             "means = g.groupby('continent')['lifeExp'].mean()\n"
             "print(means.loc[1952])"),
        cell("print(means.idxmin())"), "FINAL(Africa)"])
    assert "KeyError: 1952" in seen[0]
    assert not _refusals(seen) and end.final == "Africa"
    # the failing line itself computed nothing: a mean only there is still missing
    end, seen = run_on_input(_isolated_home, gapminder, LOWEST, [
        cell("g = gapminder[gapminder['year'] == 1952]\n"
             "print(g.groupby('continent')['lifeExp'].mean().loc[1952])"),
        cell("print(g['continent'].value_counts().idxmin())"), "FINAL(Oceania)",
        "FINAL(Oceania)"])
    assert len(_refusals(seen)) == 1


def test_a_distinct_count_over_values_said_to_vary_is_refused_until_they_are_rewritten(
        _isolated_home, tmp_path):
    """The task suite's dedupe family: "vendor names with inconsistent spelling ... how many
    distinct vendors?" was answered from `unique()` five times in five (260 for 32)."""
    names = ["Acme Inc", "ACME Inc.", "acme  incorporated", "Brill Ltd", "brill limited",
             "Corvo", "corvo "]
    path = tmp_path / "vendors.csv"
    pd.DataFrame({"vendor": names * 3, "amount": range(21)}).to_csv(path, index=False)
    q = ("vendors.csv lists vendor names with inconsistent spelling (case, spacing, 'Inc' vs "
         "'Incorporated', 'Ltd' vs 'Limited'). How many distinct vendors are there?")
    rewrite = ("v = vendors['vendor'].str.lower().str.replace(r'[^a-z0-9]+', ' ', regex=True)"
               ".str.strip()\nv = v.str.replace(r'\\bincorporated\\b', 'inc', regex=True)"
               ".str.replace(r'\\blimited\\b', 'ltd', regex=True)\nprint(v.nunique())")
    end, seen = run_on_input(_isolated_home, path, q, [
        cell("print(vendors['vendor'].nunique())"), "FINAL(7)", cell(rewrite), "FINAL(3)"])
    refusal = seen[1]
    assert refusal.startswith("Not accepted yet: the question says the values are written in "
                              "different ways (inconsistent spelling)")
    assert "`vendors['vendor'].str.lower().str.replace(r'[^a-z0-9]+', ' ', regex=True)" \
        ".str.strip()`" in refusal
    assert "3" in seen[2] and end.final == "3" and len(_refusals(seen)) == 1
