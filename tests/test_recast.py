"""An answer of the wrong kind for its question, refused with the model's own cell recast
and tried on the data (rlm.agent.policy.recast, the RowLabel offer; issue 60).

Scripted fenced-code model (like the local one), real kernels built by the composition
root; assertions on what reached the model and what the run ended with.
"""

from __future__ import annotations

from pathlib import Path

from rlm.agent.policy.recast import direction, distinct_recasts, which_recasts
from tests.fenced import cell as _cell
from tests.fenced import run_on_input

OFFER = "A corrected cell ran without an error on a copy of your variables"


def _offered(note: str) -> str:
    if OFFER not in note:
        return ""
    return note.split(OFFER, 1)[1].split("```python\n", 1)[1].rsplit("\n```]", 1)[0]


def _run(home: Path, files: list[Path], replies: list[str], question: str
         ) -> tuple[list[str], str | None]:
    """What the model read after each reply, and the run's final answer."""
    (path,) = files
    end, seen = run_on_input(home, path, question, replies)
    return [str(s) for s in seen], end.final


def _life(tmp: Path) -> Path:
    """Six countries on three continents over two years: a row per country and year."""
    rows = ["country,continent,year,life"]
    data = {"Ghana": ("Africa", 50, 60), "Mali": ("Africa", 40, 48), "Peru": ("Americas", 60, 70),
            "Chile": ("Americas", 62, 78), "Laos": ("Asia", 55, 65), "Nepal": ("Asia", 51, 66)}
    for country, (continent, y1, y2) in data.items():
        rows += [f"{country},{continent},1990,{y1}", f"{country},{continent},2010,{y2}"]
    (tmp / "life.csv").write_text("\n".join(rows) + "\n")
    return tmp / "life.csv"


def test_a_row_count_for_how_many_things_is_refused_with_the_distinct_count(
        _isolated_home, tmp_path):
    """"How many countries in Africa?" answered with the rows of Africa (4: two countries
    over two years): refused with the cell recast to count distinct countries over the
    same rows; the model sends it and answers 2."""
    cell = 'print(life[life["continent"] == "Africa"].shape[0])'
    recast = "print(life[life[\"continent\"] == \"Africa\"]['country'].nunique())"
    seen, final = _run(_isolated_home, [_life(tmp_path)],
                       [_cell(cell), "FINAL(4)", _cell(recast), "FINAL(2)"],
                       "How many countries in Africa are in life.csv?")
    assert "4" in seen[0]
    assert "your answer 4 counts rows" in seen[1] and "`country` repeats" in seen[1]
    assert _offered(seen[1]) == recast
    assert seen[2].strip().endswith("\n2")
    assert final == "2"


def test_a_row_count_over_rows_holding_each_thing_once_is_the_answer(_isolated_home, tmp_path):
    """In 2010 each country has one row: counting the rows counts the countries. Only the
    data tells the two apart; the answer stands."""
    cell = 'print(len(life[(life["year"] == 2010) & (life["life"] > 60)]))'
    seen, final = _run(_isolated_home, [_life(tmp_path)], [_cell(cell), "FINAL(4)"],
                       "How many countries had a life expectancy over 60 in 2010 in life.csv?")
    assert final == "4" and len(seen) == 1


def test_a_figure_for_which_thing_is_refused_with_the_cell_grouped_by_the_thing(
        _isolated_home, tmp_path):
    """"Which continent had the lowest average life in 1990?" answered with the mean over
    every continent: refused, and offered the cell grouped by continent with idxmin."""
    cell = ('mean_life = life[life["year"] == 1990]["life"].mean()\n'
            'print(mean_life)')
    recast = ('mean_life = life[life["year"] == 1990].groupby(\'continent\')["life"]'
              ".mean().idxmin()\nprint(mean_life)")
    recast = recast.replace('["life"].mean()', "['life'].mean()")
    seen, final = _run(_isolated_home, [_life(tmp_path)],
                       [_cell(cell), "FINAL(53.0)", _cell(recast),
                        "FINAL(Africa)"],
                       "Which continent had the lowest average life in 1990 in life.csv?")
    assert "53.0" in seen[0]
    assert "asks which continent" in seen[1] and "is a figure, not a continent" in seen[1]
    assert _offered(seen[1]) == recast
    assert "Africa" in seen[2]
    assert final == "Africa"


def test_the_min_of_a_grouped_result_becomes_its_idxmin(_isolated_home, tmp_path):
    cell = ('means = life.groupby("continent")["life"].mean()\n'
            'print(means.max())')
    seen, _ = _run(_isolated_home, [_life(tmp_path)], [_cell(cell), "FINAL(67.5)", "FINAL(x)"],
                   "Which continent has the highest average life in life.csv?")
    assert _offered(seen[1]) == cell.replace("means.max()", "means.idxmax()")


