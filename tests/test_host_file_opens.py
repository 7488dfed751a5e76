"""The host never writes (or reads) through what a kernel planted: one safe open for every
path (rlm.safeio), enforced over the whole of rlm/ by ast, and shown through the CLI with
links a cell plants where the host writes next (issue 57, item 1).

The ast walk fails on any file opened, created, renamed, removed or chmodded in rlm/ in
another way than rlm.safeio, unless the place is listed in ALLOWED with why no kernel can
reach that path (package data, /proc, the user's model cache, a path the user named), or
why the call is link-safe by itself (shutil.rmtree, mkdtemp). A new open anywhere fails
here until it goes through safeio or is argued for in this list.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from rlm import safeio
from tests.rlmcli import ANSWERED, call, rlm, script

RLM = Path(__file__).resolve().parents[1] / "rlm"
OS_FUNCS = {"open", "replace", "rename", "remove", "unlink", "mkdir", "makedirs", "chmod",
            "symlink", "link", "utime", "truncate", "rmdir", "mkfifo", "chown", "lchown"}
MODULES = {"os": OS_FUNCS, "io": {"open"}, "builtins": {"open"},
           "shutil": {"copy", "copyfile", "copy2", "copytree", "move", "rmtree", "copyfileobj"},
           "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory",
                        "TemporaryFile", "SpooledTemporaryFile"}}
METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "open", "mkdir", "unlink",
           "touch", "rename", "chmod", "symlink_to", "hardlink_to", "rmdir", "lchmod"}

_PKG = "package data (importlib.resources): not a path a kernel writes"
_RMTREE = "shutil.rmtree: removes a tree without following a link in it"
_MODEL = "the user's model cache (hidden from the sandbox, never a session path)"
_USER = "a path the user named on the command line, not a session path"
_CGROUP = ("/proc/self and the cgroup filesystem (/sys/fs/cgroup): not a kernel-writable "
           "session path; kernel files there are the kernel's own (pids.max, cgroup.procs)")
_CONF = "the user's config directory (hidden from the sandbox; O_NOFOLLOW)"
_NEW_ROOT = ("the sandbox's new root (tmpfs of a fresh mount namespace, rlm/kernel/"
             "sandbox_exec.py), built before the kernel exists; the host's files are bound "
             "into it, never written")
ALLOWED: dict[str, str] = {
    "rlm.agent.prompts:load_prompt .read_text": _PKG,
    "rlm.compaction.checkpoint:_prompt .read_text": _PKG,
    "rlm.compaction.summarize:load_prompt .read_text": _PKG,
    "rlm.llm.modelmap:_entries .read_text": _PKG,
    "rlm.app.isolation:PrivateCopy.bring_back shutil.rmtree": _RMTREE,
    "rlm.app.lifecycle:discard_unstarted shutil.rmtree": _RMTREE,
    "rlm.kernel.runtime:drop_stale_ipc_dirs shutil.rmtree": _RMTREE,
    "rlm.kernel.runtime:sweep_orphan_ipc_dirs shutil.rmtree": _RMTREE,
    "rlm.kernel.runtime:KernelRuntime._drop_ipc_dir shutil.rmtree": _RMTREE,
    "rlm.kernel.runtime:ipc_prefix tempfile.mkdtemp": "a new 0700 directory of a random name",
    "rlm.kernel.runtime:KernelRuntime.__init__ os.chmod":
        "the connection file in host/ (never kernel-writable), follow_symlinks=False",
    "rlm.app.isolation:worktree .mkdir": "the child's session directory (host-only)",
    "rlm.kernel.sandbox_exec:_write open": "/proc/self of the launcher, before the kernel exists",
    "rlm.kernel.sandbox_exec:_parent open": "/proc/<pid>/stat, read-only",
    **dict.fromkeys([f"rlm.kernel.sandbox_exec:{place}" for place in (
        "_dev os.mkdir", "_dev os.open", "_dev os.symlink", "_link_given os.makedirs",
        "_link_given os.symlink", "_make_target os.makedirs", "_make_target os.mkdir",
        "_make_target os.open", "_pivot os.mkdir", "_system_link os.symlink",
        "build_root os.mkdir", "build_root os.open", "build_root os.rmdir",
        "_hide os.makedirs")], _NEW_ROOT),
    "rlm.kernel.sandbox_exec:_Source.open os.open":
        "O_PATH|O_NOFOLLOW of a bind source (opens nothing's content), checked to be the "
        "resolved path, before the kernel exists",
    "rlm.kernel.sandbox_exec:_plan .open": "_Source.open (above)",
    "rlm.kernel.sandbox_exec:_mounts_under open": "/proc/self/mountinfo, read-only",
    "rlm.llm.local:cpu_has_amx open": "/proc/cpuinfo",
    "rlm.kernel.sandbox_freeze:join os.open": "/proc/<pid>/ns/*, read-only, for setns",
    "rlm.kernel.sandbox_freeze:mounts open": "/proc/<pid>/mountinfo, read-only",
    "rlm.longrun.lock:holds_lock open": "/proc/locks",
    "rlm.config:_memory_available .read_text": "/proc/self/cgroup and cgroupfs limits, read-only",
    **{f"rlm.kernel.cgroup:{place}": _CGROUP for place in (
        "_mounts .read_text", "_own_paths .read_text", "pids_parent .read_text",
        "KernelCgroup.make .mkdir", "KernelCgroup.make .write_text", "KernelCgroup.make .rmdir",
        "KernelCgroup.pids .read_text", "KernelCgroup.kill_all .write_text",
        "KernelCgroup.remove .rmdir", "_sweep .read_text", "_sweep .rmdir")},
    "rlm.llm.local_prefix:PrefixStore.find os.utime": _MODEL,
    "rlm.llm.local_prefix:PrefixStore._trim .unlink": _MODEL,
    "rlm.llm.modelfile:_adopt os.rename": _MODEL,
    "rlm.llm.modelfile:sha256_file open": _MODEL,
    "rlm.llm.modelfile:_sidecar_matches .read_text": _MODEL,
    "rlm.llm.modelfile:_write_sidecar os.open": _MODEL,
    "rlm.llm.modelfile:_write_sidecar os.replace": _MODEL,
    "rlm.llm.modelfile:verify .unlink": _MODEL,
    "rlm.llm.modelfile:_join_lock os.open": _MODEL,
    "rlm.llm.modelfile:join_parts os.open": _MODEL,
    "rlm.llm.modelfile:join_parts open": _MODEL,
    "rlm.llm.modelfile:join_parts os.replace": _MODEL,
    "rlm.llm.modelfile:join_parts .unlink": _MODEL,
    "rlm.llm.modelfile:check_user_model open": _USER + " (--model local:PATH)",
    "rlm.llm.preflight:check_local open": _USER + " (--model local:PATH)",
    "rlm.llm.script:read_script .read_text": _USER + " (--model script:PATH)",
    "rlm.demo:file_answer open": _USER + " (tests and bench: the truth for a CSV)",
    "rlm.notebook.export:export_session .mkdir": _USER + " (rlm export -o DIR)",
    "rlm.notebook.export:_publish_new os.link": _USER + " (O_EXCL: never replaces a file)",
    "rlm.notebook.export:_publish_new os.open": _USER + " (O_EXCL | O_NOFOLLOW)",
    "rlm.notebook.export:_write_notebook os.open": _USER + " (a new O_EXCL temp file)",
    "rlm.notebook.export:_write_notebook os.replace": _USER + " (renames its own temp file)",
    "rlm.notebook.export:_write_notebook .unlink": _USER + " (its own temp file)",
    "rlm.paths:private_dir .mkdir": "refuses a link and chmods with follow_symlinks=False",
    "rlm.paths:private_dir os.chmod": "follow_symlinks=False",
    "rlm.paths:fsync_dir os.open": "O_RDONLY of a directory, to fsync it",
    "rlm.trust:ensure_dir .mkdir": _CONF,
    "rlm.agent.steer.files:_read .read_bytes": _CONF + " (the user's own rules; a link of a "
                                               "dotfile manager is fine there)",
    "rlm.trust:first_time os.open": _CONF + " (O_EXCL)",
    "rlm.trust:open_regular os.open": "O_NOFOLLOW | O_NONBLOCK, a regular file only: the "
                                      "user's config and the session's host-only files",
}


def _is_descriptor(node: ast.Call) -> bool:
    """`open(fd, ...)` / `os.utime(fd, ...)`: a descriptor safeio (or os.open) gave; or a
    call relative to a directory descriptor (`dir_fd=`, from safeio.parent_dir)."""
    first = node.args[0] if node.args else None
    if any(k.arg == "dir_fd" for k in node.keywords):
        return True
    return isinstance(first, ast.Name) and (first.id == "fd" or first.id.endswith("_fd"))


def file_calls(path: Path, module: str | None = None) -> list[tuple[str, int]]:
    """`module:qualname call` for each file-touching call in `path` (ast)."""
    module = module or ".".join(path.relative_to(RLM.parent).with_suffix("").parts)
    found: list[tuple[str, int]] = []
    stack: list[str] = []

    class Visit(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

        def visit_Call(self, node: ast.Call) -> None:
            f, what = node.func, None
            if isinstance(f, ast.Name) and f.id == "open":
                what = "open"
            elif isinstance(f, ast.Attribute):
                owner = (f.value.id if isinstance(f.value, ast.Name) else
                         f.value.attr if isinstance(f.value, ast.Attribute) else None)
                if owner in MODULES:
                    what = f"{owner}.{f.attr}" if f.attr in MODULES[owner] else None
                elif f.attr in METHODS and owner != "safeio" and not (
                        owner and (owner[0].isupper() or owner == "cls")):  # Class.open(...)
                    what = f".{f.attr}"
            if what and not _is_descriptor(node):
                found.append((f"{module}:{'.'.join(stack) or '<module>'} {what}", node.lineno))
            self.generic_visit(node)

    Visit().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_every_file_open_in_rlm_goes_through_safeio_or_is_argued_for():
    seen: dict[str, list[str]] = {}
    for path in sorted(RLM.rglob("*.py")):
        if path.name == "safeio.py" and path.parent == RLM:
            continue
        for key, line in file_calls(path):
            seen.setdefault(key, []).append(f"{path.relative_to(RLM.parent)}:{line}")
    unargued = {k: v for k, v in seen.items() if k not in ALLOWED}
    assert not unargued, (
        "files opened outside rlm.safeio (use safeio with the session or working directory "
        "as root, or argue in ALLOWED why no kernel can reach the path):\n" +
        "\n".join(f"  {k}  ({', '.join(v)})" for k, v in sorted(unargued.items())))
    stale = sorted(set(ALLOWED) - set(seen))
    assert not stale, f"ALLOWED names places that open nothing now: {stale}"


def test_the_walk_sees_the_spellings_it_must(tmp_path):
    """The scanner itself: each spelling of a file open is found (a guard that sees
    nothing would pass the test above vacuously)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, shutil, io\nfrom pathlib import Path\n"
        "def f(p, fd):\n"
        "    open(p); io.open(p); os.open(p, 0); p.read_text(); p.write_bytes(b'');\n"
        "    Path(p).open(); os.replace(p, p); shutil.copy2(p, p); p.mkdir(); p.unlink()\n"
        "    open(fd); safeio.read_bytes(p, p)\n")
    whats = [k.split(" ", 1)[1] for k, _ in file_calls(probe, "probe")]
    assert whats == ["open", "io.open", "os.open", ".read_text", ".write_bytes", ".open",
                     "os.replace", "shutil.copy2", ".mkdir", ".unlink"]


