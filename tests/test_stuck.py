"""Issue 33: a long run that stops making progress is detected, told once, and ended
`stuck` with its goal blocked by the host; goals are completed only on evidence.

The end-to-end cases run `rlm run` as a user would (its entry function in this process, a
real kernel; the detached worker's client in a new process: tests/rlmcli.py) with scripted
models; `"fenced": true` scripts play the small local model (fenced code, text FINAL).
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import pytest

from rlm.agent.policy.goal_evidence import check_files, done_means, named_files
from rlm.agent.policy.novelty import Outputs, read
from rlm.agent.policy.stuck import LARGE, SMALL, StuckWatch, thresholds_for
from rlm.kernel.binds import kept_names, loop_variables
from tests import rlmcli

pytestmark = pytest.mark.timeout(240)

rlm = partial(rlmcli.rlm, timeout=220)


def fenced(path: Path, replies: list) -> str:
    path.write_text(json.dumps({"window": 32000, "fenced": True, "replies": replies}))
    return f"script:{path}"


def block(code: str) -> str:
    return f"```python\n{code}\n```"


def entries(session_path: str) -> list[dict]:
    return [json.loads(line) for line in Path(session_path).read_text().splitlines()[1:]]


def user_texts(es: list[dict]) -> list[str]:
    return [str(e["message"].get("content")) for e in es
            if e["type"] == "message" and e["message"]["role"] == "user"]


def goal_states(es: list[dict]) -> list[dict]:
    return [e["data"]["goal"] for e in es if e.get("custom_type") == "thread_goal_state"
            and e["data"]["goal"] is not None]


# ------------------------------------------------------------------- pure: the watch
def watch() -> StuckWatch:
    return StuckWatch(SMALL)


def turn(w: StuckWatch, n: int, *cells: tuple) -> object:
    """A turn whose cells are (code, output) or (code, output, the names the kernel said
    the cell bound)."""
    halt = w.halt(n, tokens=100 * n)
    w.open_turn()
    w.escalate(n)
    for code, out, *binds in cells:
        w.cell(code, out, True, binds[0] if binds else None)
    return halt


def test_the_same_cell_three_times_is_stuck_then_halts_after_one_recovery_turn():
    w = watch()
    assert turn(w, 1, ("x = 1\nprint(x)", "1")) is None
    assert turn(w, 2, ("x = 1\nprint(x)", "1")) is None
    assert turn(w, 3, ("x = 1\nprint(x)", "1")) is None
    assert turn(w, 4, ("x = 1\nprint(x)", "1")) is None  # the third repeat
    assert w.signal is None  # judged when the turn closes
    assert turn(w, 5, ("x = 1\nprint(x)", "1")) is None  # the note turn: the recovery turn
    assert w.signal == ("3 cells brought nothing new (the last: the same cell printed the "
                        "same output again)")
    assert w.escalated_turn == 5 and w.detected == {"turn": 5, "tokens": 500,
                                                     "signal": w.signal}
    assert w.halting() and w.halting()  # known before the halt, asked as often as needed
    halt = w.halt(6, tokens=600)
    assert halt is not None and halt.reason == "stuck"
    assert halt.report["turns_after_detection"] == 1
    assert halt.report["tokens_after_detection"] == 100
    assert any("a note naming the repeat at turn 5" in t for t in halt.report["tried"])


def test_progress_after_the_note_clears_the_stuck_state_and_a_new_detection_gets_a_note():
    w = watch()
    for n in range(1, 5):
        turn(w, n)  # turns without a cell: idle; the third is closed when the fourth starts
    assert w.signal == "3 turns brought nothing new (the last: no cell ran)"
    assert w.escalated_turn == 4
    turn(w, 5, ("y = 2\nprint(y * 21)", "42", ["y"]))  # the recovery turn: a new name and output
    assert w.halt(6, 600) is None and w.signal is None and w.after == 0
    for n in range(6, 10):
        turn(w, n)
    assert w.escalated_turn == 9 and w.notes == [4, 9]  # stuck again: a note of its own
    assert w.halt(10, 1000) is not None


def test_identical_outputs_count_as_repeats_and_a_new_name_is_progress():
    w = watch()
    turn(w, 1, ("print(df.shape)", "(3, 2)"))
    turn(w, 2, ("print(len(df), 2)", "(3, 2)"))  # another cell, the same output
    assert w.repeats == 1 and w.repeat == "another cell printed an output seen before"
    turn(w, 3, ("total = df.sum()", "", ["total"]))
    assert w.idle == 1  # turn 2 was idle
    w.halt(4, 400)  # closes turn 3: a new name is progress
    assert w.idle == 0 and "total" in w.names and w.repeats == 0


def test_a_poll_whose_output_moves_on_is_progress_a_counter_is_not():
    """Issue 58: the same cell whose output goes 10% -> 90% -> done never makes the run
    stuck; cells that differ only in a counter (and their code in a literal) do."""
    w = watch()
    outs = [f"job 7f3a9c21e0b4: running {p}% (elapsed 0:00:{p // 10:02d})" for p in
            range(10, 100, 10)] + ["job 7f3a9c21e0b4: done, 512 rows"]
    for n, out in enumerate(outs, 1):
        assert turn(w, n, ("print(job.status())", out)) is None
    assert w.halt(len(outs) + 1, 0) is None and w.signal is None and w.notes == []
    c = watch()
    for n in range(1, 7):  # new, a first change, then three counter steps: the note
        turn(c, n, (f"i = {n}\nprint(f'iteration {{i}} at 12:00:0{n}')",
                    f"iteration {n} at 12:00:0{n}"))
    assert c.signal is not None and "only a counter, timestamp or id changed" in c.signal
    assert c.notes == [6] and c.halt(7, 0) is not None


def test_volatile_tokens_are_placeholders_measures_are_marked():
    a = read("run 3fa85f64-5717-4562-b3fc-2c963f66afa6 at 2024-01-02T10:11:12Z took 1.5s, "
             "<Job at 0x7f00ab12> |████      | 40/100 [00:05<00:07, 10.0it/s] 40%")
    b = read("run 9c0e1d2a-0000-4000-8000-0123456789ab at 2024-01-03T08:00:00Z took 312 ms, "
             "<Job at 0x7f00ffff> |██████    | 60/100 [00:07<00:05, 12.5it/s] 60%")
    assert a.shape == b.shape and a.values == (40, 100, 40) and b.values == (60, 100, 60)
    assert a.measures == {0, 2}
    o = Outputs()
    assert o.see(a.shape) is None and o.see(a.shape) == "same"


def test_a_new_error_is_news_the_same_error_at_another_line_is_not():
    w = watch()
    w.open_turn()
    assert w.cell("f()", "NameError: name 'f' is not defined", False) is None
    assert w.cell("g()", "Cell In[7], line 3\nKeyError: 'region'", False) is None
    assert w.cell("g() ", "Cell In[8], line 3\nKeyError: 'region'", False) == (
        "the same cell failed with the same error again")
    assert w.cell("h()", "Cell In[9], line 9\nKeyError: 'region'", False) == (
        "another cell failed with an error seen before")


def test_thresholds_are_tighter_for_small_models_and_every_run_is_watched():
    assert thresholds_for(native_tools=False) == SMALL
    assert thresholds_for(native_tools=True) == LARGE
    assert SMALL.repeats < LARGE.repeats and SMALL.idle < LARGE.idle
    assert SMALL.grace == LARGE.grace == 1  # one recovery turn after the note
    w = StuckWatch(LARGE)
    halts = [turn(w, n, ("print(1)", "1")) for n in range(1, 9)]
    assert halts.index(next(h for h in halts if h is not None)) == 1 + LARGE.repeats + 1


def test_the_names_a_cell_keeps_are_the_kernels_without_its_loop_variables():
    code = "import pandas as pd\nfrom os import path\na, b = 1, 2\nfor i in x: pass\ndef f(): pass"
    binds = {"pd", "path", "a", "b", "i", "f"}  # what the kernel says (tests/test_cell_binds.py)
    assert kept_names(binds, code) == binds - {"i"}
    assert loop_variables("for i in x:\n    i = i + 1") == set()  # assigned too: kept
    assert loop_variables("for k, (a, b) in x: pass\nb = 1") == {"k", "a"}
    assert kept_names(None, code) == set() and loop_variables("this is not python(") == set()


def test_named_files_and_what_done_means(tmp_path):
    goal = "report.md exists and names the worst month; also write out/summary.csv (e.g. 3.5)"
    assert named_files(goal) == ["report.md", "out/summary.csv"]
    text = done_means(["report.md"], ["grep -q EWR report.md"])
    assert "report.md exists" in text and "`grep -q EWR report.md` passes" in text
    assert "do not run it again" in text
    shown: dict[str, str] = {}
    assert "does not exist" in check_files(["report.md"], tmp_path, shown).message
    (tmp_path / "report.md").write_text("EWR: month 6\n")
    first = check_files(["report.md"], tmp_path, shown)
    assert first is not None and "EWR: month 6" in first.message
    assert check_files(["report.md"], tmp_path, shown) is None  # shown, unchanged
    (tmp_path / "report.md").write_text("EWR: month 7\n")
    assert "EWR: month 7" in check_files(["report.md"], tmp_path, shown).message


# --------------------------------------------------------------- end to end, `rlm run`
WRONG_REPORT = ("import pandas as pd\n"
                "df = pd.DataFrame({'origin': ['EWR', 'JFK'], 'month': [6, 7]})\n"
                "with open('report.md', 'w') as f:\n"
                "    for i, r in df.iterrows():\n"
                "        f.write(f\"{r['origin']}: month {i}\\n\")\n"
                "print('written')")


def test_a_model_repeating_one_cell_forever_ends_stuck_with_its_goal_blocked(tmp_path):
    """The issue's run: one cell sent again and again (the repeat rule resamples, the model
    sends it again). The run ends `stuck` a bounded number of turns after detection, not
    at --max-turns; the goal is blocked by the host with its reason; the note is given
    once; the kernel's work (report.md) is kept."""
    s = fenced(tmp_path / "loop.json", [block(WRONG_REPORT)] * 120)
    out = rlm("run", "Write report.md with the worst month per origin.", "--model", s,
              "--goal", "report.md names the worst month for each of EWR and JFK",
              "--autonomous", "--gate", "test -f report.md", "--max-turns", "30", "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "stuck", (res, out.stderr[-2000:])
    assert out.returncode != 0  # not a success
    stuck = res["stuck"]
    assert stuck["turns_after_detection"] <= SMALL.grace + 1
    assert res["turns"] <= SMALL.repeats + 1 + SMALL.grace + 1 < 30
    assert stuck["tokens_after_detection"] > 0 and stuck["tried"]
    assert any("resampled" in t for t in stuck["tried"])
    es = entries(res["session_path"])
    notes = [t for t in user_texts(es) if t.startswith("<stuck>")]
    assert len(notes) == 1, notes
    assert "report.md names the worst month" in notes[0] and "written" in notes[0]
    last = goal_states(es)[-1]
    assert last["status"] == "blocked" and last["last_reason"].startswith(
        "blocked by the host: stuck")
    shown = rlm("goal", res["session_id"], cwd=tmp_path)
    assert "goal [blocked]" in shown.stdout and "blocked by the host: stuck" in shown.stdout
    assert (tmp_path / "report.md").read_text().startswith("EWR: month 0")


def test_a_run_the_stuck_watch_ends_gets_no_compaction_after_its_last_turn(tmp_path):
    """The logs run of stop 67 spent its last minutes summarising a context for a turn the
    halt then never took (a summary on the local model: 3 minutes): the compaction after
    a turn asks the policy whether the run goes on."""
    cell = block("print('x' * 3000)\nprint(len('row'))")
    path = tmp_path / "loop.json"
    path.write_text(json.dumps({"window": 2600, "fenced": True, "replies": [cell] * 60}))
    out = rlm("run", "Print the rows.", "--model", f"script:{path}", "--max-turns", "30",
              "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "stuck", (res, out.stderr[-2000:])
    es = entries(res["session_path"])
    kinds = [e.get("custom_type") or e["type"] for e in es]
    assert "context_relief" in kinds or "compaction" in kinds  # the window does fill
    last_turn = max(i for i, e in enumerate(es) if e["type"] == "message")
    after = kinds[last_turn + 1:]
    assert not {"context_relief", "compaction", "compaction_outcome"} & set(after), after


def test_a_gate_that_passes_does_not_complete_a_goal_whose_claim_no_output_supports(tmp_path):
    """The gate passes (the file exists) but the model's completion claim names a month no
    output showed: the goal is not completed (kernel `goal.complete` and text FINAL alike)."""
    cell = "counts = {'EWR': 10, 'JFK': 5}\nprint(counts)"
    claim = "goal.complete(summary='LGA is the busiest with 99 flights')"
    replies = [block(cell), block(claim), "FINAL(LGA is the busiest with 99 flights)",
               "FINAL(LGA is the busiest with 99 flights)"] + \
              ["FINAL(LGA is the busiest with 99 flights)"] * 12
    s = fenced(tmp_path / "claim.json", replies)
    (tmp_path / "flag.txt").write_text("x")
    out = rlm("run", "Which origin is the busiest?", "--model", s, "--goal",
              "name the busiest origin", "--autonomous", "--gate", "test -f flag.txt",
              "--max-turns", "16", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    assert all(g["status"] != "complete" for g in goal_states(es)), goal_states(es)
    tool_out = [str(e["message"].get("content")) for e in es
                if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert any("the goal is not complete yet" in t and "LGA" in t for t in tool_out), tool_out
    refusals = [t for t in user_texts(es) if "Your answer is not supported" in t]
    # it names what no output shows (the invented figure and name), not only that something is
    assert refusals and all("99" in t and "LGA" in t for t in refusals), refusals
    assert res["reason"] == "stuck"  # the same unsupported claim again and again


def test_a_goal_naming_a_file_shows_the_model_the_file_before_completing(tmp_path):
    """The model writes report.md and claims done: the host answers with the file's content;
    only the claim made after the model has seen it completes the goal."""
    write = ("with open('report.md', 'w') as f:\n    f.write('EWR: month 6\\nJFK: month 7\\n')\n"
             "print('report written')")
    s = fenced(tmp_path / "file.json", [block(write), "FINAL(report written)",
                                        "FINAL(report written)"])
    out = rlm("run", "Write report.md.", "--model", s, "--goal",
              "report.md names the worst month for EWR and JFK", "--autonomous",
              "--gate", "grep -q 'EWR: month' report.md", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "final", (res, out.stderr[-2000:])
    es = entries(res["session_path"])
    order = [("file" if "<file path=\"report.md\">" in str(e.get("message", {}).get("content"))
              else "complete") for e in es
             if (e["type"] == "message" and e["message"]["role"] == "user"
                 and "<file path=" in str(e["message"].get("content")))
             or (e.get("custom_type") == "thread_goal_state"
                 and e["data"]["goal"]["status"] == "complete")]
    assert order == ["file", "complete"], order
    shown = next(t for t in user_texts(es) if "<file path=" in t)
    assert "EWR: month 6\nJFK: month 7" in shown and "Done means" in shown
    assert "report.md exists and holds exactly" in shown
    # a fenced model is taught FINAL: its goal context does not offer the goal API too
    assert "goal.complete()" not in shown and "finish with FINAL(one line" in shown
    evidence = next(e for e in es if e.get("custom_type") == "goal_evidence")["data"]["evidence"]
    assert "report.md" in evidence["files"] and evidence["verified"] is True


def test_a_claim_that_the_shown_file_is_correct_completes_the_goal(tmp_path):
    """issue 33's staff run: the file was right, the host showed it, and the model's
    "FINAL(salaries.md is correct)" was refused as unsupported three times (its only claim
    was the word "correct") until the stuck watch blocked a goal that was done."""
    # the file comes from a mean (the judge asks the goal's "average" of the code that
    # wrote it: rlm.agent.policy.written)
    write = ("import pandas as pd\n"
             "pay = pd.DataFrame({'dept': ['Research', 'Sales'], 'salary': [71847, 61423]})\n"
             "means = pay.groupby('dept')['salary'].mean().round().astype(int).to_dict()\n"
             "with open('salaries.md', 'w') as f:\n"
             "    f.writelines(f'{k}: {v}\\n' for k, v in means.items())\nprint(means)")
    s = fenced(tmp_path / "file.json", [block(write), "FINAL(salaries.md is written)",
                                        "FINAL(salaries.md is correct)"])
    out = rlm("run", "Write salaries.md.", "--model", s, "--goal",
              "salaries.md gives the average salary of every department", "--autonomous",
              "--gate", "grep -q '^Research: [0-9]' salaries.md", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "final", (res, out.stderr[-2000:])
    es = entries(res["session_path"])
    assert goal_states(es)[-1]["status"] == "complete"
    assert not any("Your answer is not supported" in t for t in user_texts(es))


def test_a_finish_that_echoes_the_hosts_done_means_line_does_not_complete(tmp_path):
    """issue 33's shipments run (stop 45): shown a wrong late_rate.csv, the model answered
    with a copy of the continuation's "Done means: ..." line. All its words were the
    question's, so no claim was left to check and the goal completed with a wrong file.
    An answer found whole in the text the model was given is no finding: the goal stays
    open, the model is told why, and a finish that states what the outputs show (and a
    right file) completes it."""
    wrong = ("import pandas as pd\nrate = pd.DataFrame({'carrier': ['GLS'], 'late_share': [0.4]})"
             "\nrate.to_csv('late_rate.csv', index=False)\nprint(rate)")
    echo = ("FINAL(late_rate.csv exists and holds exactly what the goal asks; the check "
            "`head -1 late_rate.csv | grep -q '^carrier,late_share'` passes; your answer "
            "states only what your outputs printed.")
    # the right file is computed from the task's data (an invented one would be refused)
    (tmp_path / "shares.csv").write_text("carrier,late_share\nGLS,0.29\nDPD,0.19\n")
    right = ("rates = pd.read_csv('shares.csv')\n"
             "rates.to_csv('late_rate.csv', index=False)\nprint(rates)")
    s = fenced(tmp_path / "echo.json", [block(wrong), "FINAL(0.40)", echo, block(right),
                                        "FINAL(GLS 0.29 and DPD 0.19)",
                                        "FINAL(GLS 0.29 and DPD 0.19)"])
    out = rlm("run", "Write late_rate.csv.", "--model", s, "--goal",
              "late_rate.csv gives every carrier's share of late orders, highest first",
              "--autonomous", "--gate", "head -1 late_rate.csv | grep -q '^carrier,late_share'",
              "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    said = user_texts(es)
    assert any(t.startswith("Your answer repeats the words you were given") for t in said)
    completed = [g for g in goal_states(es) if g["status"] == "complete"]
    assert completed and "GLS 0.29" in completed[0]["last_reason"], said[-3:]
    assert "0.29" in (tmp_path / "late_rate.csv").read_text()


def test_after_an_echoed_finish_the_file_is_shown_with_a_finish_that_states_it(tmp_path):
    """The long-run logs run of stop 71: errors.txt right, its counts printed, and the
    model's finish a copy of the host's "Done means" line four times until the run
    stopped. The refusal shows the file and a finish built from its lines; sent, it is
    supported by the outputs and completes the goal."""
    (tmp_path / "counts.csv").write_text("service,n\nbilling,204\nupload,157\nsearch,93\n")
    write = ("import pandas as pd\n"
             "counts = pd.read_csv('counts.csv').set_index('service')['n']\n"
             "with open('errors.txt', 'w') as f:\n"
             "    f.writelines(f'{k}: {v}\\n' for k, v in counts.items())\nprint(counts)")
    echo = ("FINAL(errors.txt exists and holds exactly what the goal asks; the check "
            "`grep -q '^[a-z]*: [0-9]' errors.txt` passes; your answer states only what your "
            "outputs printed.)")
    # long enough to be an "echo" of the refusal that suggests it, were the file's lines
    # the question's words (the stop 71 logs run: refused four times)
    stated = "FINAL(errors.txt: billing: 204, upload: 157, search: 93)"
    s = fenced(tmp_path / "stated.json", [block(write), echo, echo, stated, stated])
    out = rlm("run", "Write errors.txt.", "--model", s, "--goal",
              "errors.txt lists every service's count, most first", "--autonomous",
              "--gate", "grep -q '^[a-z]*: [0-9]' errors.txt", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    said = user_texts(es)
    refusal = next(t for t in said if t.startswith("Your answer repeats the words"))
    assert "errors.txt now holds:" in refusal and "billing: 204\nupload: 157" in refusal
    assert "e.g. FINAL(errors.txt: billing: 204, upload: 157, search: 93)" in refusal
    completed = [g for g in goal_states(es) if g["status"] == "complete"]
    assert completed and "billing: 204" in completed[0]["last_reason"], said[-3:]


def test_a_finish_saying_nothing_was_found_never_completes_a_goal(tmp_path):
    """stop 45's flights run: report.md held 40,000 wrong lines that the gate accepted, and
    FINAL(None) completed the goal (no claim to check, so "verified"). A non-answer does
    not complete a goal, however often it is given: the run ends without completing it."""
    spam = ("import pandas as pd\nrows = [f'EWR: month {m}' for m in range(1, 13)] * 50\n"
            "open('report.md', 'w').write('\\n'.join(rows))\nprint(len(rows))")
    s = fenced(tmp_path / "none.json", [block(spam)] + ["FINAL(None)"] * 12)
    out = rlm("run", "Write report.md.", "--model", s, "--goal",
              "report.md names the worst month for each of EWR and JFK", "--autonomous",
              "--gate", "grep -q '^EWR: month' report.md", "--max-turns", "12", "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    assert all(g["status"] != "complete" for g in goal_states(es)), goal_states(es)[-1]
    assert any(t.startswith("Your answer (None) says nothing was found") for t in user_texts(es))
    assert res["reason"] != "final"


def test_a_detached_worker_stops_continuing_a_goal_the_host_blocked(tmp_path):
    """The same loop in a worker (`--detach`): the run ends stuck, the goal is blocked, and
    the worker stays idle instead of continuing it (worker.json says why it stays)."""
    s = fenced(tmp_path / "loop.json", [block(WRONG_REPORT)] * 120)
    out = rlm("run", "Write report.md.", "--detach", "--model", s, "--goal",
              "report.md names the worst month for each of EWR and JFK", "--json", cwd=tmp_path,
              process=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    path = Path(res["session_path"])
    status = path.parent / "worker.json"

    def idle_after_block() -> bool:
        es = entries(str(path))
        blocked = [g for g in goal_states(es) if g["status"] == "blocked"]
        return bool(blocked) and status.is_file() and \
            json.loads(status.read_text()).get("activity", "").startswith("idle")

    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not idle_after_block():
        time.sleep(0.3)
    try:
        assert idle_after_block(), status.read_text() if status.is_file() else "no worker.json"
        es = entries(str(path))
        ends = [e for e in es if e.get("custom_type") == "thread_goal_state"
                and e["data"]["event"] == "continue"]
        assert goal_states(es)[-1]["status"] == "blocked"
        runs = [t for t in user_texts(es) if t.startswith("<stuck>")]
        assert len(runs) == 1 and len(ends) == 0  # nothing continued the blocked goal
    finally:
        rlm("stop", res["session_id"], cwd=tmp_path)


def test_a_gate_past_its_timeout_is_killed_and_the_model_is_told(tmp_path):
    """`--gate-timeout`: a gate that hangs is killed at the limit, counts as failed, and the
    model reads why; the run is not held for the gate's own 600 s default."""
    s = fenced(tmp_path / "hang.json", [block("x = 1\nprint(x)")] + ["FINAL(1)"] * 4)
    out = rlm("run", "Say 1.", "--model", s, "--autonomous", "--gate", "sleep 120",
              "--gate-timeout", "1", "--max-turns", "3", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    told = [t for t in user_texts(entries(res["session_path"])) if "<quality_gate>" in t]
    assert told and "[gate timed out after 1 s]" in told[0], (res, out.stderr[-2000:])
    # the answer in the last turn the limit allowed was judged too: the gate still fails,
    # so the run ends on the limit (exit 3), the answer kept but not passed off as done
    assert res["reason"] == "limit:turns" and res["final"] == "1", res
    assert res["limit"] == "max_turns (3) reached; gate 'sleep 120' still failing"
    assert out.returncode == 3


def test_a_gate_that_keeps_failing_with_nothing_changed_ends_the_run_stalled(tmp_path):
    """Issue 40 item 11, end to end through the CLI: the autonomous policy's stall is a run
    decision (`End("limit:stalled")`, rlm.protocols) the loop carries out, so the run ends
    stalled, exit 3, the answer kept but not passed off as done; before, the policy's
    stop was dropped where it was attached and the run ended `final`."""
    s = fenced(tmp_path / "stall.json", [block("x = 1\nprint(x)")] + ["FINAL(1)"] * 6)
    out = rlm("run", "Say 1.", "--model", s, "--autonomous", "--gate", "false",
              "--max-turns", "10", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "limit:stalled" and res["final"] == "1", (res, out.stderr[-2000:])
    assert res["limit"].startswith("stalled: gate 'false' is failing and nothing changed")
    assert out.returncode == 3
    told = [t for t in user_texts(entries(res["session_path"])) if "<quality_gate>" in t]
    assert len(told) == 2  # two continuations with the gate's output, then the stall


# ------------------------------------------- issue 58: progress is new information, every run
POLL = ("import pathlib\np = pathlib.Path('progress')\n"
        "n = int(p.read_text()) + 10 if p.exists() else 10\np.write_text(str(n))\n"
        "print(f'export running: {n}% at {__import__(\"time\").strftime(\"%H:%M:%S\")}' "
        "if n < 100 else f'export finished: {n * 41} rows written')")


def tool_texts(es: list[dict]) -> list[str]:
    return [str(e["message"].get("content")) for e in es
            if e["type"] == "message" and e["message"]["role"] == "tool"]


@pytest.mark.parametrize("goal", [True, False], ids=["goal", "plain"])
def test_a_local_model_polling_one_cell_until_done_is_not_stuck(tmp_path, goal):
    """The same cell ten times, its output going 10% -> 90% -> finished: every run is
    new information. It is never resampled (the third identical cell used to be), never
    told its output is the same, never noted stuck; the goal completes on the claim."""
    s = fenced(tmp_path / "poll.json", [block(POLL)] * 10
               + ["FINAL(export finished: 4100 rows written)"] * 2)
    args = ["--goal", "the export finishes", "--autonomous"] if goal else []
    out = rlm("run", "Wait for the export to finish.", "--model", s, *args,
              "--max-turns", "20", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "final" and out.returncode == 0, (res, out.stderr[-2000:])
    assert "stuck" not in res and res["turns"] == 11
    es = entries(res["session_path"])
    assert not [e for e in es if e.get("custom_type") == "resampled"]
    assert not any(t.startswith("<stuck>") for t in user_texts(es))
    polls = tool_texts(es)
    assert len(polls) == 10 and "export finished" in polls[-1]
    assert not any("nothing new" in t or "output is the same" in t for t in polls)
    if goal:
        assert goal_states(es)[-1]["status"] == "complete"


def test_a_plain_run_whose_cells_change_only_a_counter_ends_stuck_after_one_recovery_turn(
        tmp_path):
    """No --goal, no --autonomous: a tool-calling model whose code and output differ only
    in a counter (and a timestamp) is noted once, naming the repeat, gets one recovery
    turn, and the run ends `stuck` (exit 3), not at --max-turns."""
    counter = "import time\ni = {n}\nprint(f'iteration {{i}} at {{time.strftime(\"%H:%M:%S\")}}')"
    s = rlmcli.script(tmp_path / "count.json",
                      [rlmcli.call(counter.format(n=n)) for n in range(1, 31)])
    out = rlm("run", "Count.", "--model", s, "--max-turns", "30", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["reason"] == "stuck", (res, out.stderr[-2000:])
    assert out.returncode == 3 and res["status"] == "stuck" and "not_answered" in res
    # a new output, a first change, then LARGE.repeats counter steps: the note, one turn
    assert res["turns"] == 2 + LARGE.repeats + LARGE.grace
    assert res["stuck"]["turns_after_detection"] == LARGE.grace
    es = entries(res["session_path"])
    notes = [t for t in user_texts(es) if t.startswith("<stuck>")]
    assert len(notes) == 1, notes
    assert "only a counter, timestamp or id changed" in notes[0]
    assert "the same output" not in notes[0] and "iteration 7" in notes[0]
    assert "If your next turn brings nothing new either, the run ends." in notes[0]
