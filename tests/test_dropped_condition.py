"""A condition the question states that no cell used (rlm.agent.policy.conditions, the
DroppedCondition rule): values the input description lists and numbers of three or more
digits. Scripted fenced-code model like the local one, a real kernel, the input loaded and
described by the host; assertions on what reached the model and the answer kept."""

from __future__ import annotations

import pandas as pd
import pytest

from rlm.agent.policy.conditions import conditions, dropped, how_to_use, values_of
from rlm.agent.policy.rules import DROPPED
from tests.fenced import cell, run_on_input


@pytest.fixture
def world(tmp_path):
    rows = [(c, k, y, p) for c, k in [("Chad", "Africa"), ("Mali", "Africa"), ("Peru", "Americas"),
                                      ("Laos", "Asia")]
            for y, p in [(1952, 1000), (2007, 3000)]]
    path = tmp_path / "world.csv"
    pd.DataFrame(rows, columns=["country", "continent", "year", "pop"]).to_csv(path, index=False)
    return path


Q = "What was the total population of Africa in 2007?"


def test_an_answer_whose_cells_dropped_a_stated_year_is_refused_once_naming_it(
        _isolated_home, world):
    end, seen = run_on_input(_isolated_home, world, Q, [
        cell("print(world[world['continent'] == 'Africa']['pop'].sum())"),  # every year
        "FINAL(8000)",
        cell("w = world[(world['continent'] == 'Africa') & (world['year'] == 2007)]\n"
              "print(w['pop'].sum())"),
        "FINAL(6000)"])
    assert "the question states '2007'" in seen[1] and "Africa" not in seen[1].split("states")[1][:12]
    assert "The rows it means: world[world['year'] == 2007]." in seen[1]  # from the description
    assert end.final == "6000" and end.verified is True


def test_after_the_refusal_the_same_cell_again_is_sampled_again(_isolated_home, world):
    """The 1.5B model re-ran its cell unchanged after the refusal and answered the same: a
    cell that already ran and still leaves the condition out is resampled, never run."""
    dropped_cell = cell("print(world[world['continent'] == 'Africa']['pop'].sum())")
    end, seen = run_on_input(_isolated_home, world, Q, [
        dropped_cell, "FINAL(8000)",
        dropped_cell,  # resampled: not run, not in the context
        cell("print(world.query('continent == \"Africa\" and year == 2007')['pop'].sum())"),
        "FINAL(6000)"])
    assert end.final == "6000" and end.verified is True
    outputs = [s for s in seen if s.startswith("Output of cell")]
    assert len(outputs) == 2 and "8000" in outputs[0] and "6000" in outputs[1]


def test_a_value_spelled_in_another_case_in_the_question_is_found(_isolated_home, world):
    end, seen = run_on_input(_isolated_home, world, "How many rows are there for AFRICA in 1952?", [
        cell("print(len(world[world['year'] == 1952]))"),
        "FINAL(4)",
        cell("print(len(world[world['year'] == 1952]))"),
        "FINAL(4)"])
    assert "the question states 'AFRICA', but" in seen[1]
    assert end.final == "4"  # once per run: the same answer is then accepted


def test_an_answer_that_used_every_condition_is_accepted_at_once(_isolated_home, world):
    end, seen = run_on_input(_isolated_home, world, Q, [
        cell("w = world.query(\"continent == 'Africa' and year == 2007\")\nprint(w['pop'].sum())"),
        "FINAL(6000)"])
    assert end.final == "6000" and not any("Not accepted" in s for s in seen)


DESC = ("  continent (str): 3 values: 'Africa', 'Americas', 'Asia'\n"
        "  year (int64): 1952 .. 2007; 2 values: 1952, 2007\n"
        "  name (str): 344 distinct, e.g. 'New York', 'bird1', 'O\\'Hare'\n"
        "  kind (str): 2 values in the sample: 'rain', 'sun'; some values missing (NaN)\n"
        "  day (str): dates as text, '2012/01/01' .. '2015/12/31', 1,461 distinct\n"
        "  miles (float64): 17 .. 4983\n"
        "  booked (datetime64[ns]): 2025-01-01 .. 2025-12-31\n")


@pytest.mark.parametrize("question, want", [
    ("Total population of Africa in 2007?", ["Africa", "2007"]),
    ("How many days of rain in 2014 at new york?", ["rain", "2014", "new york"]),
    ("Average seats of planes with 2 engines? Round to 1 decimal.", []),
    ("How many flights in flights2013.csv went to 1952.csv?", []),
    ("Which continent had the lowest value in 1952?", ["1952"]),
    ("Flights longer than 1500.5 miles in Asia", ["1500.5", "Asia"]),
    ("Is africanus a value?", []),  # a word that holds a value is not the value
    ("Which kind was most common in 2025?", []),  # every row was booked in 2025
    ("Which kind was most common in 9999?", []),  # no column's range holds it
    ("How many rows have id 123456?", []),
])
def test_the_conditions_a_question_states(question, want):
    assert conditions(question, [DESC]) == want


