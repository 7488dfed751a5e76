"""A failing cell corrected from the data (rlm.agent.repair, issue 60).

Scripted fenced-code model (like the local one), real kernels built by the composition
root; assertions on what reached the model and on what the offered cell computes.
"""

from __future__ import annotations

from pathlib import Path

from rlm.agent.context_files import load_context_files
from rlm.agent.rewrites import key_rewrites, name_rewrites
from rlm.app import build_agent
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore

OFFER = "A corrected cell ran without an error on a copy of your variables"


class _Fenced(ScriptedLLM):
    native_tools = False


def _cell(code: str) -> str:
    return f"```python\n{code}\n```"


def _offered(note: str) -> str:
    """The cell a note offers, or ""."""
    if OFFER not in note:
        return ""
    return note.split(OFFER, 1)[1].split("```python\n", 1)[1].rsplit("\n```]", 1)[0]


def _run(home: Path, files: list[Path], replies: list[str], question: str = "q?") -> list[str]:
    """Run the scripted replies on input files: what the model read after each reply."""
    llm = _Fenced(replies)
    config = Config(home=home, model="script:small", cell_timeout=60)
    session = SessionStore.create(home, model="script:small", task="t")
    agent = build_agent(session, config, llm=llm)
    with agent:
        load_context_files(agent, files)
        list(agent.run(question))
    return [str(call[-1]["content"]) for call in llm.calls[1:]]


def _sales(tmp: Path) -> Path:
    rows = ["date,category,units,unit_price", "2025-01-02,audio,2,50.0",
            "2025-02-03,books,10,5.0", "2025-03-04,audio,1,80.0", "2025-04-05,toys,3,12.5"]
    (tmp / "sales.csv").write_text("\n".join(rows) + "\n")
    return tmp / "sales.csv"


def test_a_series_grouped_by_a_column_of_its_table_is_offered_grouped_by_that_column(
        _isolated_home, tmp_path):
    """The task suite's 1.5B model: `revenue = sales.units * sales.unit_price` then
    `revenue.groupby("category")`, sent five more times after the note "use the DataFrame".
    The offered cell groups by `sales['category']` and computes the right totals."""
    cell = ('revenue = sales["units"] * sales["unit_price"]\n'
            'print(revenue.groupby("category").sum().to_dict())')
    fixed = cell.replace('groupby("category")', "groupby(sales['category'])")
    first, second = _run(_isolated_home, [_sales(tmp_path)],
                         [_cell(cell), _cell(fixed), "FINAL(audio)"])
    assert "KeyError: 'category'" in first
    assert _offered(first) == fixed
    assert "\n" + "{'audio': 180.0, 'books': 50.0, 'toys': 37.5}" in second  # 180 for audio, 50 for books, 37.5 for toys


def test_a_column_of_another_table_is_joined_in_on_their_shared_key(_isolated_home, tmp_path):
    """`orders.groupby('city')` where `city` is in `customers`: the offer joins it in on
    `customer_id`, many-to-one, and sums the right amounts."""
    (tmp_path / "orders.csv").write_text(
        "order_id,customer_id,amount\n1,10,5\n2,11,7\n3,10,4\n4,12,1\n")
    (tmp_path / "customers.csv").write_text("customer_id,city\n10,Ghent\n11,Split\n12,Split\n")
    cell = 'print(orders.groupby("city")["amount"].sum().to_dict())'
    fixed = cell.replace("orders.groupby", "orders.merge(customers[['customer_id', 'city']], "
                         "on='customer_id', how='left', validate='many_to_one').groupby")
    first, second = _run(_isolated_home, [tmp_path / "orders.csv", tmp_path / "customers.csv"],
                         [_cell(cell), _cell(fixed), "FINAL(Ghent)"])
    assert _offered(first) == fixed
    assert "\n" + "{'Ghent': 9, 'Split': 8}" in second


def test_a_join_that_would_repeat_rows_is_not_offered(_isolated_home, tmp_path):
    """The same cell where `customers` lists a customer twice: the join would count that
    customer's orders twice. pandas refuses it in the trial, so nothing is offered; the
    note on where the column is stands."""
    (tmp_path / "orders.csv").write_text("order_id,customer_id,amount\n1,10,5\n2,11,7\n")
    (tmp_path / "customers.csv").write_text("customer_id,city\n10,Ghent\n10,Split\n11,Split\n")
    [first] = _run(_isolated_home, [tmp_path / "orders.csv", tmp_path / "customers.csv"],
                   [_cell('print(orders.groupby("city")["amount"].sum())'), "FINAL(x)"])
    assert "`'city'` is a column of the DataFrame `customers`" in first
    assert OFFER not in first


