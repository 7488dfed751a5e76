"""A task that names a file in the working directory (`rlm run "which region grew fastest
in sales.csv"`, the product's own example) gets it loaded like `--context sales.csv`: the
model is told the variable and its columns instead of guessing them (the local model's
first cell read `sales.csv` and grouped by an `amount` column that does not exist)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rlm.agent import context_files
from rlm.agent.context_files import named_files
from tests import rlmcli
from tests.rlmcli import call, script

rlm = partial(rlmcli.rlm, check=True)

CSV = "region,revenue\neast,10\nwest,25\neast,7\n"


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_a_run_whose_task_names_a_file_gets_it_as_an_input(tmp_path, _isolated_home):
    (tmp_path / "sales.csv").write_text(CSV)
    s = script(tmp_path / "r.json", [
        call("top = sales.groupby('region').revenue.sum().idxmax()\nprint(top)"),
        call("final(top)")])
    out = rlm("run", "which region sold most in sales.csv?", "--model", s, "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "west" and res["verified"] is True
    entries = _entries(Path(res["session_path"]))
    ctx = [e for e in entries if e.get("custom_type") == "context_vars"]
    assert ctx and ctx[0]["data"]["names"] == ["sales"]
    assert ctx[0]["data"]["files"] == [str((tmp_path / "sales.csv").resolve())]
    assert "- sales: " in ctx[0]["content"] and "region" in ctx[0]["content"]
    options = [e for e in entries if e.get("custom_type") == "run_options"]
    assert options[-1]["data"]["named"] == [str((tmp_path / "sales.csv").resolve())]


def test_a_named_file_that_does_not_load_is_described_not_fatal(tmp_path, _isolated_home):
    """`--context broken.csv` fails the run (the user asked for it); a file the task only
    names is told to the model as not loaded, with pandas' reason, and the run goes on."""
    (tmp_path / "broken.csv").write_text("a,b\n1,2\n1,2,3,4\n")
    # (a literal answer is verified only once code reading the data has shown it: issue 58)
    s = script(tmp_path / "b.json", [call("print(open('broken.csv').readlines()[2].strip())"),
                                     call("final('1,2,3,4')")])
    out = rlm("run", "why does broken.csv not parse?", "--model", s, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "final"
    ctx = [e for e in _entries(Path(res["session_path"]))
           if e.get("custom_type") == "context_vars"]
    assert ctx[0]["data"]["names"] == []
    assert "Not loaded" in ctx[0]["content"] and "broken.csv: ParserError" in ctx[0]["content"]


def test_resume_and_chat_load_the_files_a_later_prompt_names(tmp_path, _isolated_home):
    (tmp_path / "sales.csv").write_text(CSV)
    (tmp_path / "costs.csv").write_text("region,cost\neast,4\nwest,30\n")
    s1 = script(tmp_path / "1.json", [call("final(str(len(sales)))")])
    res = json.loads(rlm("run", "rows in sales.csv?", "--model", s1, "--json",
                         cwd=tmp_path).stdout.strip().splitlines()[-1])
    s2 = script(tmp_path / "2.json", [call("final(str(costs.cost.sum() + len(sales)))")])
    out = rlm("resume", res["session_id"], "add the costs in costs.csv", "--model", s2,
              "--json", cwd=tmp_path)
    assert "loaded costs.csv (named in the prompt) as costs" in out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["final"] == "37"
    # chat: a message naming a file not loaded yet loads it before the model runs
    (tmp_path / "notes.txt").write_text("the east office moved")
    s3 = script(tmp_path / "3.json", [call("final(notes.split()[1])")])
    proc = rlm("chat", res["session_id"], "--model", s3, cwd=tmp_path,
               stdin="what does notes.txt say?\n/exit\n", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "loaded notes.txt (named in the prompt) as notes" in proc.stdout
    finals = [e for e in _entries(Path(res["session_path"])) if e.get("custom_type") == "final"]
    assert finals[-1]["data"]["answer"] == "east"


def test_a_detached_run_gets_the_named_file_too(tmp_path, _isolated_home):
    (tmp_path / "sales.csv").write_text(CSV)
    s = script(tmp_path / "d.json", [call("final(str(len(sales)))")])
    out = rlm("run", "how many rows has sales.csv", "--detach", "--model", s, "--json",
              cwd=tmp_path, process=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    path = Path(res["session_path"])
    rlm("attach", res["session_id"], cwd=tmp_path)  # returns when the worker's run has ended
    finals = [e for e in _entries(path) if e.get("custom_type") == "final"]
    rlm("stop", res["session_id"], cwd=tmp_path)
    assert finals and finals[0]["data"]["answer"] == "3"
    # loaded once: the worker's first prompt does not load what its start already did
    ctx = [e for e in _entries(path) if e.get("custom_type") == "context_vars"]
    assert len(ctx) == 1 and ctx[0]["data"]["names"] == ["sales"]


def test_named_files_takes_existing_files_once_and_leaves_big_ones(tmp_path, monkeypatch):
    (tmp_path / "sales.csv").write_text(CSV)
    (tmp_path / "my notes.txt").write_text("hello")
    (tmp_path / "big.log").write_text("x" * 100)
    (tmp_path / ".env").write_text("KEY=1")
    (tmp_path / "data.d").mkdir()
    monkeypatch.setattr(context_files, "NAMED_FILE_LIMIT", 50)
    task = ('compare sales.csv, "my notes.txt" and big.log (sales.csv again); not '
            'missing.csv, .env or data.d.')
    load, big = named_files(task, tmp_path, [])
    assert load == [str(tmp_path / "sales.csv"), str(tmp_path / "my notes.txt")]
    assert big == ["big.log (0 MB)"]
    # a file already given with --context is not loaded twice
    load, _ = named_files(task, tmp_path, [str(tmp_path / "sales.csv")])
    assert load == [str(tmp_path / "my notes.txt")]
    # absolute paths are taken as they are
    load, _ = named_files(f"look at {tmp_path / 'sales.csv'}.", Path("/"), [])
    assert load == [str(tmp_path / "sales.csv")]


def test_no_quote_or_apostrophe_hides_a_named_file(tmp_path):
    # the long-run shipments task loaded orders.csv only: the apostrophes of "order's" and
    # "carrier's" were read as one quoted span around shipments.csv
    for name in ("orders.csv", "shipments.csv", "my notes.txt", "notes.txt", "a.json"):
        (tmp_path / name).write_text("x\n1\n")
    tasks = {
        "orders.csv has each order's date; shipments.csv has each carrier's name.":
            ["orders.csv", "shipments.csv"],
        "the students' marks in orders.csv and the teacher's list 'my notes.txt'":
            ["orders.csv", "my notes.txt"],
        "a 'quoted' word, then shipments.csv, then 'another' and `a.json`":
            ["shipments.csv", "a.json"],
        "it's a.json's twin: shipments.csv (don't skip orders.csv)":
            ["a.json", "shipments.csv", "orders.csv"],
    }
    for task, want in tasks.items():
        load, _ = named_files(task, tmp_path, [])
        assert load == [str(tmp_path / n) for n in want], task


def test_a_run_loads_every_file_its_task_names_between_possessives(tmp_path, _isolated_home):
    (tmp_path / "orders.csv").write_text("order_id,due\n1,3\n2,5\n")
    (tmp_path / "shipments.csv").write_text("order_id,carrier\n1,UPS\n2,DHL\n")
    s = script(tmp_path / "r.json", [call("final(len(shipments))")])
    out = rlm("run", "orders.csv has each order's due day; shipments.csv has each order's "
              "carrier. How many shipments?", "--model", s, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    ctx = [e for e in _entries(Path(res["session_path"])) if e.get("custom_type") == "context_vars"]
    assert ctx[0]["data"]["names"] == ["orders", "shipments"]
    assert res["final"] == "2"


PENGUINS = ("species,island,bill_mm,sex,tag\n"
            + "".join(f"{s},{i},{b},{x},t{n}\n" for n, (s, i, b, x) in enumerate(
                [("Adelie", "Dream", 39.1, "male")] * 5 + [("Gentoo", "Biscoe", 47.5, "female")] * 3
                + [("Chinstrap", "Dream", "", "")] * 2 + [("Adelie", "Torgersen", 36.7, "female")] * 20)))


def test_a_named_table_is_described_by_its_values(tmp_path, _isolated_home):
    """Issue 60: before its first cell the model sees what each column holds, so it filters
    with 'Adelie' (not 'adelie') and knows which values exist: the levels of few-valued
    columns (most frequent first, no counts: figures get copied as values), the range of
    numbers, whether values are missing; a column of
    distinct values is counted and exemplified, not listed."""
    (tmp_path / "penguins.csv").write_text(PENGUINS)
    s = script(tmp_path / "p.json", [call("n = int((penguins.species == 'Adelie').sum())\nprint(n)"),
                                     call("final(n)")])
    out = rlm("run", "how many Adelie penguins are in penguins.csv?", "--model", s, "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "25"
    [ctx] = [e for e in _entries(Path(res["session_path"]))
             if e.get("custom_type") == "context_vars"]
    text = ctx["content"]
    assert "- penguins: pandas.DataFrame, 30 rows x 5 columns" in text
    assert "species (str): 3 values: 'Adelie', 'Gentoo', 'Chinstrap'" in text
    assert "island (str): 3 values: 'Torgersen', 'Dream', 'Biscoe'" in text
    assert "bill_mm (float64): 36.7 .. 47.5; some values missing (NaN)" in text
    assert "sex (str): 2 values: 'female', 'male'; some values missing (NaN)" in text
    assert "tag (str): 30 distinct, e.g. 't0', 't1', 't2'" in text
    assert "'t29'" not in text  # not enumerated