def test_a_figure_whose_recast_names_no_value_of_the_column_is_refused_without_an_offer(
        _isolated_home, tmp_path):
    """A recast is offered only when its result is a value of the asked column: the
    `idxmax` of an ungrouped column is a row label, not a continent, and the question
    names no direction to group by; nothing is offered, and the refusal still says what
    kind of answer the question asks for."""
    cell = 'print(life["life"].max())'
    seen, _ = _run(_isolated_home, [_life(tmp_path)], [_cell(cell), "FINAL(78)", "FINAL(x)"],
                   "Which continent is that value from in life.csv?")
    assert "is a figure, not a continent" in seen[1] and OFFER not in seen[1]


def test_a_name_for_which_thing_is_not_refused(_isolated_home, tmp_path):
    cell = 'print(life.groupby("continent")["life"].mean().idxmax())'
    seen, final = _run(_isolated_home, [_life(tmp_path)], [_cell(cell), "FINAL(Americas)"],
                       "Which continent has the highest average life in life.csv?")
    assert final == "Americas" and len(seen) == 1


def test_a_printed_row_label_is_offered_as_the_row_it_labels(_isolated_home, tmp_path):
    """seattle-coldest-day: `idxmin()` printed 706 and the model answered a date no output
    showed. The note now carries the cell recast to print the row, which holds the date."""
    (tmp_path / "weather.csv").write_text(
        "date,temp_min\n2013-12-06,-2.0\n2013-12-07,-7.1\n2013-12-08,-3.5\n")
    cell = 'min_day = weather["temp_min"].idxmin()\nprint(min_day)'
    recast = 'min_day = weather.loc[weather["temp_min"].idxmin()]\nprint(min_day)'
    seen, final = _run(_isolated_home, [tmp_path / "weather.csv"],
                       [_cell(cell), _cell(recast), "FINAL(2013-12-07)"],
                       "On what date was the lowest temp_min recorded in weather.csv?")
    assert "is the label of a row of `weather`" in seen[0]
    assert _offered(seen[0]) == recast
    assert "2013-12-07" in seen[1]
    assert final == "2013-12-07"


def test_recasts_keep_the_cell_byte_for_byte_around_the_change():
    code = "# été\nn = len(t[t.k == 'é'])  # rows\nprint(n)\n"
    (r,) = distinct_recasts(code, "country", "4")
    assert r.code == "# été\nn = t[t.k == 'é']['country'].nunique()  # rows\nprint(n)\n"
    assert r.guard == ("assert (len(t[t.k == 'é'])) == 4 and "
                       "(t[t.k == 'é']['country'].nunique()) != 4")
    (r,) = which_recasts("x = t['v'].sum()", "t", "region", "max")
    assert r.code == "x = t.groupby('region')['v'].sum().idxmax()"
    assert r.guard == ("assert str(t.groupby('region')['v'].sum().idxmax()) in "
                       "set(t['region'].astype(str))")
    assert which_recasts("x = t['v'].sum()", "t", "region", None) == []
    assert distinct_recasts("print(", "c", "1") == []


def test_the_direction_is_the_questions_or_none():
    assert direction("Which continent had the lowest average life expectancy?") == "min"
    assert direction("Which carrier flew the most flights?") == "max"
    assert direction("Which region had the highest and the lowest sales?") is None
    assert direction("Which country is in Europe?") is None


def _readings(tmp: Path) -> Path:
    """Hourly readings of two stations over three months: the south one is warmest in
    February, though its mean over all of them says nothing of months."""
    rows = ["timestamp,station,temp_c"]
    for month, (south, north) in {1: (5.0, 9.0), 2: (12.0, 3.0), 3: (7.0, 4.0)}.items():
        for hour in range(4):
            rows += [f"2025-{month:02d}-0{hour + 1}T0{hour}:00,south,{south}",
                     f"2025-{month:02d}-0{hour + 1}T0{hour}:30,north,{north}"]
    (tmp / "readings.csv").write_text("\n".join(rows) + "\n")
    return tmp / "readings.csv"


def test_which_month_never_grouped_by_month_is_refused_with_the_cell_grouped_by_it(
        _isolated_home, tmp_path):
    """The task suite's timeseries family: the mean over every reading of the station,
    then a month no output showed. The refusal offers the aggregate grouped by the month
    of the one date column, tried on a fork: it names February."""
    cell = 'print(readings[readings["station"] == "south"]["temp_c"].mean())'
    seen, final = _run(_isolated_home, [_readings(tmp_path)],
                       [_cell(cell), "FINAL(8.0)", "placeholder", "FINAL(February)"],
                       "Which month had the highest average temperature at the south station?")
    assert "8.0" in seen[0]
    assert "asks which month, and none of the cells you ran groups the rows by the month of " \
           "`timestamp`" in seen[1]
    offered = _offered(seen[1])
    assert offered.startswith("import pandas as pd\n") and ".dt.month_name()" in offered
    assert "groupby('month')['temp_c'].mean().idxmax()" in offered


