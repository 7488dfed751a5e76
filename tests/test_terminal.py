"""The terminal a user reads (issue 31), through tmux at 80 columns with scripted models:
the code that ran is all on screen, the task heads the run, the verdict ends it, and
Ctrl-C follows one rule in `rlm run`, `rlm chat` and `rlm attach`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from terminal_screen import Screen, boxes, fits
from test_cli import call, rlm, script

# the task's data, in each test's working directory: since issue 58 an answer is verified
# only when code that reads the task's data showed it (rlm.agent.policy.dataflow)
DATA = {"revenue": [1200, 900], "six": 6, "three": 3, "went": "went on", "hello": "hello back",
        "awake": "awake"}
D = "import json\nD = json.load(open('data.json'))\n"


@pytest.fixture(autouse=True)
def _data(tmp_path):
    (tmp_path / "data.json").write_text(json.dumps(DATA))

pytestmark = pytest.mark.timeout(600)

LONG = ("print('the winner made', winner_revenue, 'and the runner up made', "
        "runner_up_revenue, 'difference', winner_revenue - runner_up_revenue)")
TOKEN = "label = '" + "x" * 150 + "'"


def cell_text(screen: str) -> list[str]:
    """The contents of each cell box on the screen, its wrapped rows joined."""
    return boxes(screen, "cell")


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_every_character_of_the_code_is_on_an_80_column_screen_with_task_and_verdict(
        tmp_path, _isolated_home):
    code = f"{D}winner_revenue, runner_up_revenue = D['revenue']\n{LONG}\n{TOKEN}\nprint(len(label))"
    task = ("how much more did the winner make than the runner up in this year's figures, "
            "and by what margin?")
    s = script(tmp_path / "s.json", [call(code), call("final(str(winner_revenue - runner_up_revenue))")])
    with Screen(["run", task, "--model", s], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    first = cell_text(screen)[0]
    for line in code.splitlines():  # wrapped inside the box, never cut
        assert squeeze(line) in squeeze(first), (line, first)
    assert squeeze("task: " + task) in squeeze(screen)  # the header says what was asked
    assert "✓ verified" in screen
    assert "difference 300" in screen


def test_a_text_answer_is_shown_once_in_its_panel_not_as_final_markup(tmp_path, _isolated_home):
    """A model that answers in text (`FINAL(...)` on its own line) has its prose echoed
    and its answer shown once, in the answer panel: the FINAL(...) line is not printed."""
    s = script(tmp_path / "s.json", [call(D + "product = D['six'] * 7\nprint('product', product)"),
                                     "The product is below.\nFINAL(42)"])
    with Screen(["run", "multiply six by seven", "--model", s], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert "The product is below." in screen
    assert "FINAL" not in screen, screen
    after = screen[screen.index("The product is below."):]
    assert re.search(r"^\W*42\W*$", after, re.M), screen  # the answer, on its own
    assert "✓ verified" in screen


def test_unverified_says_why_on_screen(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call("1/0"), call("final('7 regions')")])
    with Screen(["run", "how many regions?", "--model", s], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 5, screen
    assert re.search(r"^unverified: \S", screen, re.M), screen


SLEEPY = "import time\nprint('{label}', flush=True)\ntime.sleep(120)"
# a cell that starts past the double-press window after the press before it, and sleeps
# on through the first interrupt (a stuck cell: the second press on it stops the run)
STUCK = ("import time\ntime.sleep(2.5)\nprint('{label}', flush=True)\ntry:\n"
         "    time.sleep(120)\nexcept BaseException:\n"
         "    print('ignoring', 'the interrupt', flush=True)\n    time.sleep(120)")


def test_run_first_ctrl_c_interrupts_the_cell_and_says_so_second_stops_the_run(
        tmp_path, _isolated_home):
    """Presses count per piece of work: one interrupts each cell (the model goes on), a
    second on the same cell stops the run (tests/test_terminal_truth.py: per piece)."""
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="first cell running")),
                                     call(STUCK.format(label="second cell running")),
                                     call("final('never')")])
    first = "Ctrl-C: interrupting the cell; the model sees the interruption and goes on."
    with Screen(["run", "nap twice", "--model", s], cwd=tmp_path) as scr:
        scr.ctrl_c_at("first cell running\n", "second cell running\n", "ignoring the interrupt\n")
        status, screen = scr.wait_exit()
    assert status == 3, screen
    assert screen.count(first) == 2, screen
    assert "Press Ctrl-C again to stop the run" in screen
    assert "Ctrl-C again: stopping the run" in screen
    # each interrupt's once: the first cell's, the stuck cell's two (it ignored the first)
    assert screen.count("KeyboardInterrupt:") == 3, screen
    assert "✗ interrupted" in screen and "run ended (interrupted) after 2 turn(s)" in screen
    assert "Traceback (most recent call last):" not in screen  # ours; the cell's is shown


def test_chat_first_ctrl_c_interrupts_the_cell_and_the_model_goes_on(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="chat cell running")),
                                     call(D + "print(D['went'])\nfinal(D['went'])")])
    with Screen(["chat", "--model", s], cwd=tmp_path) as scr:
        shown = scr.wait_for("rlm>")
        assert squeeze("Ctrl-C once interrupts the cell, twice stops the run") in squeeze(shown)
        scr.type("take a nap")
        scr.wait_for("chat cell running\n")
        scr.keys("C-c")
        scr.wait_for("run ended (final)")
        scr.wait_for("rlm>", after=scr.text().index("run ended (final)"))
        scr.type("/exit")
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert squeeze("Ctrl-C: interrupting the cell; the model sees the interruption") in squeeze(screen)
    assert "went on" in screen and "✓ verified" in screen


def test_chat_second_ctrl_c_stops_the_run_and_the_chat_goes_on(tmp_path, _isolated_home):
    """The run's rule in chat too: the second press stops the run (not the chat), and the
    prompt comes back for the next message."""
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="first nap running")),
                                     call(STUCK.format(label="second nap running")),
                                     call("final('never')")])
    with Screen(["chat", "--model", s], cwd=tmp_path) as scr:
        scr.wait_for("rlm>")
        scr.type("take two naps")
        scr.wait_for("first nap running\n")
        scr.keys("C-c")
        scr.wait_for("second nap running\n")
        scr.keys("C-c")  # the second nap's own first press
        scr.wait_for("ignoring the interrupt\n")
        scr.keys("C-c")
        scr.wait_for("run ended (interrupted)")
        scr.wait_for("rlm>", after=scr.text().index("run ended (interrupted)"))
        scr.type("/exit")
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert squeeze("Press Ctrl-C again to stop the run") in squeeze(screen)
    assert squeeze("Ctrl-C again: stopping the run") in squeeze(screen)
    assert "final('never')" not in screen  # the model was not called again
    assert "Traceback (most recent call last):" not in screen


def test_ctrl_c_in_attach_detaches_without_a_traceback_and_the_worker_goes_on(
        tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="worker cell running")),
                                     call("final('done')")])
    out = rlm("run", "nap in the background", "--detach", "--model", s, "--json", cwd=tmp_path,
              process=True)
    sid = json.loads(out.stdout.strip().splitlines()[-1])["session_id"]
    try:
        with Screen(["attach", sid], cwd=tmp_path) as scr:
            scr.wait_for("worker cell running\n")
            scr.keys("C-c")
            status, screen = scr.wait_exit()
        assert status == 0, screen
        assert "Traceback" not in screen, screen
        assert f"detached; the worker goes on (`rlm attach {sid}`" in screen
        workers = json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
        assert [w for w in workers if w.get("session_id") == sid and w.get("alive")]
    finally:
        rlm("stop", sid, cwd=tmp_path, check=False)


def test_interrupted_output_is_shown_once():
    """A cell interrupted after it printed: its output and traceback were streamed, so the
    end of the cell adds only the outcome (not the whole output again in a box)."""
    import io

    from rich.console import Console

    from rlm import events as ev
    from rlm.cli.render import Renderer

    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=80, color_system=None))
    r(ev.CellStarted("import time\nprint('rows so far: 10')\ntime.sleep(60)", 0))
    r(ev.CellOutput("rows so far: 10\n"))
    r(ev.CellOutput("KeyboardInterrupt: \n", "error"))
    r(ev.CellFinished("x", "interrupted", "rows so far: 10\nKeyboardInterrupt: \n"
                      "[the cell was interrupted]", 1.5))
    out = buf.getvalue()
    assert out.count("rows so far: 10") == 2, out  # the code panel + once as printed
    assert out.count("KeyboardInterrupt") == 1, out
    assert "[the cell was interrupted]" in out and "✗ interrupted · 1.50s" in out



# ------------------------------------------------------------------- listings
def chat_session(tmp_path, replies: list, typed: str) -> subprocess.CompletedProcess:
    s = script(tmp_path / "chat.json", replies)
    proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "chat", "--model", s],
                          cwd=tmp_path, input=typed, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _run_json(tmp_path, name: str, replies: list, *args: str) -> dict:
    s = script(tmp_path / f"{name}.json", replies)
    out = rlm("run", *args, "--model", s, "--json", cwd=tmp_path, check=False)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_sessions_fit_80_columns_and_say_how_each_ended(tmp_path, _isolated_home):
    answered = _run_json(tmp_path, "a", [call(D + "x = D['six'] * 7\nprint(x)"), call("final(str(x))")],
                         "multiply six by seven and tell me the product of the two numbers")
    unverified = _run_json(tmp_path, "u", [call("1/0"), call("final('12 regions')")],
                           "how many regions?")
    limited = _run_json(tmp_path, "l", [call("print(1)"), call("print(2)")], "count",
                        "--max-turns", "1")
    chat_session(tmp_path, [call(D + "said = D['hello']\nprint(said)\nfinal(said)")],
                 "say hello to the team\n/exit\n")
    with Screen(["sessions"], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert not fits(screen), screen  # joined rows: none wider than the screen
    rows = {line.split()[0]: line for line in screen.splitlines()[1:] if line.strip()}
    assert rows[answered["session_id"]].split()[1] == "answered"
    assert rows[unverified["session_id"]].split()[1] == "unverified"
    assert rows[limited["session_id"]].split()[1] == "limit"
    chat_row = [r for r in rows.values() if "say hello to the team" in r]
    assert chat_row and chat_row[0].split()[1] == "answered"  # a chat's TASK: its first message
    listed = {r["id"]: r for r in json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)}
    assert listed[answered["session_id"]]["verified"] is True
    assert listed[unverified["session_id"]]["verified"] is False
    assert listed[unverified["session_id"]]["reason"]  # why it is not verified
    assert listed[limited["session_id"]]["reason"].startswith("limit:")


def test_an_interrupted_run_is_listed_as_interrupted(tmp_path, _isolated_home):
    # the second cell sleeps too: the second press lands while it runs. (With a quick
    # second cell the run could reach the script's end before the second press, which a
    # scripted model slowed by the litellm import used to hide.)
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="napping")),
                                     call(SLEEPY.format(label="napping again"))])
    with Screen(["run", "nap", "--model", s], cwd=tmp_path) as scr:
        scr.wait_for("napping\n")
        scr.keys("C-c")
        scr.wait_for("Press Ctrl-C again")
        scr.keys("C-c")
        scr.wait_exit()
    rows = json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)
    assert [r["status"] for r in rows] == ["interrupted"]


def test_a_failed_run_is_listed_as_error_and_a_live_one_as_running(tmp_path, _isolated_home):
    """STATUS on an 80-column screen: a run the provider failed says error (and why, in
    --json); a run a host still holds says running while it runs."""
    failed = _run_json(tmp_path, "e", [{"error": "auth", "message": "key revoked"}], "q")
    s = script(tmp_path / "s.json", [call(SLEEPY.format(label="still napping")),
                                     call(D + "woke = D['awake']\nprint(woke)\nfinal(woke)")])
    with Screen(["run", "nap", "--model", s], cwd=tmp_path) as run:
        run.wait_for("still napping\n")
        with Screen(["sessions"], cwd=tmp_path) as scr:
            status, screen = scr.wait_exit()
        run.keys("C-c")  # the cell ends; the script's next reply answers
        run.wait_exit()
    assert status == 0, screen
    assert not fits(screen), screen
    rows = {line.split()[0]: line.split()[1] for line in screen.splitlines()[1:] if line.strip()}
    assert rows.pop(failed["session_id"]) == "error", screen
    assert list(rows.values()) == ["running"], screen
    listed = {r["id"]: r for r in json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)}
    assert listed[failed["session_id"]]["reason"].startswith("error"), listed
    assert "key revoked" in listed[failed["session_id"]]["reason"], listed
    assert sorted(r["status"] for r in listed.values()) == ["answered", "error"]


def test_state_counts_a_shared_group_once_and_fits_80_columns():
    from rlm.cli.listings import state_lines

    big = 49_971_384
    state = {"source": "snapshot", "detail": "the last snapshot", "names": [
        {"name": "flights", "type": "DataFrame", "bytes": big, "shares": ["flights_by_carrier"],
         "summary": "DataFrame 336,776×19"},
        {"name": "flights_by_carrier", "type": "dict", "bytes": big, "shares": ["flights"]},
        {"name": "a_rather_long_variable_name_for_the_model", "type": "int", "bytes": 28},
        {"name": "gen", "type": "generator", "bytes": 0, "restorable": False,
         "reason": "generators cannot be pickled"}]}
    lines = state_lines(state, 80)
    assert all(len(line) <= 80 for line in lines), lines
    assert sum(f"{big:,} B" in line for line in lines) == 1  # counted once
    assert "with flights" in lines[2] and "shared with flights_by_carrier" in lines[1]
    assert lines[-1] == f"  4 name(s), {big + 28:,} B"
    assert "not restorable: generators" in lines[4]


def test_rlm_state_on_an_80_column_screen_counts_a_shared_group_once(tmp_path, _isolated_home):
    """`rlm state` itself (tmux, 80 columns) on a real snapshot where two names share one
    object and a third has a long name: every line fits, the shared group is counted once."""
    s = script(tmp_path / "s.json", [call(
        "rows = list(range(50_000))\nsame_rows = rows\n"
        "a_rather_long_variable_name_for_the_totals_by_region = {'east': 1}\nfinal('ok')")])
    rlm("run", "keep some rows", "--model", s, cwd=tmp_path)
    with Screen(["state", "last"], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    lines = [line for line in screen.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), screen
    shared = [line for line in lines if "rows" in line.split()[:1] or
              "same_rows" in line.split()[:1]]
    assert len(shared) == 2, screen
    assert sum("shared with" in line for line in shared) == 1, screen
    assert sum(bool(re.search(r"\d B  ", line)) for line in shared) == 1  # sized once, the
    assert any(line.split()[1:3] == ["with", "rows"] for line in shared)  # other says whose
    assert "a_rather_long_variable" in screen


def test_ps_marks_dead_workers_and_says_how_to_clear_them():
    from rlm.cli.listings import ps_lines

    rows = [{"session_id": "/h/sessions/20261203-1-aaaaaa", "pid": 12, "state": "idle",
             "alive": True, "activity": "waiting for prompts"},
            {"session_id": "20261203-2-bbbbbb", "pid": 13, "state": "stopped", "alive": False}]
    lines = ps_lines(rows, 80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].split()[:3] == ["20261203-1-aaaaaa", "12", "idle"]
    assert "1 stopped or dead worker record(s): 20261203-2-bbbbbb" in lines[2]
    assert "rlm ps --prune" in lines[3]


# ---------------------------------------------------------------- did-you-mean
def test_a_misspelled_file_in_the_task_is_named_and_its_near_file_loaded(tmp_path, _isolated_home):
    (tmp_path / "flights.csv").write_text("carrier,dep_delay\nAA,5\nUA,7\n")
    s = script(tmp_path / "s.json", [call("print(flights.dep_delay.mean())"), call("final('6.0')")])
    with Screen(["run", "summarise flights.cvs", "--model", s], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert "flights.cvs does not exist: loading flights.csv (one edit away) instead" in screen
    assert "inputs: flights: DataFrame 2×2" in screen
    assert "6.0" in screen


def test_a_misspelled_file_in_a_later_prompt_is_named_in_chat_resume_and_a_worker(
        tmp_path, _isolated_home):
    """The same rule for a session that already ran: a chat message, `rlm resume ID
    "..."` and a prompt a background worker runs name the near file they load."""
    (tmp_path / "flights.csv").write_text("carrier,dep_delay\nAA,5\nUA,7\n")
    (tmp_path / "planes.csv").write_text("tailnum,seats\nN1,150\n")
    (tmp_path / "crews.csv").write_text("crew,size\nA,4\nB,5\nC,6\n")
    shown = chat_session(tmp_path, [call("print(len(flights))\nfinal(str(len(flights)))")],
                         "how many rows in flights.cvs?\n/exit\n")
    assert "flights.cvs does not exist: loading flights.csv (one edit away) instead" in shown.stdout
    assert "loaded flights.csv (named in the prompt) as flights" in shown.stdout
    sid = json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)[0]["id"]
    b = script(tmp_path / "b.json", [call("print(len(planes))\nfinal(str(len(planes)))")])
    out = rlm("resume", sid, "how many in planes.cvs?", "--model", b, cwd=tmp_path,
              process=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "planes.cvs does not exist: loading planes.csv (one edit away) instead" in (
        out.stdout + out.stderr)
    log = Path(json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)[0]["path"])
    before = log.read_text().count('"custom_type":"final"')
    out = rlm("resume", sid, "how many in crews.cvs?", "--detach", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240  # the worker's run has answered
        while log.read_text().count('"custom_type":"final"') == before:
            assert time.monotonic() < deadline, "the detached run never answered"
            time.sleep(0.2)
        shown = rlm("attach", sid, "--no-follow", cwd=tmp_path)
    finally:
        rlm("stop", sid, cwd=tmp_path)
    assert "crews.cvs does not exist: loading crews.csv (one edit away) instead" in (
        shown.stdout + shown.stderr), shown.stdout + shown.stderr


def test_a_misspelled_file_with_two_near_files_names_both_and_loads_neither(tmp_path):
    """Two files one edit from the word: no guess is loaded, and the user is told both."""
    from rlm.app import RunOptions, with_named_files

    for name in ("sales_1.csv", "sales_2.csv"):
        (tmp_path / name).write_text("a\n1\n")
    options, notes = with_named_files("sum sales_3.csv", RunOptions(workdir=str(tmp_path)))
    assert options.named == []
    assert notes == ["sales_3.csv does not exist; did you mean sales_1.csv or sales_2.csv? "
                     "None was loaded: name the one you meant (or /load it)"]


def test_did_you_mean_for_models_slash_commands_and_cron_fields(tmp_path, _isolated_home):
    from rlm.longrun.schedule import ScheduleError, parse_when
    from rlm.spelling import did_you_mean, edits, one_edit_away

    assert edits("flights.cvs", "flights.csv") == 1 and edits("abc", "abd") == 1
    assert one_edit_away("flights.cvs", ["flights.csv", "notes.txt"]) == "flights.csv"
    assert one_edit_away("a.csv", ["b.csv", "c.csv"]) is None  # two are as near: no guess
    assert did_you_mean("/lod", ["/load", "/goal", "/state"]) == "did you mean /load?"
    out = rlm("run", "t", "--model", "locl", cwd=tmp_path, check=False)
    assert out.returncode != 0 and "unknown model 'locl' (did you mean local?)" in out.stderr
    assert "litellm" not in out.stderr.split("(did you mean local?)")[1].split(";")[0]
    with pytest.raises(ScheduleError, match=r"field 2 \(hour\) '25' is not valid: 0-23"):
        parse_when("0 25 * * *", 0)
    shown = chat_session(tmp_path, [], "/lod penguins.csv\n/exit\n")
    assert "unknown command /lod; did you mean /load?" in shown.stdout


# ------------------------------------------------------------- silent phases
def test_start_and_resume_say_what_is_happening_and_turns_continue(tmp_path, _isolated_home):
    (tmp_path / "orders.csv").write_text("region,total\neast,3\nwest,4\n")
    s = script(tmp_path / "a.json", [call("totals = orders.total.sum()\nprint(totals)"),
                                     call("final(str(totals))")])
    with Screen(["run", "sum the totals", "--model", s, "--context", "orders.csv"],
                cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert screen.index("starting the kernel...") < screen.index("rlm · model")
    assert "loading 1 input file(s): orders.csv..." in screen
    b = script(tmp_path / "b.json", [call("print(totals * 2)\nfinal(str(totals * 2))")])
    with Screen(["resume", "last", "double it", "--model", b], cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert re.search(r"starting the kernel and restoring its snapshot \([\d.,]+ [KMG]?B\)\.\.\.",
                     screen), screen
    assert re.search(r"^restored: .*\btotals\b", screen, re.M), screen
    assert "task: double it" in screen
    assert "── turn 3 ──" in screen and "── turn 1 ──" not in screen  # numbers continue


def test_the_code_being_written_is_drafted_live_then_shown_once_in_its_box():
    """While the model streams a fenced cell, the live area above the spinner shows the
    code written so far; once the reply ends the draft is gone and the box shows it once."""
    import io

    from rich.console import Console

    from rlm import events as ev
    from rlm.cli.render import Renderer

    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=80, color_system=None), animate=False)
    reply = "Summing.\n```python\ntotals = orders.groupby('region').total.sum()\nprint(tot"
    for i in range(0, len(reply), 5):
        r(ev.ModelText(reply[i:i + 5]))
    live = io.StringIO()
    Console(file=live, width=80, color_system=None).print(r._draft)
    assert live.getvalue() == "totals = orders.groupby('region').total.sum()\nprint(tot\n"
    r(ev.ModelText("als)\n```\n"))
    code = "totals = orders.groupby('region').total.sum()\nprint(totals)"
    r(ev.ModelReply(reply + "als)\n```\n", [code], {}))
    r(ev.CellStarted(code, 0))
    live = io.StringIO()
    Console(file=live, width=80, color_system=None).print(r._draft)
    assert live.getvalue().strip() == ""  # the draft is gone
    assert buf.getvalue().count("groupby('region')") == 1  # in the box only


def test_a_hosted_models_cell_is_on_screen_while_it_is_being_written(tmp_path, _isolated_home):
    """A hosted model (litellm, a real endpoint on 127.0.0.1) streams its tool call's
    code: while the model is still writing it (the endpoint holds the rest), the lines
    written so far are on the 80-column screen above the spinner, before any cell box;
    then the cell runs and its box shows it once."""
    from bench.fake_openai import serving, tool_reply

    code = D + "\n".join(f"part_{i} = {i} * D['three']" for i in range(8)) + "\nprint(part_7)"
    first = tool_reply(code)
    first["hold_after"] = json.dumps({"code": code}).index("part_5")  # 5 lines written
    with serving([first, tool_reply("final(str(part_7))")]) as server:
        env = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "OPENAI_API_BASE": server.base}
        with Screen(["run", "triple them", "--model", "openai/gpt-4o-mini"], cwd=tmp_path,
                    env=env) as scr:
            shown = scr.wait_for("part_4 = 4 * D['three']")
            assert "part_6" not in shown and "╭─ cell" not in shown, shown  # being written
            server.release.set()
            status, screen = scr.wait_exit()
    assert status == 0, screen
    assert screen.count("part_4 = 4 * D['three']") == 1, screen  # the draft went; the box shows it
    assert "╭─ cell" in screen and "21" in screen


def test_ctrl_c_while_the_model_writes_says_so_and_the_reply_goes_on(tmp_path, _isolated_home):
    """The first Ctrl-C while the model is still writing (no cell runs): the screen says
    the reply goes on and how to stop; it does, and the run answers."""
    from bench.fake_openai import serving, tool_reply

    first = tool_reply(D + "total = D['six'] * 7\nprint(total)")
    first["hold_after"] = json.dumps({"code": D + "total = D['six'] * 7\nprint(total)"}).index(
        "print(total")
    with serving([first, tool_reply("final(str(total))")]) as server:
        env = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "OPENAI_API_BASE": server.base}
        with Screen(["run", "multiply", "--model", "openai/gpt-4o-mini"], cwd=tmp_path,
                    env=env) as scr:
            scr.wait_for("total = D['six'] * 7")  # the held reply is on screen: the model writes
            scr.keys("C-c")
            scr.wait_for("Press Ctrl-C again")
            server.release.set()
            status, screen = scr.wait_exit()
    assert status == 0, screen
    assert squeeze("Ctrl-C: no cell is running; the model's reply goes on. Press Ctrl-C "
                   "again to stop the run") in squeeze(screen), screen
    assert "42" in screen and "Traceback" not in screen


@pytest.mark.slow  # joins the real 1.1 GB offline model file, then runs it
def test_first_use_of_the_default_model_says_it_joins_the_file_then_waits_then_streams(
        tmp_path, _isolated_home):
    """`rlm run` with no flags on a machine whose model cache is empty: the screen says
    the model file is being joined (with its progress), then the spinner says the model is
    reading the prompt, then that it is writing (tokens counted as they stream); no
    phase is silent."""
    (tmp_path / "nums.csv").write_text("n\n1\n2\n3\n4\n")
    with Screen(["run", "how many even numbers are in nums.csv?"], cwd=tmp_path) as scr:
        joined = scr.wait_for("GB): 100%")
        assert "rlm: preparing the offline model file (joined once, on first use) (" in joined
        reading = scr.wait_for("local: reading the prompt (")
        assert reading.index("GB): 100%") < reading.index("local: reading the prompt (")
        # the reply streams: the spinner says so and counts its tokens (seconds of it)
        scr.wait_for(" tokens generated")
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert "local: writing" not in screen  # the spinner is gone from the final screen
    assert "Traceback" not in screen, screen


def test_log_prints_each_cell_once_and_the_final_answer_as_text(tmp_path, _isolated_home):
    replies = [f"Summing.\n```python\n{D}the_total = D['three'] + 4\nprint(the_total)\n```",
               call("final(str(the_total))")]
    _run_json(tmp_path, "log", replies, "add three and four")
    out = rlm("log", cwd=tmp_path).stdout
    assert out.count("the_total = D['three'] + 4") == 1, out
    assert "final: 7\n(✓ verified)" in out and '{"answer"' not in out


def test_a_native_calls_code_is_drafted_as_it_streams_redacted_then_shown_once(
        tmp_path, monkeypatch):
    """A streaming model's native tool call: its code reaches the user line by line as
    the arguments arrive (ModelCode: the live draft above the spinner), a key in it
    redacted; the run's box then shows the cell once."""
    import io

    from rich.console import Console

    from rlm import app
    from rlm.cli.render import Renderer
    from rlm.config import Config
    from rlm.events import CellStarted, ModelCode
    from rlm.llm import ScriptedLLM
    from rlm.session.store import SessionStore

    key = "sk-test-" + "k3y" * 12
    monkeypatch.setenv("OPENAI_API_KEY", key)
    code = "\n".join([f"row_{i} = {i} * 2  # {'x' * 40}" for i in range(30)]
                     + [f"token = {key!r}", "print(row_29)"])
    llm = ScriptedLLM([call(code), call("final('done')")], stream=True)
    config = Config(home=tmp_path, model="script:main", cell_timeout=60)
    session = SessionStore.create(tmp_path, model="script:main", task="t")
    agent = app.build_agent(session, config, llm=llm)
    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=80, color_system=None), animate=False)
    drafts: list[list[str]] = []
    with agent:
        for e in agent.run("double them"):
            if isinstance(e, ModelCode):
                drafts.append(list(e.lines))
            if isinstance(e, CellStarted):
                live = io.StringIO()
                Console(file=live, width=200, color_system=None).print(r._draft)
                assert live.getvalue().strip() == ""  # the draft is gone once the box shows
            r(e)
            if isinstance(e, ModelCode) and len(drafts) == 5:
                live = io.StringIO()
                Console(file=live, width=200, color_system=None).print(r._draft)
                assert "row_" in live.getvalue()  # drafted live while it streams
    assert len(drafts) > 5  # line by line, not whole at the end
    written = [line for d in drafts for line in d]
    assert written[:30] == code.split("\n")[:30]  # every line, in order, none twice
    assert written[30:] == ["token = '[redacted]'", "print(row_29)",  # the key redacted
                           "final('done')"]  # the next reply's cell is drafted too
    assert buf.getvalue().count("row_7 = 7 * 2") == 1  # the box shows the cell once
