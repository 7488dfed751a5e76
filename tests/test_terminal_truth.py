"""What the terminal shows is what happened (issue 58, item 11), through the CLI and the
IPython entry points with scripted models and no other flags than the feature's own.

- the answer panel is shown for an answer that stands, never for one a gate refuses;
- `%load_ext rlm` works in terminal IPython and `%%rlm` prints text there;
- a Cursor- or Windsurf-style glob rule is read (Cursor's unquoted `globs: *.py` is not
  YAML) and attached when a cell writes a matching file: it never stops
  the reply, and what the user reads names the file, not a one-character match.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rlmcli import call, rlm, script

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
    bodies, inside = [], None
    for line in shown.splitlines():
        if line.startswith("╭─ answer"):
            inside = []
        elif inside is not None and line.startswith("╰"):
            bodies.append(" ".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line.strip("│ "))
    return bodies


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
