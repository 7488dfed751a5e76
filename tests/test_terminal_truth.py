"""What the terminal shows is what happened (issue 58, item 11), through the CLI and the
IPython entry points with scripted models and no other flags than the feature's own.

- the answer panel is shown for an answer that stands, never for one a gate refuses;
- `%load_ext rlm` works in terminal IPython and `%%rlm` prints text there;
- Ctrl-C acts at once on what runs — a gate, a compaction's summary — and is counted per
  piece of work; in chat it never leaves chat;
- a Cursor- or Windsurf-style glob rule is read (Cursor's unquoted `globs: *.py` is not
  YAML) and attached when a cell writes a matching file: it never stops
  the reply, and what the user reads names the file, not a one-character match.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rlmcli import call, rlm, script
from terminal_screen import Screen, boxes

from rlm.agent.interrupts import DOUBLE_PRESS_S
from rlm.cli.chat import LEAVE
from rlm.outcome import EXIT_NO_ANSWER

READ = "total = int(open('six.txt').read()) * 7\nprint(total)\n"


def _run(tmp_path: Path, replies: list, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The terminal's run and --json's, each in a folder of its own (a file the first
    wrote would pass the second's gate)."""
    s = script(tmp_path / "s.json", replies)
    runs = []
    for where, extra in (("shown", ()), ("json", ("--json",))):
        (tmp_path / where).mkdir()
        (tmp_path / where / "six.txt").write_text("6")
        for tool in (".cursor", ".windsurf"):
            if (tmp_path / tool).exists():
                shutil.copytree(tmp_path / tool, tmp_path / where / tool)
        runs.append(rlm("run", "the task", "--model", s, *args, *extra, cwd=tmp_path / where))
    return runs[0], json.loads(runs[1].stdout.strip().splitlines()[-1])


def _panels(shown: str) -> list[str]:
    """The bodies of the answer panels the terminal drew."""
    return boxes(shown, "answer")


def test_the_answer_panel_shows_only_the_answer_that_stands(tmp_path, _isolated_home):
    refused = call(READ + "final('first ' + str(total))")
    accepted = call("open('out.txt', 'w').write('x')\n" + READ + "final('second ' + str(total))")
    shown, out = _run(tmp_path, [refused, accepted], "--gate", "test -f out.txt")
    assert out["status"] == "answered" and out["final"] == "second 42"
    assert _panels(shown.stdout) == ["second 42"], shown.stdout  # 'first 42' never drawn


def test_no_answer_panel_when_the_gate_refuses_every_answer(tmp_path, _isolated_home):
    shown, out = _run(tmp_path, [call(READ + "final(str(total))")] * 4,
                      "--gate", "echo never; exit 1")
    assert out["status"] == "limit" and "not answered" in shown.stdout
    assert _panels(shown.stdout) == [], shown.stdout


def test_load_ext_rlm_in_terminal_ipython(tmp_path, _isolated_home):
    """Terminal IPython's own app is a sibling singleton of a kernel's: `%load_ext rlm`
    raised MultipleInstanceError there; and its display shows no Markdown, so `%%rlm`
    printed `<IPython.core.display.Markdown object>` for every line."""
    s = script(tmp_path / "s.json", [call(READ + "final(str(total))")])
    (tmp_path / "six.txt").write_text("6")
    code = ("ip = get_ipython(); ip.run_line_magic('load_ext', 'rlm'); "
            f"ip.run_cell_magic('rlm', '--model {s}', 'six times seven?'); "
            "print('held', total)")
    proc = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor",
                           "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    assert "MultipleInstanceError" not in text and "Traceback" not in text, text
    assert "IPython.core.display" not in text, text
    assert "Final answer" in text and "✓ verified" in text and "held 42" in text, text


# front matter as Cursor writes it (`*.py` unquoted is not YAML: it was skipped whole as
# "not valid YAML"), quoted, as a list, and Windsurf's glob trigger
GLOB_RULES = {
    "cursor-bare": (".cursor/rules/py.mdc", "description: python files\nglobs: *.py\n"
                    "alwaysApply: false"),
    "cursor-quoted": (".cursor/rules/py.mdc", 'globs: "*.py"\nalwaysApply: false'),
    "cursor-list": (".cursor/rules/sub/py.mdc", 'globs: ["*.py", "*.ipynb"]'),
    "windsurf": (".windsurf/rules/py.md", "trigger: glob\nglobs: *.py"),
}


@pytest.mark.parametrize("spelling", sorted(GLOB_RULES))
def test_a_glob_rule_is_attached_not_a_stop(tmp_path, _isolated_home, spelling):
    where, front = GLOB_RULES[spelling]
    (tmp_path / where).parent.mkdir(parents=True)
    (tmp_path / where).write_text(f"---\n{front}\n---\nPython files start with a "
                                  "docstring naming their author: SENTINEL-RULE.\n")
    writes = call("open('report.py', 'w').write('x = 1\\n')\n" + READ)
    shown, out = _run(tmp_path, [writes, call(READ + "final(str(total))")])
    assert (tmp_path / "json" / "report.py").exists()
    assert out["status"] == "answered"
    entries = [json.loads(x) for x in Path(out["session_path"]).read_text().splitlines()[1:]]
    replies = [e for e in entries if e.get("type") == "message"
               and e["message"].get("role") == "assistant"]
    assert len(replies) == 2  # the reply that wrote report.py was not stopped and retried
    notes = [e for e in entries if e.get("custom_type") == "rule_injection"]
    assert len(notes) == 1 and "SENTINEL-RULE" in notes[0]["content"]
    assert notes[0]["data"]["interrupted"] is False
    assert "'report.py'" in shown.stdout and "*.py" in shown.stdout, shown.stdout
    assert "matched 'o'" not in shown.stdout and "matched 'x'" not in shown.stdout


