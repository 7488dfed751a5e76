"""What a goal's words declare of a named file, checked against the file before the goal
completes (rlm.agent.policy.file_shape): its columns, a row for every value of a column the
input lists, an order. The phrasings here are not the long-run suite's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kernel_ext.columns import column_lines
from rlm.agent.policy import file_shape
from rlm.agent.policy.file_shape import Columns, Covers, Order, declared, unmet


def describe(**tables: pd.DataFrame) -> list[str]:
    """The input description the host posts (kernel_ext.columns), one table each."""
    return [f"- {name}: pandas.DataFrame\n  columns (dtype: values):\n"
            + "\n".join(column_lines(df)) for name, df in tables.items()]


PETS = pd.DataFrame({"species": ["cat", "dog", "hamster", "parrot"] * 5,
                     "clinic": ["North", "South"] * 10, "weight": range(20),
                     "owner": [f"o{i}" for i in range(20)]})


def test_columns_are_read_up_to_the_word_that_ends_the_list():
    inputs = describe(pets=PETS)
    cases = {
        "Save summary.tsv with columns: species, mean_weight and visits.":
            ("species", "mean_weight", "visits"),
        "write out/w.csv holding the columns `species`,`heaviest`, largest first":
            ("species", "heaviest"),
        "out/w.csv: column names species, n (sorted).": ("species", "n"),
    }
    for text, names in cases.items():
        file = "summary.tsv" if "tsv" in text else "out/w.csv"
        got = [s for s in declared("", text, [file], inputs) if isinstance(s, Columns)]
        assert got == [Columns(file, names)], text
    # one name is not a list; a column "for each species" names none
    for text in ("Write w.csv with a column for each species.", "w.csv has the column total."):
        assert not [s for s in declared("", text, ["w.csv"], inputs) if isinstance(s, Columns)]


def test_a_row_for_every_value_is_declared_only_where_the_words_say_so():
    inputs = describe(pets=PETS)
    covers = {
        ("", "List the heaviest pet in notes.md, one line for each species."): "species",
        ("every species' weight is in w.csv", ""): "species",
        ("w.csv has the mean weight of all the clinics", ""): "clinic",
        ("w.csv gives each clinic's heaviest pet", ""): "clinic",
    }
    for (goal, question), column in covers.items():
        file = "notes.md" if "notes.md" in question else "w.csv"
        got = [s for s in declared(goal, question, [file], inputs) if isinstance(s, Covers)]
        assert [c.column for c in got] == [column], (goal, question)
        assert set(got[0].values) == set(PETS[column])
    nothing = [
        ("w.csv lists every species whose mean weight is above 9", ""),
        ("w.csv lists every species in the North clinic", ""),
        ("w.csv gives the mean weight of each species in North", ""),  # a stated condition
        ("", "Compute each species' mean weight, find the heaviest and write w.csv."),
        ("w.csv names every owner", ""),  # 20 owners: not listed in full
        ("w.csv covers every colour", ""),  # no such column
    ]
    for goal, question in nothing:
        assert not [s for s in declared(goal, question, ["w.csv"], inputs)
                    if isinstance(s, Covers)], (goal, question)


def test_an_order_is_checked_on_the_column_the_words_name():
    text = "species,n,mean_weight\ncat,5,3.5\ndog,5,9.1\nhamster,5,1.0\n"
    down = Order("w.csv", True, "from largest to smallest mean weight")
    assert "9.1 comes after 3.5" in unmet(down, text)
    assert unmet(Order("w.csv", False, "in ascending order"), text) is None  # n ties, 2 numbers
    assert unmet(Order("w.md", False, "fewest visits first"), "a: 1\nb: 3\nc: 3\n") is None
    assert "1 comes after 3" in unmet(Order("w.md", False, "fewest first"), "a: 3\nb: 1\n")
    assert unmet(Order("w.md", True, "most first"), "/home\n/cart\n") is None  # no numbers
    log = ("2024-05-01T00:13:00 [ERROR] billing: request 100013 handled in 192 ms\n"
           "2024-05-01T02:58:00 [ERROR] upload: request 100058 handled in 691 ms\n")
    assert unmet(Order("e.txt", True, "most errors first"), log) is None  # not name: count


def test_values_are_found_as_cells_of_a_table_and_whole_words_of_a_text():
    pets = Covers("w.csv", "every species'", "species", ("cat", "dog", "hamster", "parrot"))
    assert unmet(pets, "species,kg\nCat,1\ndog,2\nhamster,3\nparrot,4\n") is None
    msg = unmet(pets, "species,kg\ncatdog,1\nhamster,3\n")
    assert "leaves out 3 of them: 'cat', 'dog', 'parrot'" in msg
    # a header renamed over other columns: the values sit under another name
    moved = unmet(pets, "species,kg\n0,cat\n1,dog\n2,hamster\n3,parrot\n")
    assert "w.csv (its column 'species') leaves out 4 of them" in moved
    assert unmet(pets, "kind,kg\ncat,1\ndog,2\nhamster,3\nparrot,4\n") is None  # no such column
    text = Covers("w.md", "one line for each species", "species", pets.values)
    assert unmet(text, "- cat: 4\n- dog: 9\n- hamster: 1\n- parrot: 2\n") is None
    assert "'parrot'" in unmet(text, "- cat: 4\n- dog: 9\n- hamster: 1\n- parrots: 2\n")


FARES = [("Oslo", 30), ("Oslo", 33), ("Bergen", 20), ("Tromso", 25), ("Bergen", 22),
         ("Stavanger", 18)]
WRITE = ("import pandas as pd\ntrips = pd.read_csv('trips.csv')\n{make}\n"
         "table.to_csv('fares.csv', index=False)\nprint(open('fares.csv').read())")
QUESTION = ("trips.csv has each trip's city and fare. Compute each city's mean fare and write "
            "fares.csv with the columns city,mean_fare, highest first.")
GOAL = "fares.csv gives every city's mean fare, highest first"


def run_fares(tmp_path, replies):
    from tests.test_line_conditions import rlm
    from tests.test_stuck import entries, fenced, user_texts

    (tmp_path / "trips.csv").write_text("city,fare\n" + "".join(f"{c},{f}\n" for c, f in FARES))
    out = rlm("run", QUESTION, "--model", fenced(tmp_path / "s.json", replies), "--goal", GOAL,
              "--autonomous", "--gate", "head -1 fares.csv | grep -q '^city,mean_fare'",
              "--max-turns", "14", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    states = [e["data"]["goal"] for e in es if e.get("custom_type") == "thread_goal_state"]
    return res, user_texts(es), states[-1]["status"], out


def _replies():
    from tests.test_stuck import block

    mean = "trips.groupby('city', as_index=False)['fare'].mean().rename(columns={'fare': 'mean_fare'})"
    claim = "FINAL(fares.csv is correct)"
    return [
        block(WRITE.format(make=f"m = {mean}\ntable = m.head(1).assign(top=m.mean_fare)")), claim,
        claim,  # again over the same file: told again, not shown it again
        block(WRITE.format(make=f"table = {mean}.head(1)")), claim,
        block(WRITE.format(make=f"table = {mean}.sort_values('mean_fare')")), claim,
        block(WRITE.format(make=f"table = {mean}.sort_values('mean_fare', ascending=False)")),
        "FINAL(Oslo: 31.5)", "FINAL(Oslo: 31.5)", "FINAL(Oslo: 31.5)"]


@pytest.mark.timeout(180)
def test_a_goal_completes_only_when_its_file_holds_what_its_words_declare(tmp_path):
    res, seen, status, out = run_fares(tmp_path, _replies())
    said = "\n".join(seen)
    assert said.count("with the columns city,mean_fare, but its header is city,mean_fare,top") == 2
    assert said.count("(fares.csv is as it was when you were shown it.)") == 1
    assert said.count("city,mean_fare,top\nBergen,21.0,21.0\n</file>") == 1
    assert "leaves out 3 of them: 'Oslo', 'Stavanger', 'Tromso'" in said
    assert "asks fares.csv to list the highest first, but 21 comes after 18" in said
    assert status == "complete", (res, said[-3000:], out.stderr[-2000:])
    assert (tmp_path / "fares.csv").read_text().splitlines()[:2] == ["city,mean_fare", "Oslo,31.5"]


@pytest.mark.timeout(180)
def test_without_the_shape_check_the_wrong_file_completes_the_goal(tmp_path, monkeypatch):
    """The guard switched off: the first claim over a one-row file with an extra column
    completes the goal once its content was shown (what the long-run suite measured)."""
    monkeypatch.setattr(file_shape, "declared", lambda *a, **k: [])
    replies = _replies()
    res, seen, status, _ = run_fares(tmp_path, replies[:2] + replies[2:])
    assert status == "complete"
    assert (tmp_path / "fares.csv").read_text().splitlines() == ["city,mean_fare,top", "Bergen,21.0,21.0"]


@pytest.mark.timeout(180)
def test_a_run_without_a_goal_is_told_once_what_its_file_lacks(tmp_path):
    """No goal: the answer rules ask the same of a file the question names that a cell
    wrote, once per run and file; a file the cells did not write (the input) is not theirs
    to judge."""
    from tests.test_line_conditions import rlm
    from tests.test_stuck import block, entries, fenced, user_texts

    (tmp_path / "trips.csv").write_text("city,fare\n" + "".join(f"{c},{f}\n" for c, f in FARES))
    mean = "trips.groupby('city', as_index=False)['fare'].mean().rename(columns={'fare': 'mean_fare'})"
    replies = [block(WRITE.format(make=f"table = {mean}.sort_values('mean_fare')")),
               "FINAL(Stavanger: 18.0)",
               block(WRITE.format(make=f"table = {mean}.sort_values('mean_fare', ascending=False)")),
               "FINAL(Oslo: 31.5)"]
    out = rlm("run", "Using trips.csv, write fares.csv with the columns city,mean_fare, the "
              "highest mean fare first. Which city is first?", "--model",
              fenced(tmp_path / "s.json", replies), "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    said = "\n".join(user_texts(entries(res["session_path"])))
    assert said.count("asks fares.csv to list the highest first, but 21 comes after 18") == 1
    assert res["final"] == "Oslo: 31.5", (res, said[-2000:])
    # the refusal is given once: a file left wrong is then answered as it is
    other = tmp_path / "other"
    other.mkdir()
    (other / "trips.csv").write_text((tmp_path / "trips.csv").read_text())
    replies = [block(WRITE.format(make=f"table = {mean}.sort_values('mean_fare')")),
               "FINAL(Stavanger: 18.0)", block("print(1)"), "FINAL(Stavanger: 18.0)"]
    out = rlm("run", "Write fares.csv from trips.csv with the columns city,mean_fare, "
              "highest first.", "--model", fenced(other / "s2.json", replies), "--json",
              cwd=other)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    said = "\n".join(user_texts(entries(res["session_path"])))
    assert said.count("to list the highest first") == 1 and res["final"] == "Stavanger: 18.0"


def test_a_json_file_has_the_keys_of_the_object_the_words_show():
    inputs = describe(pets=PETS)
    text = "Find the heaviest pet and save it to top.json as {'species': ..., 'kg': 0.0}."
    assert declared("", text, ["top.json"], inputs) == [Columns("top.json", ("species", "kg"))]
    shape = Columns("top.json", ("species", "kg"))
    assert unmet(shape, '{"kg": 9.5, "Species": "dog"}') is None
    assert unmet(shape, '[{"species": "dog", "kg": 9}, {"species": "cat", "kg": 3}]') is None
    assert "holds the keys species, kg, n" in unmet(shape, '{"species": "dog", "kg": 9, "n": 1}')
    assert "is not JSON" in unmet(shape, "species=dog")
    assert "holds str" in unmet(shape, '"dog"')
    # "fields" and "header" list a table's columns too
    got = declared("", "Write w.csv with the fields species, kg.", ["w.csv"], inputs)
    assert got == [Columns("w.csv", ("species", "kg"))]


def test_integer_values_may_be_spelled_another_way_but_not_left_out():
    months = Covers("m.md", "every month's", "month", ("1", "2", "3"))
    assert unmet(months, "January: 4\nFebruary: 5\nMarch: 1\n") is None
    assert "leaves out 2 of them: '2', '3'" in unmet(months, "1: 4\n")


def test_a_header_fix_names_the_written_table_and_runs_as_sent(tmp_path):
    """The refusal's fix names what the file was written from (rlm.agent.policy.written),
    never a placeholder the model would send as it is; sent as it stands, it writes the
    declared header from a table with extra columns, or from a Series whose index is the
    first column. A column the table lacks is asked for, not selected or renamed into."""
    from rlm.agent.policy.written import Written

    w = Written()
    w.cell("import pandas as pd\nout = 1\nby.round(2).to_csv('r.csv')", {"wrote": {"3": ["r.csv"]}})
    w.cell("pd.DataFrame({'a': [1]}).to_csv('p.csv')", {"wrote": {"1": ["p.csv"]}})
    assert (w.writer("r.csv"), w.writer("p.csv"), w.writer("none.csv")) == ("by", None, None)
    shape = Columns("r.csv", ("region", "rate"))
    assert "table[" not in unmet(shape, "rate,region,top\n1,N,2\n")  # no name: in words
    written = {  # what was written, its header as to_csv wrote it
        "by": (pd.Series([0.5, 0.25], index=pd.Index(["N", "S"], name="region")), "region,0"),
        "wide": (pd.DataFrame({"top": [1, 2], "rate": [0.5, 0.25], "region": ["N", "S"]}),
                 "top,rate,region"),
        "keyed": (pd.DataFrame({"rate": [0.5, 0.25], "x": [1, 2]},
                               index=pd.Index(["N", "S"], name="region")), "region,rate,x")}
    for name, (value, header) in written.items():
        message = unmet(shape, f"{header}\n", writer=name)
        fix = message.split("(`", 1)[1].split("`)", 1)[0]
        assert fix.startswith(f"{name}."), message
        path = tmp_path / name
        path.mkdir()
        exec(fix.replace("'r.csv'", repr(str(path / "r.csv"))), {name: value})  # noqa: S102
        assert (path / "r.csv").read_text().splitlines() == ["region,rate", "N,0.5", "S,0.25"]
    lacking = unmet(Columns("r.csv", ("region", "total", "top")), "region,total\n", writer="t")
    assert "It has no column top: compute it" in lacking and "`" not in lacking


def test_a_share_lies_between_0_and_1_or_a_percentage_between_0_and_100():
    def shares(text: str) -> list:
        return [s for s in declared("", text, ["out.csv"], []) if isinstance(s, file_shape.Share)]

    assert [s.high for s in shares("Write out.csv with the proportion of delayed trains "
                                   "on each line.")] == [1.0]
    assert [s.high for s in shares("out.csv: the fraction of refunds per shop, as a "
                                   "percentage.")] == [100.0]
    assert shares("Write out.csv with each brand's change in market share.") == []
    assert shares("Write out.csv with the mean price per shop.") == []
    assert shares("Write out.csv with the mean price per shop and share it with the team.") == []
    assert [s.phrase for s in shares("out.csv gives each shop's share of refunds, rounded.")] \
        == ["share of refunds"]
    share = file_shape.Share("out.csv", "proportion of delayed trains", 1.0)
    msg = unmet(share, "line,trains,delayed_rate\nA,120,3.5\nB,80,0.25\n")
    assert "its column 'delayed_rate' holds 3.5" in msg and "from 0 to 1" in msg
    assert unmet(share, "line,trains,delayed_rate\nA,120,0.5\nB,80,0.25\n") is None  # counts
    assert unmet(share, "line,share\nA,29%\nB,71%\n") is None  # written as a percent
    text = file_shape.Share("out.txt", share.phrase, 1.0)
    assert unmet(text, "A: 0.4\nB: 0.6\n") is None and "holds 40" in unmet(text, "A: 40\nB: 60\n")
    assert unmet(share, "line,a,b\nA,1,2\n") is None  # which column is not clear: no verdict
