"""Issue 15.6/15.11 through the `rlm` command: what a corrupt log's hint says works, a cell
that deletes its own session, a last entry whose newline is missing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import call, rlm, script


def _run(tmp_path: Path, replies: list, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = rlm("run", "t", "--model", script(tmp_path / "m.json", replies), "--json", *extra,
               cwd=tmp_path, check=False)
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def test_corrupt_log_hint_names_a_fix_that_works(tmp_path):
    (tmp_path / "one.txt").write_text("1")  # the task's data: the answer rests on it
    _, res = _run(tmp_path, [call("x = int(open('one.txt').read())\nprint(x)"),
                             call("final(str(x))")])
    sid, path = res["session_id"], Path(res["session_path"])
    lines = path.read_text().splitlines(keepends=True)
    bad = len(lines) - 1  # a malformed entry that is not the (torn) last line
    lines[bad - 1] = "{not json\n"
    path.write_text("".join(lines))
    failed = rlm("log", sid, cwd=tmp_path, check=False)
    assert failed.returncode != 0 and failed.stderr.count("\n") <= 2
    hint = failed.stderr.strip().splitlines()[-1]
    assert "--from" not in hint and f"{path}:{bad}" in hint
    subprocess.run(hint.split("): ", 1)[1], shell=True, check=True, cwd=tmp_path)
    assert (path.parent / "session.jsonl.bak").read_text() == "".join(lines)  # nothing lost
    assert rlm("log", sid, cwd=tmp_path).returncode == 0
    again = rlm("resume", sid, "again", "--model", script(tmp_path / "r.json", [call("print(int(open('one.txt').read()) + 1)\nfinal('2')")]),
                "--json", cwd=tmp_path)
    assert json.loads(again.stdout.strip().splitlines()[-1])["final"] == "2"


DELETE_SESSION = "import os, shutil; shutil.rmtree(os.environ['RLM_SESSION_DIR'])"


def test_the_sandboxed_kernel_cannot_delete_its_session(tmp_path):
    """The default: the session dir is read-only to the kernel, the cell fails, the log
    is whole and the run goes on."""
    proc, res = _run(tmp_path, [call(DELETE_SESSION), call("print('done')\nfinal('done')")])
    if "unsandboxed" in proc.stdout + proc.stderr:
        pytest.skip("no user namespaces here: the kernel runs unsandboxed")
    assert res["final"] == "done", proc.stderr
    assert "Read-only file system" in Path(res["session_path"]).read_text()


def test_a_cell_that_deletes_its_own_session_fails_in_one_line(tmp_path):
    """Unsandboxed, the session directory removed by a cell: the run says so in one line
    and exits non-zero; --json reports no session_path that no longer exists (it used to
    exit 0, the log's writes going to an unlinked file)."""
    proc, res = _run(tmp_path, [call(DELETE_SESSION), call("final('done')")], "--no-sandbox")
    assert proc.returncode == 1, proc.stderr
    assert res["reason"] == "error" and "was removed while the session ran" in res["error"]
    assert res["session_path"] is None and res["final"] is None
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"rlm: error: {res['error']}"


def test_an_append_after_the_log_was_unlinked_is_refused(tmp_path):
    from rlm.errors import SessionGone
    from rlm.session.entries import MessageEntry
    from rlm.session.store import SessionStore

    s = SessionStore.create(tmp_path, model="m", task="t")
    s.append(MessageEntry(message={"role": "user", "content": "kept"}))
    s.path.unlink()
    with pytest.raises(SessionGone, match="was removed"):
        s.append(MessageEntry(message={"role": "user", "content": "lost"}))