# ------------------------------------------------------------------------- safeio itself
def test_safeio_refuses_a_link_anywhere_below_the_root_and_what_is_not_a_file(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_text("theirs")
    (root / "mid").symlink_to(outside)  # a directory link in the middle
    (root / "a" / "end").symlink_to(outside / "f")  # a link at the end
    os.mkfifo(root / "a" / "fifo")
    for rel in ("mid/f", "a/end", "a/fifo", "a"):
        with pytest.raises(safeio.UnsafePath):
            safeio.read_bytes(root, rel)
    with pytest.raises(safeio.UnsafePath):
        safeio.write_atomic(root, "mid/new", b"x")
    with pytest.raises(safeio.UnsafePath):
        safeio.open_append(root, "mid/f")
    with pytest.raises(safeio.UnsafePath):
        safeio.make_dirs(root, "mid/sub")
    with pytest.raises(ValueError):
        safeio.read_bytes(root, "../outside/f")
    assert (outside / "f").read_text() == "theirs" and list(outside.iterdir()) == [outside / "f"]


def test_safeio_writes_replace_a_link_at_the_name_and_refuse_a_hard_link(tmp_path):
    root, victim = tmp_path / "root", tmp_path / "victim"
    root.mkdir()
    victim.write_text("theirs")
    (root / "x").symlink_to(victim)
    safeio.write_atomic(root, "x", b"mine")  # the link is replaced, never followed
    assert victim.read_text() == "theirs" and (root / "x").read_text() == "mine"
    assert not (root / "x").is_symlink()
    os.link(victim, root / "hard")
    with pytest.raises(safeio.UnsafePath, match="hard link"):
        safeio.open_append(root, "hard")
    with pytest.raises(FileExistsError):
        safeio.create_new(root, "x")
    safeio.write_atomic(root, "d/e/f", b"deep", create_dirs=True)
    assert (root / "d" / "e").stat().st_mode & 0o777 == 0o700
    assert not [p for p in root.rglob(".*.tmp")]


# ----------------------------------------------------- through the CLI, on the default path
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _run(tmp_path: Path, code: str, *extra: str) -> tuple[int, str, str]:
    model = script(tmp_path / "replies.json", [call(code), {"content": "FINAL(done)"}])
    proc = rlm("run", "go", "--model", model, *extra, cwd=tmp_path)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.timeout(180)
def test_an_artifact_name_a_cell_planted_a_link_at_is_not_written_through(tmp_path):
    """A cell sees the first image's name in artifacts/, plants a link at the second's,
    then shows the second image: the host does not write through the link (and, in the
    sandbox, cannot be handed one: artifacts/ is the host's)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = f"""
import base64, glob, os, time
from IPython.display import Image, display
png = base64.b64decode({PNG!r})
display(Image(data=png, format="png"))
art = os.path.join(os.environ["RLM_SESSION_DIR"], "artifacts")
deadline = time.time() + 60
while not glob.glob(art + "/*-1.png") and time.time() < deadline:
    time.sleep(0.01)
first = glob.glob(art + "/*-1.png")[0]
try:
    os.symlink({str(victim)!r}, first[:-len("-1.png")] + "-2.png")
    print("planted")
except OSError as e:
    print("could not plant:", e)
display(Image(data=png, format="png"))
"""
    code_, out, err = _run(tmp_path, code)
    assert code_ in ANSWERED, err[-2000:]
    assert victim.read_bytes() == b"keep me"


@pytest.mark.timeout(180)
def test_the_host_writes_no_file_in_a_directory_the_kernel_writes(tmp_path):
    """What the host writes for the kernel to read (connection file, kernel.log, pid file)
    is in host/, not runtime/; a cell cannot write there."""
    code = """
import os
host = os.path.join(os.environ["RLM_SESSION_DIR"], "host")
print(sorted(n.split("-")[0] for n in os.listdir(host)))
for name in ("host/kernel.log", "session.jsonl", "../../config.toml"):
    try:  # the log and the config are hidden: not even a private copy may be made there
        open(os.path.join(os.environ["RLM_SESSION_DIR"], name), "a").write("forged")
        print("WROTE", name)
    except OSError as e:
        print("refused:", name, type(e).__name__)
"""
    project = tmp_path / "project"  # beside $RLM_HOME, as a user's project is
    project.mkdir()
    rc, out, err = _run(project, code)
    assert rc in ANSWERED, err[-2000:]
    from rlm.paths import rlm_home

    session = next(rlm_home().rglob("session.jsonl")).parent
    runtime = {p.name for p in (session / "runtime").iterdir()}
    assert not {n for n in runtime if n.endswith((".json", ".log", ".pid", ".ipc-owner"))}
    host = {p.name for p in (session / "host").iterdir()}
    assert "kernel.log" in host
    log = session / "session.jsonl"
    outputs = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    shown = "\n".join(str(e.get("message", {}).get("content")) for e in outputs
                      if e.get("type") == "message")
    assert "refused:" in shown and "WROTE" not in shown, shown[-2000:]


@pytest.mark.timeout(180)
def test_memory_never_follows_a_link_a_cell_planted_in_agent(tmp_path):
    """A cell plants `.agent/snapshots` as a link to a directory outside the project, then
    asks for a memory snapshot: the host refuses; nothing is written there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    code = f"""
import os
memory.update("state", "where we are")
os.symlink({str(outside)!r}, ".agent/snapshots")
try:
    memory.snapshot("planted")
    print("snapshot written")
except Exception as e:
    print("refused:", type(e).__name__, str(e)[:200])
"""
    model = script(project / "replies.json", [call(code), {"content": "FINAL(done)"}])
    proc = rlm("run", "go", "--model", model, cwd=project)
    assert proc.returncode in ANSWERED, proc.stderr[-2000:]
    assert list(outside.iterdir()) == []
    assert (project / ".agent" / "state.md").read_text().strip().endswith("where we are")


def test_a_rule_folder_a_cell_linked_elsewhere_is_not_read(tmp_path):
    """`.rlm` linked to a directory outside the project (a cell of an earlier run can make
    it): its rule files are not read into the model's context."""
    outside = tmp_path / "outside"
    (outside / "rules").mkdir(parents=True)
    (outside / "rules" / "r.md").write_text("---\nalways: true\n---\nTOPSECRET-4242\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".rlm").symlink_to(outside)
    from rlm.agent.steer.files import load_rules

    rules = load_rules(project, tmp_path / "home-config")
    assert not rules
    (project / ".rlm").unlink()
    (project / ".rlm").mkdir()
    (project / ".rlm" / "rules").symlink_to(outside / "rules")
    assert not load_rules(project, tmp_path / "home-config")


@pytest.mark.timeout(180)
def test_the_snapshot_journal_is_read_without_following_a_link(tmp_path):
    """`rlm state` reads the snapshot's journal (its generations' log) as it reads the
    manifest: a link planted at the journal's name (here to a FIFO in the working
    directory, which would block a plain open forever) is refused with a clear line."""
    from kernel_ext.snapshot_log import Log

    code_, _, err = _run(tmp_path, "x = 41\nprint(x)")
    assert code_ in ANSWERED, err[-2000:]
    from rlm.paths import rlm_home

    snap = next(rlm_home().rglob("session.jsonl")).parent / "snapshot"
    manifest = json.loads((snap / "manifest.json").read_text())
    journal = snap / Log(str(snap), manifest["generation"], generation=manifest["generation"]).name
    journal.unlink(missing_ok=True)
    os.mkfifo(tmp_path / "blocks")
    journal.symlink_to(tmp_path / "blocks")
    proc = rlm("state", cwd=tmp_path)
    assert proc.returncode != 0 and "unreadable snapshot manifest" in proc.stderr, proc.stderr
