"""Issue 15.1: every command that takes SESSION resolves it one way, and a lookup never
touches anything outside $RLM_HOME (or creates anything inside it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rlm.cli.main import main
from rlm.errors import SessionError
from rlm.longrun.worker import send_request
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore, resolve_session_dir


def _snapshot_tree(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """path -> (mode, size, content) for everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, data)
    return out


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code != 0, argv
    assert err.startswith("rlm: error: ") and "\n" not in err, (argv, err)
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", [
    ["stop"], ["attach", "--no-follow"], ["worker"], ["log"], ["tree"], ["state"],
    ["export"], ["goal", "{}", "status"], ["schedule", "{}", "list"], ["heartbeat", "{}", "off"],
])
def test_a_directory_outside_home_is_never_modified(tmp_path, _isolated_home, capsys, command):
    victim = tmp_path / "srv-shared"
    victim.mkdir(mode=0o755)
    os.chmod(victim, 0o755)
    (victim / "notes.txt").write_text("mine")
    SessionStore.create(_isolated_home).close()  # a home that exists, with one session
    before = _snapshot_tree(victim)
    mode_before = victim.stat().st_mode
    relative = os.path.join("..", tmp_path.name, "srv-shared")  # cwd is tmp_path
    for ref in (str(victim), relative, "srv-shared", "/", "/etc"):
        if "{}" in command:
            argv = [ref if a == "{}" else a for a in command]
        else:
            argv = [command[0], ref, *command[1:]]
        _one_line_error(capsys, argv)
    assert _snapshot_tree(victim) == before
    assert victim.stat().st_mode == mode_before


@pytest.mark.parametrize("ref", ["2026*", "*", "[a-z]*", "a" * 300, "..", ".", "", "x\ny"])
def test_hostile_ids_give_one_line(capsys, ref):
    SessionStore.create().close()
    for cmd in ("log", "tree", "stop", "state"):
        _one_line_error(capsys, [cmd, ref])


def test_lookups_create_nothing(tmp_path, _isolated_home, capsys):
    assert not _isolated_home.exists()
    assert main(["ps"]) == 0
    _one_line_error(capsys, ["stop", "foo"])
    _one_line_error(capsys, ["log", "foo"])
    _one_line_error(capsys, ["attach", "foo", "--no-follow"])
    assert not _isolated_home.exists()
    assert not (tmp_path / ".rlm").exists()


def test_id_prefix_suffix_last_and_path(_isolated_home):
    a = SessionStore.create(_isolated_home)
    b = SessionStore.create(session_dir=_isolated_home / "sessions" / "zz-other-b2")
    assert resolve_session_dir(a.id) == a.dir
    assert resolve_session_dir(a.id[:10]) == a.dir  # prefix
    assert resolve_session_dir("other-b2") == b.dir  # suffix
    assert resolve_session_dir(str(a.dir)) == a.dir.resolve()
    assert resolve_session_dir(a.path) == a.dir.resolve()
    assert resolve_session_dir("last") in (a.dir, b.dir)
    with pytest.raises(SessionError, match="ambiguous"):
        resolve_session_dir("2")  # a prefix of one, a suffix of the other


def test_a_foreign_or_shared_session_directory_is_refused(tmp_path, _isolated_home):
    s = SessionStore.create(_isolated_home)
    shared = tmp_path / "shared-copy"
    shutil.copytree(s.dir, shared)
    os.chmod(shared, 0o777)
    with pytest.raises(SessionError, match="not writable by others"):
        resolve_session_dir(shared)
    os.chmod(shared, 0o700)
    (shared / "session.jsonl").unlink()
    (shared / "session.jsonl").symlink_to(s.path)
    with pytest.raises(SessionError, match="not a session directory"):
        resolve_session_dir(shared)


def test_requests_go_to_the_copied_directory_not_the_original(tmp_path, _isolated_home):
    s = SessionStore.create(_isolated_home)
    s.append(MessageEntry(message={"role": "user", "content": "hi"}))
    copy = tmp_path / "copy"
    shutil.copytree(s.dir, copy)
    opened = SessionStore.open(copy)
    assert opened.id == s.id  # same header id ...
    send_request(str(opened.dir), {"kind": "prompt", "text": "x"})
    assert list((copy / "worker-inbox").iterdir())  # ... but its own inbox
    assert not (s.dir / "worker-inbox").exists()


@pytest.mark.parametrize("home", ["/sys/rlm-home-test", "/proc/rlm-home-test"])
def test_an_unwritable_home_is_one_line(monkeypatch, tmp_path, capsys, home):
    """Issue 15.6: a read-only (or impossible) RLM_HOME gives one line with the fix."""
    monkeypatch.setenv("RLM_HOME", home)
    script = tmp_path / "s.json"
    script.write_text('["no code"]')
    _one_line_error(capsys, ["run", "t", "--model", f"script:{script}"])
    assert not Path(home).exists()
    assert main(["ps"]) == 0


@pytest.mark.parametrize("text", ['{"version": 1, "gener', "[]", '{"entries": [1]}', ""])
def test_rlm_state_with_a_broken_manifest_is_one_line(_isolated_home, capsys, text):
    """Issue 15.6: a truncated or malformed snapshot manifest."""
    s = SessionStore.create(_isolated_home)
    (s.dir / "snapshot").mkdir()
    (s.dir / "snapshot" / "manifest.json").write_text(text)
    _one_line_error(capsys, ["state", s.id])


def test_rlm_state_lists_a_malformed_entry_as_not_restorable(_isolated_home, capsys):
    s = SessionStore.create(_isolated_home)
    (s.dir / "snapshot").mkdir()
    (s.dir / "snapshot" / "manifest.json").write_text(
        '{"version": 1, "generation": 1, "entries": {"ok": {"kind": "pickle"}, "bad": 3}}')
    assert main(["state", s.id, "--json"]) == 0
    names = {n["name"]: n for n in json.loads(capsys.readouterr().out)["names"]}
    assert names["ok"]["restorable"] is True
    assert names["bad"]["restorable"] is False and names["bad"]["reason"] == "malformed manifest entry"
