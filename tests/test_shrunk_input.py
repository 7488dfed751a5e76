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
