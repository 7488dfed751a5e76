"""A pandas filter whose comparisons Python grouped around `&`/`|` (rlm.agent.policy.
precedence, rule MaskPrecedence): the note the model reads next, from the cell's syntax
tree. Scripted fenced-code model like the local one, a real kernel, the agent built by the
composition root."""

from __future__ import annotations

import pandas as pd
import pytest

from rlm.agent.policy.precedence import precedence_note
from tests.fenced import cell, run_on_input

QUESTION = "How many hourly records at EWR had precipitation greater than 0?"


def test_a_filter_grouped_around_and_is_explained_whether_it_fails_or_not(_isolated_home, tmp_path):
    path = tmp_path / "weather.csv"
    pd.DataFrame({"origin": ["EWR", "JFK", "EWR", "LGA"], "precip": [0.0, 0.2, 0.1, 0.0],
                  "hour": [1, 2, 3, 4]}).to_csv(path, index=False)
    _, seen = run_on_input(_isolated_home, path, QUESTION, [
        cell("print(len(weather[weather['origin'] == 'EWR' & weather['precip'] > 0]))"),  # fails
        cell("print(len(weather[weather['hour'] > 1 | weather['hour'] < 3]))"),  # runs, wrong rows
        cell("print(len(weather[(weather['origin'] == 'EWR') & (weather['precip'] > 0)]))"),
        "FINAL(1)"])
    assert "Error" in seen[0] and "means `weather['origin'] == ('EWR' & weather['precip']) > 0`" in seen[0]
    assert "means `weather['hour'] > (1 | weather['hour']) < 3`" in seen[1]
    assert "bind tighter" not in seen[2] and "1" in seen[2]


@pytest.mark.parametrize("code", [
    "w = df[(df.a == 1) & (df.b > 2)]", "x = a & b", "x = (a & b) == c", "print(f(a & b) == 2)",
    "if x == 1 and y > 2: pass", "not python (", "m = (df.a > 1) | (df.b < 0)",
    "w = dé[(dé['ö'] == 'É') & (dé['p'] > 0)]",
])
def test_parenthesised_or_plain_code_gets_no_note(code):
    assert precedence_note(code) is None


@pytest.mark.parametrize("code, grouped", [
    ("y = df[df.a > 1 | df.b < 0]", "df.a > (1 | df.b) < 0"),
    ("s = (df['x'] ==\n  'a' & df['y'] > 1)", "df['x'] == ('a' & df['y']) > 1"),
    ("é = 1\nw = dé[dé['ö'] == 'É' & dé['p'] > 0]", "dé['ö'] == ('É' & dé['p']) > 0"),
    ("m = a | b > 3", "(a | b) > 3"),
])
def test_the_grouping_python_gave_is_spelled_out(code, grouped):
    note = precedence_note(code)
    assert note is not None and f"means `{grouped}`" in note
