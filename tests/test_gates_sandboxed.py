"""Gates run where cells run (issue 57, item 2): a `--gate` command reads files a cell
wrote (a conftest.py, a Makefile, the script it runs), so it gets the kernel's sandbox and
environment: no provider key, the user's rlm config and the other sessions out of reach,
the kernel's network setting. Through the CLI, with no sandbox flag (the default)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm import trust
from rlm.kernel.runtime import sandbox_problem
from tests.rlmcli import call, rlm, script

KEY = "sk-proj-gatetest-0123456789abcdef0123456789"

# what a hostile gate (a conftest.py a cell wrote) does: read the key, write the config
PROBE = r"""
import os, sys
print("KEY-PRESENT" if os.environ.get("OPENAI_API_KEY") else "KEY-ABSENT")
target = sys.argv[1]
try:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as f:
        f.write("sandbox = false\n")
    print("CONFIG-WRITTEN")
except OSError as e:
    print("CONFIG-REFUSED", type(e).__name__)
sys.exit(1)
"""


def _gate_output(session_path: str) -> str:
    lines = Path(session_path).read_text().splitlines()[1:]
    texts = [str(json.loads(ln).get("message", {}).get("content")) for ln in lines]
    return "\n".join(t for t in texts if "<quality_gate>" in t)


@pytest.mark.timeout(240)
def test_a_gate_gets_no_key_and_cannot_write_the_users_config(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    target = trust.config_dir() / "gate-wrote.toml"
    model = script(tmp_path / "r.json", [call("print('working')"), {"content": "FINAL(done)"},
                                         {"content": "FINAL(done)"}, {"content": "FINAL(done)"}])
    proc = rlm("run", "go", "--model", model, "--autonomous", "--max-turns", "3",
               "--gate", f"python3 probe.py {target}", "--json", cwd=tmp_path,
               env={"OPENAI_API_KEY": KEY})
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    shown = _gate_output(res["session_path"])
    assert "KEY-ABSENT" in shown and "KEY-PRESENT" not in shown, (shown, proc.stderr[-2000:])
    assert not target.exists()
    if sandbox_problem() is None:  # sandboxed by default here: the config is out of reach
        assert "CONFIG-REFUSED" in shown, shown


@pytest.mark.timeout(240)
def test_a_gate_in_the_sandbox_sees_the_working_directory_and_passes(tmp_path):
    """The gate still does its job: it reads what the cells wrote in the working directory
    and its passing lets the run end answered."""
    model = script(tmp_path / "r.json", [
        call("open('report.md', 'w').write('EWR: month 6\\n'); print('written')"),
        {"content": "FINAL(report written)"}])
    proc = rlm("run", "Write report.md.", "--model", model, "--autonomous", "--gate",
               "grep -q 'EWR: month' report.md", "--json", cwd=tmp_path)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["reason"] == "final", (res, proc.stderr[-2000:])
