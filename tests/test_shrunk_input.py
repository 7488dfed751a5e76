"""An input table re-read in part into its own name: the note says how many rows it holds
now and held when loaded (rlm.agent.cells, rlm.agent.notices.shrunk_note). Scripted
fenced-code model like the local one, a real kernel, the agent built by the composition
root; the assertions are on what reached the model."""

from __future__ import annotations

import pytest

from tests.fenced import cell, run_on_input

QUESTION = "What is the name of the airport with the highest altitude?"


@pytest.fixture
def airports(tmp_path):
    path = tmp_path / "airports.csv"
    rows = "\n".join(f"A{i},Airport {i},{i * 7 % 901}" for i in range(50))
    path.write_text("faa,name,alt\n" + rows + "\n")
    return path


def _seen(home, path, codes: list[str]) -> list[str]:
    return run_on_input(home, path, QUESTION, [*map(cell, codes), "FINAL(done)"])[1]


def test_an_answer_on_an_input_read_in_part_is_refused_once_until_it_is_read_in_full(
        _isolated_home, airports):
    """The everyday suite's airports question: re-read with nrows=10, answered from ten rows
    and marked verified. The answer is refused once; after a full read it stands."""
    top = f"airports = pd.read_csv({str(airports)!r}, nrows=10)\nprint(airports['alt'].max())"
    full = f"airports = pd.read_csv({str(airports)!r})\nprint(airports['alt'].max())"
    end, seen = run_on_input(_isolated_home, airports, QUESTION, [
        cell(top), "FINAL(63)", cell(full), "FINAL(343)"])
    assert seen[1].startswith("Not accepted yet: `airports` holds only part of its rows "
                              "(10 of 50)")
    assert end.final == "343" and "now holds" not in seen[2]
    end, seen = run_on_input(_isolated_home, airports, QUESTION, [
        cell(top), "FINAL(63)", "FINAL(63)"])
    assert end.final == "63" and sum(s.startswith("Not accepted") for s in seen) == 1


def test_an_input_read_again_in_part_says_how_many_rows_it_lost(_isolated_home, airports):
    seen = _seen(_isolated_home, airports, [
        f"airports = pd.read_csv({str(airports)!r}, nrows=10)\n"
        "print(airports.loc[airports['alt'].idxmax(), 'name'])",
        f"import pandas\nairports = pandas.read_csv({str(airports)!r}, skiprows=range(1, 46))\n"
        "print(len(airports))"])
    assert "`airports` now holds 10 rows; it held 50 when your input was loaded" in seen[0]
    assert "needs all 50 rows" in seen[0]
    # another spelling, another function: the rows are counted, not the call's arguments
    assert "`airports` now holds 5 rows; it held 50" in seen[1]


@pytest.mark.parametrize("code", [
    "airports = airports[airports['alt'] > 100]\nprint(len(airports))",   # a filter: no file
    "airports = pd.read_csv({path!r})\nprint(len(airports))",              # read in full
    "top = pd.read_csv({path!r}, nrows=10)\nprint(len(top))",              # under a new name
])
def test_no_note_for_a_filter_a_full_read_or_a_part_under_a_new_name(
        _isolated_home, airports, code):
    [after] = _seen(_isolated_home, airports, [code.format(path=str(airports))])
    assert "now holds" not in after and "when your input was loaded" not in after
