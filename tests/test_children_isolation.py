"""Children on working copies (issue 58, item 9), through the CLI with scripted parents and
children and real kernels:

- a child on a copy never changes its parent's project memory (`.agent/`), whatever path
  it writes it by: those changes are refused and named, the rest is applied;
- a child on a git worktree starts from its parent's working state (uncommitted changes,
  untracked data files, changes an earlier child brought back), not from HEAD alone, and
  its own changes apply on top of that state; past the bound the spawn is refused, naming
  the fix.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.rlmcli import call, rlm, script

pytestmark = pytest.mark.timeout(300)


def run_json(cwd: Path, tmp_path: Path, parent: list, child: list) -> tuple[dict, str]:
    p = script(tmp_path / "parent.json", parent)
    c = script(tmp_path / "child.json", child)
    proc = rlm("run", "go", "--model", p, "--sub-model", c, "--json", cwd=cwd)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, printed(out["session_path"])


def printed(session_path: str) -> str:
    """What the parent's cells printed (what its model was shown)."""
    out = []
    for line in Path(session_path).read_text().splitlines():
        e = json.loads(line)
        msg = e.get("message") or {}
        if e.get("type") == "message" and msg.get("role") == "tool":
            out.append(str(msg.get("content")))
    return "\n".join(out)


def memory(root: Path) -> dict[str, str]:
    """The memory files as the child could change them: the parent's own end-of-run line
    (rlm.memory: history.log) and its lock/ignore files are the parent's writes, left out."""
    files = {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
             if p.is_file() and p.name not in (".lock", ".gitignore")}
    if "history.log" in files:
        files["history.log"] = "".join(
            line for line in files["history.log"].splitlines(keepends=True)
            if '"action": "run"' not in line)
    return files


SPAWN = ("import json\nh = rlm_spawn('tidy the notes', isolation={how!r})\nh.result(120)\n"
         "print('ISO', json.dumps(h.status()['isolation']))")


def iso(text: str) -> dict:
    return json.loads(next(ln for ln in text.splitlines() if ln.startswith("ISO "))[4:])


def test_a_child_on_a_copy_never_changes_the_parents_memory_by_any_path(
        tmp_path, _isolated_home):
    """Before, `.agent/state.md` written by a plain file call in a copy child was applied to
    the parent. Now every change that lands in the memory directory is refused and named
    (a write, a rename into place, a new nested file, a `..` path, a write through a link
    the child made, a deletion), the child's other files are applied, and `.AGENT/` on
    this case-sensitive filesystem is another directory: applied, memory untouched."""
    work = tmp_path / "work"
    (work / ".agent").mkdir(parents=True)
    for name in ("state.md", "conventions.md", "context.json", "history.log", "old.md"):
        (work / ".agent" / name).write_text(f"parent's {name}\n")
    before = memory(work / ".agent")
    child = [call(
        "import os, pathlib\n"
        "open('.agent/state.md', 'w').write('child took over\\n')\n"
        "open('tmp.md', 'w').write('renamed in\\n')\n"
        "os.replace('tmp.md', '.agent/conventions.md')\n"
        "os.makedirs('.agent/deep/er')\nopen('.agent/deep/er/x.md', 'w').write('x')\n"
        "pathlib.Path('sub').mkdir()\n"
        "pathlib.Path('sub/../.agent/context.json').write_text('{\"forged\": 1}')\n"
        "os.symlink('.agent', 'mem')\nopen('mem/history.log', 'a').write('forged\\n')\n"
        "os.remove('.agent/old.md')\n"
        "os.makedirs('.AGENT')\nopen('.AGENT/state.md', 'w').write('another dir\\n')\n"
        "open('result.txt', 'w').write('the child result\\n')\n"
        "final('tidied')")]
    out, text = run_json(work, tmp_path, [call(SPAWN.format(how="copy")), call("final('ok')")],
                         child)
    assert out["final"] == "ok", text
    got = iso(text)
    assert got["outcome"] == "applied"
    assert sorted(got["refused"]) == [".agent/context.json", ".agent/conventions.md",
                                      ".agent/deep/er/x.md", ".agent/history.log",
                                      ".agent/old.md", ".agent/state.md"]
    assert "change(s) to the parent's project memory" in got["detail"]
    assert memory(work / ".agent") == before  # not one byte of memory changed
    assert (work / "result.txt").read_text() == "the child result\n"
    assert (work / ".AGENT" / "state.md").read_text() == "another dir\n"
    kept = Path(got["copy"])  # what was refused stays in the child's copy, for the user
    assert (kept / ".agent" / "state.md").read_text() == "child took over\n"


def test_memory_reached_through_a_link_in_the_parents_tree_is_refused(
        tmp_path, _isolated_home):
    """The parent's `.agent` is a link to `memstore/`: the copy holds `memstore/state.md`
    as a plain file (links are not copied), so the child edits memory under another
    name. The apply step compares directories by identity, not by name: refused."""
    work = tmp_path / "work"
    (work / "memstore").mkdir(parents=True)
    (work / "memstore" / "state.md").write_text("parent's state\n")
    (work / ".agent").symlink_to("memstore")
    child = [call("open('memstore/state.md', 'w').write('child took over\\n')\n"
                  "open('fine.txt', 'w').write('ok\\n')\nfinal('done')")]
    out, text = run_json(work, tmp_path, [call(SPAWN.format(how="copy")), call("final('ok')")],
                         child)
    got = iso(text)
    assert got["refused"] == ["memstore/state.md"], got
    assert (work / "memstore" / "state.md").read_text() == "parent's state\n"
    assert (work / "fine.txt").read_text() == "ok\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                           *args], check=True, capture_output=True, text=True).stdout


