"""Issue 15.3: a provider key that a cell gets hold of reaches no byte under $RLM_HOME —
not the session log, not the spooled long output, not a snapshot pickle (str, bytes, a
numpy text array), not the worker's event log, not the final answer, not an export.

The run goes through the resident worker in-process (real agent, real kernel, scripted
model), so the worker's files are covered too."""

from __future__ import annotations

import json
import os
import secrets
import string
from pathlib import Path

import pytest

from rlm.app import agent_runner
from rlm.config import Config
from rlm.longrun.worker import Worker, send_prompt
from rlm.secrets import scrub_file
from rlm.session.store import SessionStore
from tests.rlmcli import call
from tests.snapshot_shell import read_manifest


def _rand(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


def _leaks(root: Path, key: str) -> list[str]:
    forms = {enc: key.encode(enc) for enc in ("utf-8", "utf-16-le", "utf-32-le")}
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            data = (Path(dirpath) / name).read_bytes()
            out += [f"{dirpath}/{name} ({enc})" for enc, form in forms.items() if form in data]
    return out


def test_no_byte_under_home_holds_the_key_after_a_worker_run(_isolated_home, tmp_path, monkeypatch):
    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    cells = [
        call(f"k = {key!r}\nprint('the key is', k)"),
        call("print('x' * 3000 + k + 'y' * 3000)"),  # over the budget: spooled to artifacts/
        call("import numpy as np\nheld = {'k': k, 'b': k.encode(), 'arr': np.array([k, 'z'])}\n"
             "print(len(held))"),
        call("final(k)"),
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(cells))
    config = Config(home=_isolated_home, model=f"script:{script}", cell_timeout=60,
                    output_budget_chars=1000)
    session = SessionStore.create(_isolated_home, model=config.model, task="t")
    session.close()
    worker = Worker(session.id, config, home=_isolated_home, poll_s=0.05,
                    runner=agent_runner(session.id, config))  # the real agent, as `rlm worker`
    worker.start()
    try:
        send_prompt(session.id, "print the key", _isolated_home)
        worker.step()
    finally:
        worker.close()

    d = session.dir
    events = [json.loads(line) for line in (d / "worker-events.jsonl").read_text().splitlines()]
    ended = [e for e in events if e["event"] == "RunEnded"]
    assert ended and ended[-1]["reason"] == "final" and ended[-1]["final"] == "[redacted]"
    spooled = list((d / "artifacts").glob("cell-*.txt"))
    assert spooled and any("x" * 3000 in p.read_text() for p in spooled)  # the spool is there
    snap = read_manifest(d / "snapshot")
    assert {"k", "held"} <= set(snap["entries"])
    assert all(snap["entries"][n]["kind"] != "skipped" for n in ("k", "held"))

    from rlm.notebook.export import export_session

    export_session(session.id, _isolated_home / "run.ipynb")
    assert _leaks(_isolated_home, key) == []

    # the masked snapshot still restores: same-length masks keep pickles valid
    from rlm.kernel import Kernel

    with Kernel(d, config) as k:
        shown = k.execute("print(k == '*' * len(k), held['b'] == b'*' * len(k), held['arr'][1])")
    assert shown.shaped.strip() == "True True z"
    assert _leaks(_isolated_home, key) == []


def test_scrub_file_leaves_links_and_other_files_alone(tmp_path):
    key = f"sk-test-{_rand(40)}"
    outside = tmp_path / "outside.txt"
    outside.write_text(f"mine {key}")
    link = tmp_path / "link.txt"
    link.symlink_to(outside)
    hard = tmp_path / "hard.txt"
    os.link(outside, hard)
    assert scrub_file(link, [key]) == 0 and scrub_file(hard, [key]) == 0
    assert outside.read_text() == f"mine {key}"
    own = tmp_path / "own.bin"
    own.write_bytes(b"a" + key.encode("utf-16-le") + b"b" + key.encode())
    assert scrub_file(own, [key]) == 2
    assert own.read_bytes() == b"a" + ("*" * len(key)).encode("utf-16-le") + b"b" + b"*" * len(key)


@pytest.mark.parametrize("size", [0, 5])
def test_scrub_file_small_files(tmp_path, size):
    p = tmp_path / "f"
    p.write_bytes(b"x" * size)
    assert scrub_file(p, ["longenoughsecret"]) == 0


def test_a_file_written_between_cells_is_scrubbed_by_the_next_cell(tmp_path, monkeypatch):
    """A kernel thread may write after its cell ended: the next cell scrubs everything
    modified since the previous scrub, however long ago that was."""
    from rlm.kernel import execution

    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    now = [1_000 * 10**9]
    monkeypatch.setattr(execution.time, "time_ns", lambda: now[0])
    d = tmp_path / "sess"
    (d / "artifacts").mkdir(parents=True)
    execution.CellCollector(d, 1000, "cell-a").finish()  # scrubbed at t=1000 s
    late = d / "artifacts" / "late.txt"
    late.write_text(f"thread output {key}")
    os.utime(late, ns=(1_010 * 10**9, 1_010 * 10**9))  # written at t=1010 s
    now[0] = 1_100 * 10**9  # the next cell starts 90 s later
    execution.CellCollector(d, 1000, "cell-b").finish()
    assert key not in late.read_text()


def test_a_task_quoting_the_key_is_redacted_in_the_header(_isolated_home, monkeypatch):
    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    s = SessionStore.create(_isolated_home, task=f"use {key} to call the API")
    assert s.header.task == "use [redacted] to call the API"
    assert key.encode() not in s.path.read_bytes()
    assert SessionStore.open(s.id).header.task == s.header.task


def test_a_new_host_scrubs_what_a_dead_host_left_since_the_mark(tmp_path, monkeypatch):
    """A host killed between a write and its scrub: the next host (kernel start) scrubs
    every file newer than the session's mark, and only those."""
    from rlm.secrets import SCRUB_MARK, scrub_session

    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    d = tmp_path / "sess"
    (d / "snapshot").mkdir(parents=True)
    (d / SCRUB_MARK).touch()
    os.utime(d / SCRUB_MARK, ns=(1_000 * 10**9, 1_000 * 10**9))
    old, new = d / "snapshot" / "g1-small.bin", d / "snapshot" / "g2-small.bin"
    for path, t in ((old, 900), (new, 1_050)):
        path.write_bytes(b"\x80\x05" + key.encode() + b".")
        os.utime(path, ns=(t * 10**9, t * 10**9))
    assert scrub_session(d) == [new]
    assert key.encode() not in new.read_bytes()
    assert (d / SCRUB_MARK).stat().st_mtime_ns > 1_050 * 10**9  # the mark moved on


def test_the_mark_moves_at_most_once_a_second_and_a_later_write_is_still_scrubbed(tmp_path,
                                                                                monkeypatch):
    """Moving the mark after every cell cost a metadata write a step: it moves at most once
    a second; an older mark only makes a scrub look at more files, never fewer."""
    from rlm.secrets import SCRUB_MARK, scrub_session

    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    d = tmp_path / "sess"
    (d / "snapshot").mkdir(parents=True)
    scrub_session(d)
    moved = (d / SCRUB_MARK).stat().st_mtime_ns
    spool = d / "snapshot" / "cells.jsonl"
    spool.write_bytes(key.encode() + b"\n")
    assert scrub_session(d) == [spool] and key.encode() not in spool.read_bytes()
    assert (d / SCRUB_MARK).stat().st_mtime_ns == moved  # within the second: not moved
    os.utime(d / SCRUB_MARK, ns=(moved - 2 * 10**9, moved - 2 * 10**9))
    scrub_session(d)
    assert (d / SCRUB_MARK).stat().st_mtime_ns > moved - 10**9  # older than a second: moved


def test_any_later_run_scrubs_what_a_dead_host_left_in_another_session(_isolated_home, tmp_path,
                                                                         monkeypatch):
    """Issue 40 item 7: a host SIGKILLed mid-cell cannot scrub what its kernel writes after
    (a snapshot of a variable holding the key). Before, that stayed until that very session
    was resumed with the key set; now the next run of any session, with the key, scrubs it
    (rlm.secrets.scrub_left_behind) unless a live process holds that session."""
    import subprocess
    import sys

    from rlm.longrun.lock import SessionLock
    from rlm.secrets import SCRUB_MARK

    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    left, held = (_isolated_home / "sessions" / name for name in ("left", "held"))
    for d in (left, held):
        (d / "snapshot").mkdir(parents=True)
        (d / SCRUB_MARK).touch()
        os.utime(d / SCRUB_MARK, ns=(1_000 * 10**9, 1_000 * 10**9))
        (d / "snapshot" / "k-small.bin").write_bytes(b"\x80\x05" + key.encode() + b".")
    script = tmp_path / "s.json"
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    script.write_text(json.dumps([call("final(int(open('six.txt').read()) * 7)")]))
    with SessionLock.for_session(held, "run"):  # a live host of that session
        proc = subprocess.run([sys.executable, "-m", "rlm", "run", "6*7?", "--model",
                               f"script:{script}", "--json"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert key.encode() not in (left / "snapshot" / "k-small.bin").read_bytes()
    assert key.encode() in (held / "snapshot" / "k-small.bin").read_bytes()  # not touched


def test_a_file_scanned_clean_is_scanned_again_once_it_changes(tmp_path, monkeypatch):
    """The scrub skips a file it scanned that has not changed since (the per-cell scrub
    looks at every file of the last seconds): a later append, or a rewrite of the same
    size, is scanned and masked at the next scrub, whatever the mtime slack."""
    from rlm.secrets import scrub_tree

    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    log, same = tmp_path / "g1-log.bin", tmp_path / "artifact.txt"
    log.write_bytes(b"clean record\n")
    same.write_bytes(b"x" * len(key))
    settled = os.stat(log).st_mtime_ns - 1_000_000_123  # a second back: "settled"
    for path in (log, same):
        os.utime(path, ns=(settled, settled))
    assert scrub_tree(tmp_path) == []  # both scanned clean, both remembered
    assert scrub_tree(tmp_path) == []
    with open(log, "ab") as f:
        f.write(key.encode() + b"\n")
    fd = os.open(same, os.O_WRONLY)
    os.pwrite(fd, key.encode(), 0)
    os.close(fd)
    assert sorted(scrub_tree(tmp_path)) == sorted([log, same])
    assert _leaks(tmp_path, key) == []


def test_only_what_an_append_only_file_gained_is_read_again(tmp_path, monkeypatch):
    """The snapshot journal and the cell records only grow (a torn journal is never
    written over: test_snapshot_log): after a scan, the next one reads what they gained,
    from a key's length before it, so a key across the old end is masked whole. Any other
    file that changed is read whole."""
    from kernel_ext import snapshot_log
    from kernel_ext.lineage import RECORDS_NAME
    from kernel_ext.wire import APPEND_ONLY_FILES
    from rlm.secrets import scrub_session

    assert APPEND_ONLY_FILES.match(RECORDS_NAME)
    assert APPEND_ONLY_FILES.match(snapshot_log.Log(str(tmp_path), 7).name)
    key = f"sk-test-{_rand(40)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    d = tmp_path / "sess"
    (d / "snapshot").mkdir(parents=True)
    journal, other = d / "snapshot" / "g00000003-log.bin", d / "snapshot" / "state.json"
    journal.write_bytes(b"r" * 5000 + key[:12].encode())  # too short to be a piece
    other.write_bytes(b"o" * 100)
    scrub = lambda: scrub_session(d, 0, append_only=APPEND_ONLY_FILES.match)  # noqa: E731
    assert scrub() == []
    with open(journal, "ab") as f:  # the key completed across the old end
        f.write(key[12:].encode() + b"r" * 100)
    with open(other, "r+b") as f:  # rewritten in place and longer: read whole
        f.write(key.encode() + b"o" * 200)
    assert sorted(scrub()) == sorted([journal, other])
    assert _leaks(d, key) == []
