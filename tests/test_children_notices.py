"""What the parent and its user are told of its children (issue 58, item 9), through the
CLI with scripted parents and children and real kernels:

- a child still at work when its parent's run ends is cancelled: the user is shown it
  (name, task, turns and tokens spent, whether its partial work is kept) and the model is
  told at the next run, once; Ctrl-C says which children it cancelled;
- which results the parent read is in the log: a session opened again and compacted lists
  only the ones truly unread;
- `<children_state>` is one live note: the model sees only the newest, the log keeps all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.session.context import build_messages
from rlm.session.store import SessionStore
from tests.rlmcli import ANSWERED, call, rlm, script

pytestmark = pytest.mark.timeout(300)


def used(tokens: int) -> dict:
    return {"input_tokens": tokens - tokens // 10, "output_tokens": tokens // 10}


def log(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def notes(path: str | Path) -> list[str]:
    return [e["content"] for e in log(path) if e.get("custom_type") == "children_state"]


def seen(path: str | Path) -> str:
    """What the model is sent now from this session's log (its projection)."""
    session = SessionStore.open(str(path))
    try:
        msgs = build_messages(session.branch(), system_prompt="", native_tools=True)
    finally:
        session.close()
    return "\n".join(str(m.get("content")) for m in msgs)


def slow_child(tmp_path: Path, tokens: int = 700) -> str:
    """A child that says it started (a file named after its context), then works on."""
    return script(tmp_path / "slow.json", [
        {**call("import os, time\nopen('started-' + context, 'w').close()\n"
                "while True:\n    time.sleep(0.05)"), "usage": used(tokens)},
        call("final('never')"),
    ])


def leave_running(name: str, task: str) -> dict:
    """A parent cell that spawns a child and answers once the child's cell runs."""
    return call(f"import os, time\nh = rlm_spawn({task!r}, name={name!r}, context={name!r})\n"
                f"while not os.path.exists('started-{name}'):\n    time.sleep(0.05)\n"
                "final('left it at work')")


def test_a_child_at_work_when_the_run_ends_is_shown_to_the_user_and_told_to_the_model(
        tmp_path, _isolated_home):
    """Before: the child was cancelled as the run closed, with no word to anyone. Now the
    --json object and the terminal name it with its spend and what is kept, and the next
    run's model reads one `<children_state>` note saying so; a later run's note supersedes
    it (the model sees the newest only, the log keeps both)."""
    child = slow_child(tmp_path)
    first = script(tmp_path / "p1.json", [leave_running("slowpoke", "count the big table")])
    out = rlm("run", "go", "--model", first, "--sub-model", child, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "left it at work", out.stderr[-2000:]
    [c] = res["cancelled_children"]
    assert (c["name"], c["task"], c["turns"], c["tokens"]) == \
        ("slowpoke", "count the big table", 1, 700)
    assert c["why"] == "its parent's run ended while it was at work"
    assert c["partial_work"].startswith("partial work kept: files it wrote in the shared "
                                        "working directory stay")
    path, sid = res["session_path"], res["session_id"]
    [note] = notes(path)
    assert "- slowpoke (cancelled; cancelled: its parent's run ended while it was at work; " \
           "1 turns, 700 tokens; partial work kept" in note and "count the big table" in note

    # the next run (terminal output): its model reads the note; its own child left at work
    # is shown on the terminal; the note written then supersedes the first one
    second = script(tmp_path / "p2.json", [leave_running("second", "sum the column")])
    out = rlm("resume", sid, "again", "--model", second, "--sub-model", child, cwd=tmp_path)
    assert "child second cancelled (its parent's run ended while it was at work): " \
           "'sum the column'; 1 turns, 700 tokens; partial work kept" in out.stdout
    first_note, second_note = notes(path)
    assert first_note == note and "- second (cancelled" in second_note
    assert "slowpoke" not in second_note  # the model was told of it: read
    third = script(tmp_path / "p3.json", [call("final('ok')")])
    out = rlm("resume", sid, "and now?", "--model", third, cwd=tmp_path)
    assert out.returncode in ANSWERED, out.stderr[-2000:]
    shown = seen(path)
    assert shown.count("<children_state>") == 1 and "- second (cancelled" in shown
    assert notes(path) == [first_note, second_note]  # told once each, kept in the log


def test_ctrl_c_says_which_children_it_cancelled(tmp_path, _isolated_home):
    """Ctrl-C in a parent cell cancels the children at work: the line shown for the press
    names each, with its spend so far; the model is told in a `<children_state>` note."""
    import threading
    import time

    from rlm import app
    from rlm.events import Notice

    child = slow_child(tmp_path, tokens=300)
    parent = script(tmp_path / "parent.json", [
        call("import os, time\nh = rlm_spawn('scan the logs', name='scanner', "
             "context='scanner')\nwhile True:\n    time.sleep(0.05)"),
        call("print('after')"),
        call("final('stopped')"),
    ])
    options = app.RunOptions(overrides={"model": parent, "sub_model": child},
                             workdir=str(tmp_path))
    run = app.SessionRun.new("run", "go", options)
    events: list = []
    with run:
        t = threading.Thread(target=lambda: events.extend(run.drive("go")))
        t.start()
        deadline = time.monotonic() + 120
        while not (tmp_path / "started-scanner").exists() and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        said = run.agent.pieces._ctrl_c(True)  # what a Ctrl-C press during the cell shows
        t.join(180)
        path = run.session.path
    assert "child scanner cancelled (the user pressed Ctrl-C while it was at work): " \
           "'scan the logs'; 1 turns, 300 tokens" in said.text, said.text
    assert isinstance(said, Notice) and said.text.startswith("Ctrl-C: interrupting the cell")
    assert events[-1].final == "stopped"
    [note] = notes(path)
    assert "- scanner (cancelled; cancelled: the user pressed Ctrl-C" in note


def test_a_resumed_session_lists_only_the_children_whose_results_were_not_read(
        tmp_path, _isolated_home):
    """Run 1 reads `d`'s result and leaves `e`'s unread. Before, a resume forgot what was
    read and the compaction after it listed both as "result not read yet"; now the log
    records the reads and only `e` is listed."""
    quick = script(tmp_path / "quick.json", [call("final('answer of ' + context)")])
    first = script(tmp_path / "p1.json", [
        call("d = rlm_spawn('first task', name='d', context='d')\nprint(d.result(120))\n"
             "e = rlm_spawn('second task', name='e', context='e')\nrlm_wait([e])"),
        call("final('ok')"),
    ])
    out = rlm("run", "go", "--model", first, "--sub-model", quick, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "ok", out.stderr[-2000:]
    summary = script(tmp_path / "sum.json", ["## Goal\nfan out"] * 3)
    again = script(tmp_path / "p2.json", [
        call("print(' '.join(str(i) for i in range(600)))"),
        call("compact.run()"),
        call("final('resumed')"),
    ])
    out = rlm("resume", res["session_id"], "go on", "--model", again,
              "--compaction-model", summary, "--keep-recent-tokens", "10", "--json",
              cwd=tmp_path)
    assert json.loads(out.stdout.strip().splitlines()[-1])["final"] == "resumed", \
        out.stderr[-2000:]
    [note] = notes(res["session_path"])
    assert "- e (done; ended, result not read yet" in note
    assert "- d (" not in note, note