def test_a_series_whose_labels_are_not_the_tables_gets_no_offer(_isolated_home, tmp_path):
    """A Series with its own index (not computed from `sales`): grouping it by
    `sales['category']` would align unrelated rows by label and still run. The trial checks
    the labels line up; they do not, so nothing is offered."""
    cell = ("import pandas as pd\nscores = pd.Series([1.0, 2.0, 3.0], index=[3, 2, 1])\n"
            "print(scores.groupby('category').sum())")
    [first] = _run(_isolated_home, [_sales(tmp_path)], [_cell(cell), "FINAL(x)"])
    assert "KeyError: 'category'" in first
    assert OFFER not in first


def test_a_column_spelled_unlike_the_data_is_offered_in_the_datas_spelling(
        _isolated_home, tmp_path):
    cell = 'print(sales.groupby("Category")["Unit Price"].max().to_dict())'
    """Every column name the cell spells unlike the data is corrected at once (case, spaces,
    underscores); a name only close to a column (difflib) is corrected when it is the one
    the error names."""
    fixed = "print(sales.groupby('category')['unit_price'].max().to_dict())"
    first, second = _run(_isolated_home, [_sales(tmp_path)],
                         [_cell(cell), _cell(fixed), "FINAL(done)"])
    assert "KeyError" in first
    assert _offered(first) == fixed
    assert "{'audio': 80.0, 'books': 5.0, 'toys': 12.5}" in second
    [near] = key_rewrites("print(sales['untis'].sum())", "untis", [("sales", ["units"])])
    assert near.code == "print(sales['units'].sum())"


def test_an_invented_table_name_is_offered_as_the_input_table(_isolated_home, tmp_path):
    first, second = _run(_isolated_home, [_sales(tmp_path)],
                         [_cell("print(df['units'].sum())"), _cell("print(sales['units'].sum())"),
                          "FINAL(16)"])
    assert "NameError: name 'df' is not defined" in first
    assert _offered(first) == "print(sales['units'].sum())"
    assert "\n" + "16" in second


def test_a_rewrite_that_still_fails_is_not_offered(_isolated_home, tmp_path):
    """The corrected name makes the cell reach its next error: no offer (an offer is a
    cell that ran whole)."""
    cell = 'print(df["units"].sum() + undefined_total)'
    [first] = _run(_isolated_home, [_sales(tmp_path)], [_cell(cell), "FINAL(x)"])
    assert "NameError: name 'df' is not defined" in first
    assert OFFER not in first


def test_rewrites_keep_the_cell_byte_for_byte_around_the_change():
    """Offsets are UTF-8 bytes (ast's): text before the change with non-ASCII characters
    stays as written; a cell that is not Python (a magic) has no rewrite."""
    code = "# Größe je Kategorie — «revenue»\nprint(revenue.groupby('category').sum())\n"
    [r] = key_rewrites(code, "category", [("sales", ["category", "units"])])
    assert r.code == ("# Größe je Kategorie — «revenue»\n"
                      "print(revenue.groupby(sales['category']).sum())\n")
    assert r.guard == "assert revenue.index.equals(sales.index)"
    assert key_rewrites("%time x.groupby('a')", "a", [("t", ["a"])]) == []
    assert name_rewrites("df = 1\nprint(df)", "df", ["sales"], {"sales"},
                         [("sales", ["a"])], None) == []  # assigned in the cell: not missing