def test_a_condition_is_used_when_a_cell_spells_it_as_a_word_or_number():
    codes = ["df[df.year == 2007]", "df[df.continent.str.lower() == 'africa']"]
    assert dropped("Africa in 2007", [DESC], codes) == []
    assert dropped("Africa in 2007", [DESC], ["df[df.year == 20071]", "x = 'africanus'"]) == [
        "Africa", "2007"]
    assert dropped("Africa in 2007", [DESC], ["df[df.year == 2007.5]"]) == ["Africa", "2007"]
    assert values_of([DESC]) >= {"africa", "1952", "2007", "new york", "rain", "sun"}
    assert DROPPED.startswith("Not accepted yet")


def test_the_rows_a_condition_means_come_from_the_description():
    tables = ("- world: pandas.DataFrame, 8 rows x 4 columns\n  columns (dtype: values):\n" + DESC)
    assert how_to_use("AFRICA", [tables]) == "world[world['continent'] == 'Africa']"
    assert how_to_use("2007", [tables]) == "world[world['year'] == 2007]"
    assert how_to_use("2014", [tables]) == "2014 is within the range of world['day']"
    assert how_to_use("9999", [tables]) == "" and how_to_use("Mars", [tables]) == ""
    assert how_to_use("2007", [DESC]) == ""  # a column line outside any table: no name to give


def test_after_the_refusal_a_new_cell_that_still_leaves_the_condition_out_is_sampled_again(
        _isolated_home, world):
    """gap-brazil-rise: refused for '1952' and '2007', the 1.5B model sent its positional
    cell again without its first line, and answered the same. Any cell that spells none of
    the refused conditions is sampled again, not only a cell that ran before."""
    end, seen = run_on_input(_isolated_home, world, Q, [
        cell("print(world[world['continent'] == 'Africa']['pop'].sum())"), "FINAL(8000)",
        cell("a = world[world['continent'] == 'Africa']\nprint(a['pop'].sum())"),  # resampled
        cell("a = world[(world['continent'] == 'Africa') & (world['year'] == 2007)]\n"
             "print(a['pop'].sum())"),
        "FINAL(6000)"])
    assert end.final == "6000" and end.verified is True
    outputs = [s for s in seen if s.startswith("Output of cell")]
    assert len(outputs) == 2 and "6000" in outputs[1]


def test_after_a_host_refusal_the_question_is_still_the_users(_isolated_home, world):
    """The logs run (stop 66): an error-text refusal was logged as a user prompt, so the
    rules read "Not accepted: your answer is the text of an error" as the question and
    named 'error' as its condition. The host's messages are never the question: after one,
    the user's condition is still the one named."""
    end, seen = run_on_input(_isolated_home, world, Q, [
        cell("print(world.head(2))"),
        "FINAL(NameError: name 'africa' is not defined)",  # refused as the text of an error
        cell("print(world[world['continent'] == 'Africa']['pop'].sum())"),  # every year
        "FINAL(8000)",
        cell("w = world[(world['continent'] == 'Africa') & (world['year'] == 2007)]\n"
             "print(w['pop'].sum())"),
        "FINAL(6000)"])
    assert "the text of an error" in seen[1]
    assert "the question states '2007'" in seen[3], seen[3]
    assert end.final == "6000" and end.verified is True


@pytest.mark.parametrize("codes, want", [
    # one result for each value named: a group over their column covers them all
    (["df[df.year == 2007].groupby('continent')['pop'].sum()"], []),
    (["pd.pivot_table(df[df['year'] == 2007], index=['continent'], values='pop')"], []),
    # the column not named: still dropped
    (["df[df.year == 2007]['pop'].sum()"], ["Africa", "Asia"]),
])
def test_values_of_one_column_named_together_are_used_by_a_group_over_it(codes, want):
    assert dropped("Compare Africa and Asia in 2007", [DESC], codes) == want


def test_a_value_named_alone_is_a_filter_a_group_does_not_apply():
    codes = ["df[df.year == 2007].groupby('continent')['pop'].sum()"]
    assert dropped("Total population of Africa in 2007?", [DESC], codes) == ["Africa"]
    # two values of different columns are two filters
    assert dropped("Days of rain in Asia", [DESC],
                   ["df.groupby(['kind', 'continent']).size()"]) == ["rain", "Asia"]


def test_an_answer_per_value_from_a_group_is_not_refused(_isolated_home, world):
    """End to end: the answer gives each named continent's figure from a group over
    continent, filtered to 2007: accepted at once."""
    end, seen = run_on_input(_isolated_home, world, "Population of Africa and Asia in 2007?", [
        cell("print(world[world['year'] == 2007].groupby('continent')['pop'].sum())"),
        "FINAL(Africa: 6000, Asia: 3000)"])
    assert end.final == "Africa: 6000, Asia: 3000" and not any("Not " in s for s in seen)
