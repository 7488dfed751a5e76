"""The `rlm` command line, run as a user would, with script: models: through its entry
function in this process, and in a new process where that is the subject (tests/rlmcli.py)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import nbformat

from tests import rlmcli
from tests.rlmcli import call, script

rlm = partial(rlmcli.rlm, check=True)


def test_run_then_resume_in_a_new_process_restores_the_kernel(tmp_path):
    csv = tmp_path / "sales.csv"
    csv.write_text("region,revenue\neast,10\nwest,25\neast,7\n")
    first = script(tmp_path / "one.json", [
        call("totals = sales.groupby('region').revenue.sum()\nregions = (r for r in totals.index)\n"
             "print(totals.to_dict())"),
        call("1/0"),
        call("final(totals.idxmax())"),
    ])
    out = rlm("run", "largest region?", "--model", first, "--context", str(csv), "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "west" and res["turns"] == 3 and res["reason"] == "final"
    sid, path = res["session_id"], Path(res["session_path"])
    assert path.is_file() and oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    log = path.read_text()
    assert "east" not in log.split('"context_vars"')[0]  # the file's rows never hit the prompt before
    state = json.loads(rlm("state", sid, "--json", cwd=tmp_path).stdout)
    assert state["source"] == "snapshot"
    by_name = {n["name"]: n for n in state["names"]}
    assert by_name["totals"]["restorable"] is True and by_name["totals"]["bytes"]
    assert by_name["regions"]["restorable"] is False and "generator" in by_name["regions"]["reason"]

    # a new process: the kernel is restored from the snapshot and the model is told
    second = script(tmp_path / "two.json", [call("final(str(totals['east']))")])
    out2 = rlm("resume", sid, "east total?", "--model", second, "--json", cwd=tmp_path,
               process=True)
    res2 = json.loads(out2.stdout.strip().splitlines()[-1])
    assert res2["final"] == "17" and res2["session_id"] == sid
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    restored = [e for e in entries if e.get("custom_type") == "kernel_restored"]
    assert restored and "totals" in restored[-1]["data"]["restored"]
    assert "regions" in restored[-1]["data"]["rebuilt"]  # unpicklable: rebuilt by replaying its cell


    sessions = json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)
    assert [s["id"] for s in sessions] == [sid]
    log_text = rlm("log", sid, cwd=tmp_path).stdout
    assert "ZeroDivisionError" in log_text and "largest region?" in log_text
    assert sid[:4] in rlm("tree", sid, cwd=tmp_path).stdout or rlm("tree", sid, cwd=tmp_path).stdout

    nb_path = tmp_path / "out.ipynb"
    rlm("export", sid, "-o", str(nb_path), cwd=tmp_path)
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    assert any("ZeroDivisionError" in json.dumps(c.get("outputs", [])) for c in nb.cells)


def test_resume_from_an_earlier_entry_starts_a_branch(tmp_path):
    s1 = script(tmp_path / "a.json", [call("x = 1"), call("final('one')")])
    res = json.loads(rlm("run", "t", "--model", s1, "--json", cwd=tmp_path).stdout.splitlines()[-1])
    sid, path = res["session_id"], Path(res["session_path"])
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    # the first user message (a hidden run_options entry may come before it)
    first_user = next(e["id"] for e in entries if e["type"] == "message")
    s2 = script(tmp_path / "b.json", ["a different answer"])
    summ = script(tmp_path / "summary.json", ["Tried: set x = 1 and answered 'one'."])
    resumed = rlm("resume", sid, "again", "--from", first_user, "--model", s2,
                  "--compaction-model", summ, "--json", cwd=tmp_path, check=False)
    assert resumed.returncode == 5, resumed.stderr  # an answer no cell of the run checked
    after = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert len(after) > len(entries)
    assert entries == after[: len(entries)]  # nothing rewritten
    children = [e for e in after if e.get("parent_id") == first_user]
    assert len(children) == 2  # the old continuation and the new branch
    # the abandoned branch is summarised at the new position, before the new prompt
    summary = [e for e in children if e["type"] == "branch_summary"]
    assert summary and summary[0]["summary"] == "Tried: set x = 1 and answered 'one'."
    assert summary[0]["from_id"] == entries[-1]["id"]


def test_corrupt_session_is_a_file_line_error(tmp_path):
    s1 = script(tmp_path / "a.json", ["hello"])
    first = rlm("run", "t", "--model", s1, "--json", cwd=tmp_path, check=False)
    res = json.loads(first.stdout.splitlines()[-1])
    # the real entry point: an answer no cell supports exits 5, and --json says why
    assert first.returncode == 5 and res["verified"] is False and res["unverified_why"]
    path = Path(res["session_path"])
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "{not json\n")
    path.write_text("".join(lines))
    before = path.read_bytes()
    proc = rlm("log", res["session_id"], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert f"{path}:2" in proc.stderr and proc.stderr.count("\n") <= 2
    assert path.read_bytes() == before


def test_errors_are_one_clear_line(tmp_path):
    proc = rlm("run", "t", "--model", f"script:{tmp_path}/missing.json", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "missing.json" in proc.stderr and "Traceback" not in proc.stderr
    proc = rlm("log", "no-such-session", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


def test_readme_opens_with_the_two_setup_commands():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    commands = [line.split("#", 1)[0].strip() for line in block]
    assert commands == ["pip install -e '.[local]' && rlm demo",
                        "pip install -e '.[dev,local]' && pytest"]


def test_run_starts_from_an_existing_notebook(tmp_path):
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("base = 40"), new_code_cell("1 / 0"),
                             new_code_cell("extra = base + 1")])
    nbformat.write(nb, tmp_path / "analysis.ipynb")
    s1 = script(tmp_path / "a.json", [call("final(str(extra + 1))")])
    out = rlm("run", "what is extra + 1?", "--notebook", str(tmp_path / "analysis.ipynb"),
              "--model", s1, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "42"  # the notebook's cells ran first, errors reported, not fatal
    entries = [json.loads(line) for line in Path(res["session_path"]).read_text().splitlines()[1:]]
    imported = [e for e in entries if e.get("custom_type") == "notebook_import"]
    assert imported and "ZeroDivisionError" in imported[0]["content"]
    assert entries.index(imported[0]) < [e.get("message", {}).get("role") for e in entries].index("assistant")