def test_the_checks_an_offer_rests_on_are_what_keep_it_out(_isolated_home, tmp_path):
    """The guard switched off: the misaligned grouping and the row-repeating join both run
    without an error in a trial, so only the label check and `validate=` keep them from
    being offered."""
    (tmp_path / "orders.csv").write_text("order_id,customer_id,amount\n1,10,5\n2,11,7\n")
    (tmp_path / "customers.csv").write_text("customer_id,city\n10,Ghent\n10,Split\n11,Split\n")
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    agent = build_agent(session, config, llm=_Fenced(["FINAL(x)"]))
    with agent:
        load_context_files(agent, [tmp_path / "orders.csv", tmp_path / "customers.csv"])
        agent.executor.execute("import pandas as pd\nscores = pd.Series([1.0, 2.0], index=[5, 6])")
        frames = [("orders", ["order_id", "customer_id", "amount"]),
                  ("customers", ["customer_id", "city"])]
        [grouped] = key_rewrites("print(scores.groupby('city').sum())", "city", frames)
        [joined] = key_rewrites("print(orders.groupby('city')['amount'].sum())", "city", frames)
        unguarded = joined.code.replace(", validate='many_to_one'", "")
        runs = agent.executor.trial([grouped.code, f"{grouped.code}\n{grouped.guard}",
                                     unguarded, joined.code])
    assert [r["status"] for r in runs] == ["ok", "error", "ok", "error"]
    assert "MergeError" in str(runs[3].get("error"))


def test_a_resample_without_a_datetime_index_is_mended_step_by_step(_isolated_home, tmp_path):
    """The task suite's timeseries questions: `readings[...].resample('M').mean()` on a
    table whose dates are text fails three ways in turn (pandas 3's 'ME', no DatetimeIndex,
    a mean over the station names); the model rewrote the cell four times and answered a
    month no cell printed. Each trial's new error is rewritten again until the cell runs."""
    rows = ["date,station,temp_c"] + [f"2025-{m:02d}-{d:02d},{s},{t}" for m, d, s, t in [
        (1, 3, "north", 4.0), (1, 20, "north", 6.0), (2, 2, "north", 9.5), (2, 9, "south", 1.0),
        (3, 1, "north", 7.0)]]
    (tmp_path / "readings.csv").write_text("\n".join(rows) + "\n")
    cell = ("north = readings[readings['station'] == 'north'].resample('M').mean()\n"
            "print(north['temp_c'].idxmax().month)")
    first, = _run(_isolated_home, [tmp_path / "readings.csv"], [_cell(cell), "FINAL(2)"])
    offered = _offered(first)
    assert offered == ("north = readings[readings['station'] == 'north'].assign(**{'date': "
                       "lambda d: pd.to_datetime(d['date'])}).resample('ME', on='date')"
                       ".mean(numeric_only=True)\nprint(north['temp_c'].idxmax().month)")
    assert "'ME' for 'M', as the error says; resampled on the column 'date', parsed as dates " \
           "first; `.mean(numeric_only=True)`: text columns left out" in first


def test_reductions_gain_numeric_only_and_literals_take_the_replacement_the_error_names():
    from rlm.agent.rewrites import Scope, for_error

    scope = Scope([("t", [("a", "str"), ("b", "int64")])], ["t"], {"t"})
    [r] = for_error("x = t.groupby('a').mean()\ny = t.mean(axis=0)\nz = t.sum()",
                    "TypeError: dtype 'str' does not support operation 'mean'", scope)
    assert r.code == ("x = t.groupby('a').mean(numeric_only=True)\n"
                      "y = t.mean(axis=0, numeric_only=True)\nz = t.sum()")
    [r] = for_error("t.resample('H', on='d').sum()",
                    "ValueError: Invalid frequency: H. Failed to parse with error message: "
                    "ValueError(\"'H' is no longer supported for offsets. Please use 'h' "
                    "instead.\")", scope)
    assert r.code == "t.resample('h', on='d').sum()"
    assert for_error("print(1)", "ZeroDivisionError: division by zero", scope) == []


def test_a_value_used_as_an_index_label_is_looked_up_by_its_column(_isolated_home, tmp_path):
    """The everyday suite's flights question: `airlines.loc[worst, 'name']` with `worst`
    a carrier code ('F9'), a value of the column `carrier`, not an index label; the model
    sent it five times. The kernel finds the column that holds the value; the offer looks
    it up by that column."""
    codes = [f"{a}{b}" for a in "ABCDEFGH" for b in "XYZ"]  # too many for the listing
    (tmp_path / "airlines.csv").write_text(
        "carrier,name\n" + "\n".join(f"{c},Airline {c}" for c in codes) + "\n")
    cell = "worst = 'CY'\nprint(airlines.loc[worst, 'name'])"
    fixed = "worst = 'CY'\nprint(airlines.set_index('carrier').loc[worst, 'name'])"
    first, second = _run(_isolated_home, [tmp_path / "airlines.csv"],
                         [_cell(cell), _cell(fixed), "FINAL(Airline CY)"])
    assert "KeyError: 'CY'" in first
    assert _offered(first) == fixed
    assert "\nAirline CY" in second