def test_the_offered_month_grouping_names_the_right_month(_isolated_home, tmp_path):
    cell = 'print(readings[readings["station"] == "south"]["temp_c"].mean())'
    seen, _ = _run(_isolated_home, [_readings(tmp_path)],
                   [_cell(cell), "FINAL(8.0)", "FINAL(x)"],
                   "Which month had the highest average temperature at the south station?")
    offered = _offered(seen[1])
    seen, final = _run(_isolated_home, [_readings(tmp_path)],
                       [_cell(offered), "FINAL(February)"],
                       "Which month had the highest average temperature at the south station?")
    assert seen[0].rstrip().endswith("February") and final == "February"


def test_which_month_after_a_cell_that_grouped_by_month_is_not_refused(_isolated_home, tmp_path):
    cell = ('r = readings[readings["station"] == "south"].copy()\n'
            'r["m"] = r["timestamp"].str[:7]\nprint(r.groupby("m")["temp_c"].mean().idxmax())')
    seen, final = _run(_isolated_home, [_readings(tmp_path)], [_cell(cell), "FINAL(2025-02)"],
                       "Which month had the highest average temperature at the south station?")
    assert final == "2025-02" and len(seen) == 1


def test_the_closest_answered_by_the_smallest_is_offered_the_distance(_isolated_home, tmp_path):
    """The task suite's multistep family: "which region's median is closest to the overall
    mean" answered with `medians.idxmin()`. Refused, and offered the pick over the distance
    to the one number the cell names (a table or text name fails the trial's check)."""
    rows = ["region,value"] + [f"{r},{v}" for r, vs in
                               {"Lyon": (1, 2, 3), "Cork": (10, 11, 12), "Graz": (20, 21, 22)}.items()
                               for v in vs]
    (tmp_path / "orders.csv").write_text("\n".join(rows) + "\n")
    cell = ("median_values = orders.groupby('region')['value'].median()\n"
            "mean_value = orders['value'].mean()\n"
            "closest_region = median_values.idxmin()\nprint(closest_region)")
    recast = cell.replace("median_values.idxmin()", "(median_values - mean_value).abs().idxmin()")
    seen, final = _run(_isolated_home, [tmp_path / "orders.csv"],
                       [_cell(cell), "FINAL(Lyon)", _cell(recast), "FINAL(Cork)"],
                       "First compute the median value of each region, then the mean value over "
                       "all orders. Which region's median is closest to that overall mean?")
    assert "Lyon" in seen[0] and "none of the cells you ran measures a distance" in seen[1]
    assert _offered(seen[1]) == recast
    # the output, then the question asked last as the next step (rule Steps)
    assert seen[2].split("\n\n[Next, step")[0].rstrip().endswith("Cork") and final == "Cork"


def _sales(tmp: Path) -> Path:
    (tmp / "sales.csv").write_text(
        "date,category,units,unit_price\n2025-01-02,audio,2,50.0\n2025-02-03,books,30,5.0\n"
        "2025-03-04,audio,1,20.0\n2025-04-05,toys,3,12.5\n2025-05-06,books,10,4.0\n")
    return tmp / "sales.csv"


def test_a_name_read_off_a_printed_table_is_refused_with_the_pick(_isolated_home, tmp_path):
    """The task suite's groupby family: totals per category printed as a table, and the
    first row answered (verified: its name and figure were shown). Refused, and offered the
    cell with the pick of the maximum by the table's number column."""
    cell = ("rev = (sales['units'] * sales['unit_price']).groupby(sales['category']).sum()"
            ".reset_index()\nprint(rev)")
    pick = "print(rev.set_index('category').select_dtypes('number').iloc[:, 0].idxmax())"
    seen, final = _run(_isolated_home, [_sales(tmp_path)],
                       [_cell(cell), "FINAL(audio, with 120.0)", _cell(cell + "\n" + pick),
                        "FINAL(books)"],
                       "Which product category brought in the most revenue in sales.csv?")
    assert "audio" in seen[0] and "190.0" in seen[0]
    assert "none of the cells you ran picks it" in seen[1]
    assert _offered(seen[1]) == cell + "\n" + pick  # the Series pick failed its check
    assert seen[2].rstrip().endswith("books") and final == "books"


def test_a_name_a_cell_picked_is_not_refused(_isolated_home, tmp_path):
    cell = "print((sales['units'] * sales['unit_price']).groupby(sales['category']).sum().idxmax())"
    seen, final = _run(_isolated_home, [_sales(tmp_path)], [_cell(cell), "FINAL(books)"],
                       "Which product category brought in the most revenue in sales.csv?")
    assert final == "books" and len(seen) == 1


def test_the_first_row_of_value_counts_is_a_pick(_isolated_home, tmp_path):
    """`value_counts()` lists the most frequent first: reading its first row picks."""
    cell = "counts = sales['category'].value_counts()\nprint(counts)"
    seen, final = _run(_isolated_home, [_sales(tmp_path)], [_cell(cell), "FINAL(audio)"],
                       "Which category appears most often in sales.csv?")
    assert final == "audio" and len(seen) == 1