# ------------------------------------------------------------------ Ctrl-C on every phase
NAP = "import time\nprint('{label}', flush=True)\ntime.sleep(120)"
# the second cell starts past the double-press window after the first press
LATER_NAP = ("import time\ntime.sleep(DOUBLE_PRESS_S + 0.5)\nprint('{label}', flush=True)\n"
             "time.sleep(120)").replace("DOUBLE_PRESS_S", repr(DOUBLE_PRESS_S))
ANSWER = READ + "final(str(total))"


def _screen_run(tmp_path: Path, replies: list, *args: str, env: dict | None = None) -> Screen:
    (tmp_path / "six.txt").write_text("6")
    s = script(tmp_path / "s.json", replies)
    return Screen(["run", "the task", "--model", s, *args], cwd=tmp_path, env=env)


def test_ctrl_c_stops_a_running_gate_and_the_run_at_once(tmp_path, _isolated_home):
    """The gate is named while it runs; one press kills it (its process group) and ends
    the run as interrupted — not answered, no answer panel, nothing left running."""
    marker = f"gate-{uuid.uuid4().hex[:8]}"
    gate = f"echo {marker} started; sleep 97.{len(marker)}; touch gate-finished"
    with _screen_run(tmp_path, [call(ANSWER)], "--gate", gate) as scr:
        scr.wait_for(f"running the gate `echo {marker}")
        scr.keys("C-c")
        status, screen = scr.wait_exit()
    assert status == EXIT_NO_ANSWER, screen
    assert squeeze(f"Ctrl-C: stopped running the gate `echo {marker}") in squeeze(screen)
    assert "run ended (interrupted" in screen and "✓ verified" not in screen
    assert _panels(screen) == [] and not (tmp_path / "gate-finished").exists()
    left = subprocess.run(["pgrep", "-f", f"sleep 97.{len(marker)}"], capture_output=True)
    assert left.returncode == 1, left.stdout  # the gate's process group was killed


def test_ctrl_c_stops_a_compaction_at_once_and_the_context_is_kept(tmp_path, _isolated_home):
    """A summary is named while the compaction model reads its prompt (which sends nothing
    yet); one press drops the call, records why, and ends the run; the context is as it
    was (no compaction entry)."""
    from bench.fake_openai import serving

    replies = [call(READ + "compact.run()"), call(ANSWER)]
    with serving([{"content": "a summary", "hold_first": True}]) as server:
        env = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "OPENAI_API_BASE": server.base,
               "RLM_COMPACTION_MODEL": "openai/gpt-4o-mini"}
        with _screen_run(tmp_path, replies, "--keep-recent-tokens", "10", env=env) as scr:
            scr.wait_for("compacting the context")
            scr.keys("C-c")
            status, screen = scr.wait_exit()
            server.release.set()
    assert status == EXIT_NO_ANSWER, screen
    assert squeeze("Ctrl-C: stopped compacting the context") in squeeze(screen), screen
    assert "run ended (interrupted" in screen
    log = [json.loads(x) for x in _session_log(_isolated_home).read_text().splitlines()[1:]]
    assert not [e for e in log if e.get("type") == "compaction"]
    outcomes = [e["data"]["reason"] for e in log if e.get("custom_type") == "compaction_outcome"]
    assert outcomes and "stopped by the user" in outcomes[-1]


def test_presses_count_per_piece_of_work_not_per_run(tmp_path, _isolated_home):
    """Interrupting one stuck cell, and later another, interrupts each: the run goes on
    and answers (the second press was counted per run before, and ended it)."""
    replies = [call(NAP.format(label="first nap")), call(LATER_NAP.format(label="second nap")),
               call(ANSWER)]
    with _screen_run(tmp_path, replies) as scr:
        scr.ctrl_c_at("first nap\n", "second nap\n")
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert squeeze(screen).count(squeeze("Ctrl-C: interrupting the cell")) == 2, screen
    assert "Ctrl-C again: stopping" not in screen and "✓ verified" in screen


def test_a_quick_double_ctrl_c_in_chat_stops_the_run_and_chat_stays(tmp_path, _isolated_home):
    (tmp_path / "six.txt").write_text("6")
    s = script(tmp_path / "s.json", [call(NAP.format(label="chat nap")), call(ANSWER)])
    with Screen(["chat", "--model", s], cwd=tmp_path) as scr:
        scr.wait_for("rlm>")
        scr.type("take a nap")
        scr.wait_for("chat nap\n")
        scr.keys("C-c")  # (presses sent at once reach the process as one signal)
        scr.wait_for("Press Ctrl-C again")
        scr.keys("C-c")
        scr.wait_for("run ended (interrupted)")
        scr.wait_for("rlm>", after=scr.text().index("run ended (interrupted)"))
        scr.keys("C-c")  # a press more than needed lands at the prompt: never leaves chat
        scr.wait_for(LEAVE)
        assert scr.dead() is None
        scr.type("/exit")
        status, screen = scr.wait_exit()
    assert status == 0, screen
    assert "Traceback (most recent call last):" not in screen


def _session_log(home: Path) -> Path:
    (path,) = (home / "sessions").glob("*/session.jsonl")
    return path


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)