def test_a_filtered_series_of_the_table_is_grouped_by_the_tables_column(_isolated_home, tmp_path):
    """The task suite's groupby seed 2: `revenue` computed in the cell from a filtered
    `sales` (the 2025 rows) has a subset of the table's labels; grouping it by
    `sales['category']` aligns on those labels, so the offer stands, and it sums 2025 only."""
    (tmp_path / "sales.csv").write_text(
        "date,category,units,unit_price\n2024-05-01,books,100,5.0\n2025-01-02,audio,2,50.0\n"
        "2025-02-03,books,10,5.0\n2025-03-04,audio,1,80.0\n")
    cell = ("s = sales[sales['date'].str.contains('2025')]\n"
            "revenue = sales[sales['date'].str.contains('2025')]['units'] * "
            "sales[sales['date'].str.contains('2025')]['unit_price']\n"
            "print(revenue.groupby('category').sum().to_dict())")
    fixed = cell.replace("groupby('category')", "groupby(sales['category'])")
    first, second = _run(_isolated_home, [tmp_path / "sales.csv"],
                         [_cell(cell), _cell(fixed), "FINAL(audio)"])
    assert _offered(first) == fixed
    assert "{'audio': 180.0, 'books': 50.0}" in second


def test_a_filter_grouped_around_a_bare_and_is_offered_with_each_comparison_parenthesised():
    """The task suite's groupby seed 4: `sales['date'] >= '2025-01-01' & sales['date'] <=
    '2025-12-31'` (a TypeError); the note said where the parentheses go and the model
    answered from the unfiltered cell. The rewrite is read from the syntax tree: chains of
    any length, `|` as `&`, and a filter already parenthesised is left alone."""
    from rlm.agent.rewrites import Scope, for_error

    scope = Scope([], [], set())
    err = "TypeError: unsupported operand type(s) for &: 'str' and 'StringArray'"
    cases = {
        "f = s[s['d'] >= '2025-01-01' & s['d'] <= '2025-12-31']":
            "f = s[(s['d'] >= '2025-01-01') & (s['d'] <= '2025-12-31')]",
        "m = df[df.a == 1 & df.b == 2 | df.c > 3]": "m = df[(df.a == 1) & (df.b == 2) | (df.c > 3)]",
        "m = df[df['x'] == 'Größe' & df['y'] > 0]": "m = df[(df['x'] == 'Größe') & (df['y'] > 0)]",
    }
    for code, want in cases.items():
        assert [r.code for r in for_error(code, err, scope)] == [want]
    assert for_error("m = df[(df.a == 1) & (df.b == 2)]", err, scope) == []
    amb = "ValueError: The truth value of a Series is ambiguous. Use a.empty, a.bool()..."
    assert [r.code for r in for_error("m = df[df.a > 1 | df.b < 0]", amb, scope)] == \
        ["m = df[(df.a > 1) | (df.b < 0)]"]


def test_names_the_kernel_lists_are_spliced_into_code_only_when_they_are_identifiers():
    """The kernel is untrusted: a table name planted as `globals()['t; import os']` never
    becomes code in an offered cell; column names are written as literals."""
    from rlm.agent.rewrites import Scope, for_error

    def where(_value: str) -> list[dict[str, str]]:
        return [{"table": "t; import os", "column": "c", "value": "'F9'"}]

    scope = Scope.of([("sales", [("c'); import os; ('", "str")]), ("x;y", [("c", "str")])],
                     ["sales", "x;y"], {"sales"}, where)
    assert scope.columns() == [("sales", ["c'); import os; ('"])] and scope.names == ["sales"]
    assert for_error("print(t.loc['F9'])", "KeyError: 'F9'", scope) == []
    [r] = for_error("print(x.groupby(\"c'); import os; ('\").sum())",
                    "KeyError: \"c'); import os; ('\"", scope)
    assert "sales[\"c'); import os; ('\"]" in r.code  # a string literal, not code


FIRST_LINES = "The first lines of your cell, corrected, ran without an error"


