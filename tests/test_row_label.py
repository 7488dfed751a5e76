"""A row's label printed as the result (`df['temp_min'].idxmin()` -> 706): the note says
what the number is and how to read that row (rlm.agent.policy.labels, rule RowLabel).
Scripted fenced-code model like the local one, a real kernel, the agent built by the
composition root; the assertions are on what reached the model."""

from __future__ import annotations

import pytest

from rlm.agent.policy.labels import label_note
from tests.fenced import cell, run_on_input


@pytest.fixture
def weather(tmp_path):
    path = tmp_path / "seattle-weather.csv"
    rows = "\n".join(f"2012/01/{d:02d},{(d * 7) % 11 - 3}" for d in range(1, 29))
    path.write_text("date,temp_min\n" + rows + "\n")
    return path


def test_a_printed_row_label_is_named_and_the_row_read(_isolated_home, weather):
    end, seen = run_on_input(_isolated_home, weather, "On what date was the lowest temp_min?", [
        cell("d = seattle_weather['temp_min'].idxmin()\nprint(d)"),
        cell("print(seattle_weather.loc[seattle_weather['temp_min'].idxmin(), 'date'])"),
        "FINAL(2012/01/03)"])
    assert ("is the label of a row of `seattle_weather`, not a value of its columns: "
            "`.idxmin()` gives where the row is") in seen[0]
    assert "`seattle_weather.loc[" in seen[0]
    assert "label of a row" not in seen[1]  # the row's date was read: no note
    assert end.final == "2012/01/03"


@pytest.mark.parametrize("code, output", [
    ("print(t['temp'].idxmax())", "706"),
    ("print(t.temp.argmin())", "12"),
    ("x = t[t['city'] == 'A']['temp'].idxmin()\nprint(x)", "3"),
])
def test_labels_and_positions_taken_off_a_column(code, output):
    note = label_note(code, output, [])
    assert f"{output} is the " in note and "a row of `t`" in note
    assert (".iloc[" in note) == ("arg" in code)


@pytest.mark.parametrize("code, output, earlier", [
    ("print(t.loc[t['temp'].idxmax(), 'year'])", "2007", []),          # the row was read
    ("i = t['temp'].idxmax()\nprint(t.loc[i, 'year'])", "2007", []),
    ("print(t.groupby('year').size().idxmax())", "2013", []),          # a group's label
    ("print(t['city'].value_counts().idxmax())", "3", []),
    ("print(t['temp'].idxmax())", "2007", ["t = t.set_index('year')"]),  # its own index
    ("print(t['temp'].idxmax())", "Gentoo", []),                       # not a whole number
    ("print(t['temp'].max())", "706", []),                             # not a label at all
])
def test_no_note_where_the_number_is_a_value(code, output, earlier):
    assert label_note(code, output, earlier) == ""
