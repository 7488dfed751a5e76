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


@pytest.fixture
def flights(tmp_path):
    """Two airports over three months; each airport's worst month is its own."""
    path = tmp_path / "flights.csv"
    worst = {"EWR": 2, "JFK": 3}
    rows = [f"{o},{m},{40 if m == worst[o] else 5 + m + k}"
            for o in worst for m in (1, 2, 3) for k in (0, 1)]
    path.write_text("origin,month,dep_delay\n" + "\n".join(rows) + "\n")
    return path


MEANS = ("avg = flights.groupby(['origin', 'month'])['dep_delay'].mean().reset_index()\n")


def test_a_groups_row_numbers_are_named_and_the_rows_offered(_isolated_home, flights):
    """The long-run flights task asked one step at a time: `idxmax()` per origin over a
    `reset_index()` table printed 2 and 5 under `dep_delay`, read as the worst months.
    The note says they are row numbers (the data said so, on a fork) and offers the rows;
    the offered cell prints the months."""
    worst = "w = avg.groupby('origin')['dep_delay'].idxmax().reset_index()\nprint(w)"
    offered = ("w = avg.loc[avg.groupby('origin')['dep_delay'].idxmax()].reset_index()\n"
               "print(w)")
    end, seen = run_on_input(_isolated_home, flights, "the worst month of each origin?", [
        cell(MEANS + "print(avg)"), cell(worst), cell(offered), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "of each group gives the label of a row of `avg`" in seen[1]
    assert "its labels are row numbers" not in seen[0] and "row numbers" not in seen[0]
    assert f"```python\n{offered}\n```" in seen[1]
    assert "month" in seen[2] and "row numbers" not in seen[2]  # the rows read: no note
    assert end.final == "EWR: month 2, JFK: month 3"


SILENT = ("w = avg.groupby('origin')['dep_delay'].idxmax()\n"
          "with open('report.md', 'w') as f:\n    for o, m in w.items():\n"
          "        f.write(f'{o}: month {m}\\n')")


def test_a_file_written_from_a_groups_row_numbers_is_named_and_the_rows_offered(
        _isolated_home, flights, monkeypatch):
    """The long-run flights run at stop 71: the per-origin `idxmin()` written into report.md
    by a cell that printed nothing ('EWR: month 6' from row 6). The note names the file and
    offers the rows alone, printed (the whole cell again would write the file from a
    trial): the trial left report.md as the model's cell wrote it."""
    monkeypatch.chdir(flights.parent)
    rows = "print(avg.loc[avg.groupby('origin')['dep_delay'].idxmax()])"
    end, seen = run_on_input(_isolated_home, flights, "the worst month of each origin?", [
        cell(MEANS + "print(avg)"), cell(SILENT), cell(rows), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "what this cell wrote to report.md from it are row numbers" in seen[1]
    assert f"```python\n{rows}\n```" in seen[1]
    assert (flights.parent / "report.md").read_text() == "EWR: month 1\nJFK: month 5\n"
    assert end.final == "EWR: month 2, JFK: month 3"


def test_no_note_on_a_silent_cell_that_wrote_from_labels_that_are_values(
        _isolated_home, flights, monkeypatch):
    """Guard: the same silent cell where `avg`'s labels are the months: nothing to say."""
    monkeypatch.chdir(flights.parent)
    own = MEANS + "avg = avg.set_index('month')\n"
    end, seen = run_on_input(_isolated_home, flights, "the worst month of each origin?", [
        cell(own + "print(avg)"), cell(SILENT), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "row numbers" not in seen[1]
    assert (flights.parent / "report.md").read_text() == "EWR: month 2\nJFK: month 3\n"


@pytest.mark.parametrize("own_index", [
    "avg = avg.set_index('month')",
    "avg.index = avg['month']",  # no set_index spelled: only the data says it
])
def test_no_group_note_where_the_tables_labels_are_its_own(_isolated_home, flights, own_index):
    """Where the grouped table's labels are values (months), its `idxmax()` per group is
    the answer: the data decides, not a spelling of `set_index`."""
    worst = f"{own_index}\nprint(avg.groupby('origin')['dep_delay'].idxmax())"
    end, seen = run_on_input(_isolated_home, flights, "the worst month of each origin?", [
        cell(MEANS + worst), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "row numbers" not in seen[0] and "label of a row" not in seen[0]
    assert "EWR" in seen[0]


def test_a_failing_cell_that_read_labels_as_rows_is_corrected(_isolated_home, flights):
    """The first cell of the long-run flights run: the per-origin `idxmin()` zipped as if
    it held months (`KeyError: 'month'`), sent unchanged until the run stopped. The
    corrected cell reads the rows the labels point at, and runs."""
    whole = (MEANS + "w = avg.groupby('origin')['dep_delay'].idxmax().reset_index()\n"
             "for o, m in zip(w['origin'], w['month']):\n    print(f'{o}: month {m}')")
    fixed = whole.replace("avg.groupby('origin')['dep_delay'].idxmax()",
                          "avg.loc[avg.groupby('origin')['dep_delay'].idxmax()]")
    end, seen = run_on_input(_isolated_home, flights, "the worst month of each origin?", [
        cell(whole), cell(fixed), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "KeyError" in seen[0]
    assert "`avg.loc[...]` reads the rows `.idxmax()` points at" in seen[0]
    assert f"```python\n{fixed}\n```" in seen[0]
    assert "EWR: month 2" in seen[1] and "JFK: month 3" in seen[1]


@pytest.mark.parametrize("code", [
    "print(t.groupby('k')['v'].idxmax())",
    "print(t[t.v > 0].groupby('k').v.idxmin())",
    "w = t.groupby(['a', 'b'])['v'].idxmax().reset_index()\nprint(w)",
])
def test_a_grouped_label_call_is_found_and_recast_with_its_check(code):
    import ast

    from rlm.agent.rewrites import label_calls, row_label_rewrites
    (call,) = label_calls(ast.parse(code))
    assert call.grouped and call.table == "t"
    (r,) = row_label_rewrites(code, ast.parse(code))
    assert "t.loc[t" in r.code and r.guard.startswith("assert t.index.name is None")


@pytest.mark.parametrize("code", [
    "print(t.loc[t.groupby('k')['v'].idxmax()])",                 # the rows were read
    "i = t.groupby('k')['v'].idxmax()\nprint(t.loc[i, 'month'])",
    "print(t.groupby('k')['v'].sum().idxmax())",                    # a group's label
    "print(t.groupby('k')['v'].argmax())",                          # no positions per group
])
def test_no_grouped_label_call_where_the_labels_are_read_or_are_groups(code):
    import ast

    from rlm.agent.rewrites import label_calls
    assert label_calls(ast.parse(code)) == []