def test_a_cell_whose_later_line_still_fails_is_offered_its_corrected_first_lines(
        _isolated_home, tmp_path):
    """The task suite's groupby seed 3: the Series grouped by a column name, then
    `counts['units']` after `reset_index` (no such column): the whole cell cannot be
    mended, so nothing was offered and the model sent it five times. Its first lines,
    corrected, run: they are offered with the value they bind printed, and the error the
    next line met."""
    (tmp_path / "sales.csv").write_text(
        "date,category,units,unit_price\n2024-05-01,books,100,5.0\n2025-01-02,audio,2,50.0\n"
        "2025-02-03,books,10,5.0\n2025-03-04,audio,1,80.0\n")
    head = ("revenue = sales[sales['date'].str.contains('2025')]['units'] * "
            "sales[sales['date'].str.contains('2025')]['unit_price']\n"
            "counts = revenue.groupby('category').sum().reset_index()\n")
    cell = head + "best = counts['category'].iloc[counts['units'].idxmax()]\nprint(best)"
    offer = head.replace("groupby('category')", "groupby(sales['category'])") + "print(counts)"
    first, second = _run(_isolated_home, [tmp_path / "sales.csv"],
                         [_cell(cell), _cell(offer), "FINAL(audio)"])
    assert FIRST_LINES in first and "failed with `KeyError: 'units'`" in first
    assert first.split("```python\n")[-1].rsplit("\n```]", 1)[0] == offer
    assert "audio" in second and "180.0" in second


def test_a_cell_whose_failing_line_cannot_be_mended_gets_no_first_lines_offer(
        _isolated_home, tmp_path):
    """The lines that ran before the error run in a trial too, but hold no change: they
    are not offered."""
    (tmp_path / "sales.csv").write_text("date,category,units\n2025-01-02,audio,2\n")
    cell = "x = sales['units'].sum()\ny = no_such_thing_anywhere + 1\nprint(x, y)"
    (first,) = _run(_isolated_home, [tmp_path / "sales.csv"], [_cell(cell), "FINAL(2)"])
    assert FIRST_LINES not in first and OFFER not in first



def _quarters(tmp: Path) -> list[Path]:
    """Four tables, one a quarter, the same columns; store S2 is best in q3 alone."""
    paths = []
    for q in (1, 2, 3, 4):
        path = tmp / f"q{q}.csv"
        path.write_text(f"store,revenue\nS1,10.0\nS2,{60.0 if q == 3 else 5.0}\nS1,12.0\n")
        paths.append(path)
    return paths


def test_a_column_the_stack_of_tables_dropped_is_given_from_their_names(_isolated_home,
                                                                      tmp_path):
    """The long-run quarters task: the quarter of a row is which table it came from, and
    `pd.concat` drops it (`KeyError: 'quarter'` in every pass). The corrected cell gives
    each table the column, valued by its name, and runs."""
    whole = ("combined = pd.concat([q1, q2, q3, q4], ignore_index=True)\n"
             "best = combined[combined['store'] == 'S2'].groupby('quarter')['revenue'].sum()\n"
             "print(best.idxmax())")
    fixed = whole.replace("[q1, q2, q3, q4]", "[q1.assign(quarter='q1'), q2.assign("
                          "quarter='q2'), q3.assign(quarter='q3'), q4.assign(quarter='q4')]")
    seen = _run(_isolated_home, _quarters(tmp_path), [_cell(whole), _cell(fixed), "FINAL(q3)"],
                "S2's best quarter?")
    assert "KeyError" in seen[0] and _offered(seen[0]) == fixed
    assert "q3" in seen[1] and "Error" not in seen[1]


def test_no_source_column_where_the_tables_differ_or_have_it():
    from rlm.agent.rewrites import Scope, for_error

    code = "c = pd.concat([q1, q2])\nprint(c.groupby('quarter').size())"
    for frames in ([("q1", [("store", "str")]), ("q2", [("store", "str"), ("city", "str")])],
                   [("q1", [("quarter", "str")]), ("q2", [("quarter", "str")])]):
        scope = Scope.of(frames, ["q1", "q2", "c"], {"q1", "q2"})
        assert not [r for r in for_error(code, "KeyError: 'quarter'", scope)
                    if ".assign(" in r.code]
    same = [("q1", [("store", "str")]), ("q2", [("store", "str")])]
    assert [r for r in for_error(code, "KeyError: 'quarter'", Scope.of(same, ["q1", "q2"], set()))
            if ".assign(quarter='q1')" in r.code]
