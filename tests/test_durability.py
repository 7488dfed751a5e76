"""The log's fsync beside the loop (rlm.durability): a step's result is made durable on
the fsync thread, every model request waits for it, and a failure is said, never lost."""

import errno
import os
import threading

import pytest

from rlm import durability
from rlm.errors import SessionError
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore


def _msg(role: str, text: str) -> MessageEntry:
    return MessageEntry(message={"role": role, "content": text})


def _fsync_of(path, monkeypatch, *, fail: bool = False, gate: threading.Event | None = None):
    """os.fsync, recording the log's size at each of its fsyncs (and whether its fd was
    still open), optionally held until `gate` is set, or failing with EIO on the fsync
    thread (a disk that fails after the lines were written)."""
    real, seen = os.fsync, []

    def fsync(fd: int) -> None:
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            if gate is not None:
                gate.wait(10)
            if fail and threading.current_thread().name.startswith("rlm-fsync"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)
            seen.append(os.fstat(fd).st_size)  # raises if the fd was closed meanwhile
        else:
            real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_a_line_synced_soon_is_on_disk_once_settled_and_a_request_waits_for_it(
        tmp_path, monkeypatch):
    s = SessionStore.create(tmp_path)
    gate = threading.Event()
    seen = _fsync_of(s.path, monkeypatch, gate=gate)
    s.append(_msg("tool", "a result"), durable=False)
    s.sync_soon()
    assert s.path.read_text().count("\n") == 2  # written at once, durable later
    settled = threading.Thread(target=durability.settle)
    settled.start()
    settled.join(0.2)
    assert settled.is_alive() and seen == []  # the request still waits for the disk
    gate.set()
    settled.join(10)
    assert not settled.is_alive() and seen == [s.path.stat().st_size]
    s.close()


def test_close_waits_for_the_fsync_it_began_before_closing_the_file(tmp_path, monkeypatch):
    s = SessionStore.create(tmp_path)
    gate = threading.Event()
    seen = _fsync_of(s.path, monkeypatch, gate=gate)
    s.append(_msg("tool", "a result"), durable=False)
    s.sync_soon()
    threading.Timer(0.1, gate.set).start()
    s.close()
    assert seen == [s.path.stat().st_size]  # the fsync ran on the open file, to its end


def test_a_failed_fsync_stops_the_next_request_with_what_happened(tmp_path, monkeypatch):
    s = SessionStore.create(tmp_path)
    _fsync_of(s.path, monkeypatch, fail=True)
    s.append(_msg("tool", "a result"), durable=False)
    s.sync_soon()
    with pytest.raises(SessionError, match=r"cannot make .*session.jsonl durable: .*fix the"):
        durability.settle()
    durability.settle()  # said once
    assert s.path.read_text().count("\n") == 2  # nothing written was taken back
    s.close()


def test_a_run_whose_log_cannot_be_made_durable_ends_before_its_next_model_call(
        _isolated_home, monkeypatch):
    from rlm.app import build_agent
    from rlm.config import Config
    from rlm.llm import ScriptedLLM

    def call(code: str) -> dict:
        return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}

    session = SessionStore.create(_isolated_home, model="script:t", task="t")
    llm = ScriptedLLM([call("a = 1"), call("final('never')")])
    with build_agent(session, Config(home=_isolated_home, model="script:t"), llm=llm) as agent:
        _fsync_of(session.path, monkeypatch, fail=True)
        with pytest.raises(SessionError, match="durable"):
            list(agent.run("t"))
    assert llm.position == 1  # the second reply was never asked for
