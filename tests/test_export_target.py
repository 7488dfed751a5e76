"""Issue 15.2: `rlm export -o` writes a new regular file in an existing directory, or
(with --force) replaces a regular file; anything else is one line and a non-zero exit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rlm.cli.main import main
from rlm.notebook.export import ExportError, export_session
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore


@pytest.fixture
def sid(_isolated_home) -> str:
    s = SessionStore.create(_isolated_home, task="t")
    s.append(MessageEntry(message={"role": "user", "content": "count rows"}))
    s.close()
    return s.id


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlm: error: ") and "\n" not in err and needle in err, err


def test_new_file_is_written_and_an_existing_one_needs_force(sid, tmp_path, capsys):
    out = tmp_path / "a.ipynb"
    assert main(["export", sid, "-o", str(out)]) == 0
    assert '"nbformat": 4' in out.read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    out.write_text("my own notebook")
    _fails(capsys, ["export", sid, "-o", str(out)], "--force")
    assert out.read_text() == "my own notebook"
    assert main(["export", sid, "-o", str(out), "--force"]) == 0
    assert '"nbformat": 4' in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp


def test_non_regular_targets_are_never_replaced(sid, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "link.ipynb"
    link.symlink_to(victim)
    for target in (fifo, link):
        for extra in ([], ["--force"]):
            _fails(capsys, ["export", sid, "-o", str(target), *extra], "not a regular file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink()
    assert victim.read_text() == "keep"
    if os.geteuid() == 0 and Path("/dev/full").exists():  # the reported case, as root
        before = os.lstat("/dev/full")
        _fails(capsys, ["export", sid, "-o", "/dev/full", "--force"], "not a regular file")
        assert os.lstat("/dev/full").st_rdev == before.st_rdev
        assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_missing_parent_directory_target_and_unwritable_place(sid, tmp_path, capsys):
    _fails(capsys, ["export", sid, "-o", str(tmp_path / "no" / "such" / "x.ipynb")], "does not exist")
    assert not (tmp_path / "no").exists()
    _fails(capsys, ["export", sid, "-o", str(tmp_path)], "is a directory")
    # /proc refuses new files even to root: a real "cannot write here"
    _fails(capsys, ["export", sid, "-o", "/proc/rlm-export.ipynb"], "cannot write")


def test_library_call_raises_export_error(sid, tmp_path):
    (tmp_path / "x.ipynb").write_text("")
    with pytest.raises(ExportError, match="already exists"):
        export_session(sid, tmp_path / "x.ipynb")


def test_a_file_system_without_hard_links_still_gets_the_notebook(sid, tmp_path, monkeypatch):
    import errno

    from rlm.notebook import export as export_mod

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(export_mod.os, "link", no_links)
    out = tmp_path / "fat.ipynb"
    assert export_session(sid, out) == out
    assert '"nbformat": 4' in out.read_text() and stat.S_IMODE(out.stat().st_mode) == 0o600
    with pytest.raises(ExportError, match="already exists"):
        export_session(sid, out)