def repo_with_history(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a as committed\n")
    (repo / "gone.txt").write_text("deleted later\n")
    (repo / ".gitignore").write_text("*.tmp\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


READ_TREE = (
    "import json, os\n"
    "def read(p):\n    return open(p).read() if os.path.exists(p) else None\n"
    "seen = {p: read(p) for p in ('a.txt', 'data/rows.csv', 'b.txt', 'scratch.tmp', "
    "'gone.txt')}\n"
    "if context == 'edit':\n"
    "    open('data/rows.csv', 'a').write('3,c\\n')\n"
    "    open('a.txt', 'a').write('and the child\\n')\n"
    "    open('c.txt', 'w').write('new from the child\\n')\n"
    "    os.makedirs('.agent', exist_ok=True)\n"
    "    open('.agent/state.md', 'w').write('child took over\\n')\n"
    "else:\n    open('b.txt', 'w').write('b from the first child\\n')\n"
    "final(json.dumps(seen))")


def test_a_worktree_child_sees_the_parents_working_state_and_its_changes_apply_on_it(
        tmp_path, _isolated_home):
    """The parent edits a tracked file, writes an untracked data file and an ignored one and
    deletes a committed file; a first worktree child adds `b.txt` (applied). A second child
    sees all of it but the ignored file (and not the deleted one); before, it saw HEAD. Its
    edits to the data file, the edited tracked file and a new file apply on the parent's
    working state; its `.agent/state.md` is refused."""
    repo = repo_with_history(tmp_path)
    parent = [call(
        "import json, os\nopen('a.txt', 'a').write('and the parent\\n')\n"
        "os.makedirs('data')\nopen('data/rows.csv', 'w').write('n,x\\n1,a\\n2,b\\n')\n"
        "open('scratch.tmp', 'w').write('ignored\\n')\nos.remove('gone.txt')\n"
        "first = rlm_spawn('write b', context='first', isolation='worktree')\n"
        "print('FIRST', first.result(120))\n"
        "h = rlm_spawn('read the data', context='edit', isolation='worktree')\n"
        "print('SEEN', h.result(120))\nprint('ISO', json.dumps(h.status()['isolation']))"),
        call("final('ok')")]
    out, text = run_json(repo, tmp_path, parent, [call(READ_TREE)])
    assert out["final"] == "ok", text
    assert "SEEN " in text, text
    seen = json.loads(next(ln for ln in text.splitlines() if ln.startswith("SEEN "))[5:])
    assert seen == {"a.txt": "a as committed\nand the parent\n",
                    "data/rows.csv": "n,x\n1,a\n2,b\n", "b.txt": "b from the first child\n",
                    "scratch.tmp": None, "gone.txt": None}
    got = iso(text)
    assert got["outcome"] == "applied", got
    assert got["refused"] == [".agent/state.md"]
    assert (repo / "data" / "rows.csv").read_text() == "n,x\n1,a\n2,b\n3,c\n"
    assert (repo / "a.txt").read_text() == "a as committed\nand the parent\nand the child\n"
    assert (repo / "c.txt").read_text() == "new from the child\n"
    assert not (repo / ".agent").exists()
    assert not (repo / "gone.txt").exists() and (repo / "scratch.tmp").exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # every worktree removed


def test_a_worktree_past_the_bound_is_refused_naming_the_fix(
        tmp_path, _isolated_home, monkeypatch):
    from rlm.app import isolation

    monkeypatch.setattr(isolation, "COPY_MAX_FILES", 3)
    repo = repo_with_history(tmp_path)
    parent = [call(
        "for i in range(5):\n    open(f'part{i}.csv', 'w').write('x\\n')\n"
        "h = rlm_spawn('read', isolation='worktree')\n"
        "try:\n    h.result(120)\nexcept Exception as e:\n    print('ERR', e)"),
        call("final('ok')")]
    out, text = run_json(repo, tmp_path, parent, [call("final('never')")])
    assert "isolation: the parent's uncommitted changes and untracked files in " in text
    assert "come to 5 files, 0 MB, more than a child's copy takes (3 files" in text
    assert "commit them or add what the child does not need to .gitignore" in text
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_the_memory_guard_asks_the_filesystem_and_errs_safe_when_memory_is_missing(tmp_path):
    """With `.agent/` present the guard compares directories by identity (a link into it
    is memory; `.agents/` is not); with none yet, a path that would create it is refused
    by name, case- and normalisation-insensitively (no directory to stat)."""
    from rlm.app.owned import Owned

    root = tmp_path / "w"
    (root / "docs").mkdir(parents=True)
    missing = Owned(root, root / ".agent")
    assert [r for r in (".agent/state.md", ".Agent/x", ".AGENT", "docs/.agent/x", ".agents/x",
                        "agent/x") if missing.refuses(r)] == [".agent/state.md", ".Agent/x",
                                                               ".AGENT"]
    (root / ".agent").mkdir()
    (root / "docs" / "m").symlink_to("../.agent")
    present = Owned(root, root / ".agent")
    assert [r for r in (".agent/a/b.md", "docs/m/state.md", ".agent", ".agents/x",
                        "docs/x.md") if present.refuses(r)] == [".agent/a/b.md",
                                                                 "docs/m/state.md", ".agent"]
