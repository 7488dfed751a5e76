"""The manifest's journal (kernel_ext.snapshot_log): a cell's snapshot appends one record
and fsyncs once; a torn record (a crash mid-append) restores the generation before it; the
whole manifest is written again now and then; `rlm state` reads the journal too."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from kernel_ext import snapshot, snapshot_log, snapshot_store, store_protocol
from rlm.kernel.state import snapshot_names
from tests.snapshot_shell import manifest, new_kernel, read_manifest, run  # `shell`: conftest


def _dir(ip) -> Path:
    return Path(snapshot._get(ip).path)


def _logs(ip) -> list[str]:
    return sorted(n for n in os.listdir(_dir(ip)) if n.endswith("-log.bin"))


def _base(ip) -> dict:
    return json.loads((_dir(ip) / "manifest.json").read_text())


def test_a_small_cell_appends_one_record_with_one_fsync(shell, monkeypatch):
    run(shell, "a = [1, 2]")  # the first snapshot writes the whole manifest
    run(shell, "a.append(-1)")  # the first record makes the log (and fsyncs the dir)
    base = _base(shell)
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(snapshot_store.os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    for i in range(5):
        run(shell, f"b{i} = {{'k': {i}}}\na.append({i})")
    assert len(fsyncs) == 5, "one durable write per cell"
    assert _base(shell) == base, "manifest.json is not rewritten"
    assert _logs(shell) == [f"g{base['generation']:08d}-log.bin"]
    m = manifest(shell)
    assert m["generation"] >= base["generation"] + 5 and {"a", "b4"} <= m["entries"].keys()
    report = new_kernel(shell)
    assert report["failed"] == [] and shell.user_ns["a"] == [1, 2, -1, 0, 1, 2, 3, 4]
    assert shell.user_ns["b3"] == {"k": 3}


def test_a_torn_record_restores_the_generation_before_it_and_is_never_written_over(shell):
    run(shell, "a = 1")
    run(shell, "b = [2]")
    run(shell, "c = 'three'")
    log = _dir(shell) / _logs(shell)[0]
    whole = log.stat().st_size
    with open(log, "r+b") as f:  # the last record loses its end: killed mid-append
        f.truncate(whole - 70)  # into its closing 16 bytes at least
    report = new_kernel(shell)
    assert report["failed"] == [] and sorted(report["restored"]) == ["a", "b"]
    torn = log.read_bytes()
    run(shell, "d = 4")  # a whole manifest, then a new journal: the torn one only ever grew
    assert "c" not in manifest(shell)["entries"]
    run(shell, "e = 5")
    assert log.read_bytes() == torn and len(_logs(shell)) == 2
    report = new_kernel(shell)
    assert sorted(report["restored"]) == ["a", "b", "d", "e"]


def test_garbage_after_the_last_record_is_not_read(shell):
    run(shell, "a = 1")
    run(shell, "b = 2")
    log = _dir(shell) / _logs(shell)[0]
    with open(log, "ab") as f:
        f.write(b"RLMJ" + os.urandom(200))
    assert sorted(new_kernel(shell)["restored"]) == ["a", "b"]


def test_the_whole_manifest_is_written_again_and_old_logs_go(shell, monkeypatch):
    monkeypatch.setattr(snapshot_log, "MAX_RECORDS", 3)
    run(shell, "keep = list(range(5))")
    first = _base(shell)["generation"]
    for i in range(8):
        run(shell, f"x = {i}")
    assert _base(shell)["generation"] > first, "the journal was folded into manifest.json"
    m = manifest(shell)
    files = {g["file"] for g in m["groups"].values()}
    on_disk = {n for n in os.listdir(_dir(shell)) if store_protocol.FILE_RE.match(n)}
    active = snapshot_log.log_name(_base(shell)["generation"])
    assert on_disk <= files | {active}, "a log nothing refers to any more was deleted"
    assert len(_logs(shell)) <= 2
    report = new_kernel(shell)
    assert report["failed"] == [] and shell.user_ns["x"] == 7 and shell.user_ns["keep"] == [0, 1, 2, 3, 4]


def test_a_full_disk_while_appending_leaves_the_log_as_it_was(shell, monkeypatch, capsys):
    run(shell, "a = 1")
    run(shell, "b = 2")
    log = _dir(shell) / _logs(shell)[0]
    before = log.read_bytes()
    real = os.pwrite

    def half(fd, data, offset):
        real(fd, bytes(data)[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(snapshot_log.os, "pwrite", half)
        run(shell, "c = [3]")
    assert "No space left on device" in capsys.readouterr().err
    assert log.read_bytes() == before
    run(shell, "d = 4")  # space is back: c is written with d
    assert sorted(new_kernel(shell)["restored"]) == ["a", "b", "c", "d"]


def test_rlm_state_without_a_kernel_reads_the_journal(shell, tmp_path):
    run(shell, "a = 1")
    run(shell, "b = [1, 2, 3]")
    run(shell, "del a\nc = 'x'")
    rows = snapshot_names(tmp_path / "session")
    assert rows is not None and sorted(r["name"] for r in rows) == ["b", "c"]
    assert read_manifest(_dir(shell))["entries"].keys() == {"b", "c"}


def _saved(ip) -> tuple[dict, dict]:
    st = snapshot._get(ip)
    return json.loads(json.dumps(st.entries)), json.loads(json.dumps(st.groups))


def test_each_record_holds_exactly_what_changed_and_freed_files_go(shell, monkeypatch):
    """A record is found from the names a cell wrote, not by comparing every entry: after
    every kind of change the journal replays to what the kernel saved, and a data file
    whose last group went is deleted."""
    monkeypatch.setattr(store_protocol, "SMALL_LIMIT", 4096)  # a file of its own above this
    monkeypatch.setattr(store_protocol, "MAX_SMALL_FILES", 2)  # old small files regrouped
    monkeypatch.setattr(snapshot_log, "INLINE_LIMIT", 2048)  # then a small file, not the log
    cells = [
        "a = [1]\nb = {'k': a}",  # a group of two
        "n = 1\ns = 'x'",
        "big = bytes(10_000)",  # a large file
        "mid = [bytes(700) for _ in range(4)]",  # too big for the log: a small file
        "mid2 = [bytes(700) for _ in range(4)]",
        "mid3 = [bytes(700) for _ in range(4)]",  # the small files are regrouped at gen 8
        "a.append(2)",  # the group again
        "del b",  # the group splits
        "big = bytes(20_000)",  # the old large file loses its last reference
        "n = 2\ndel s",
        "mid = None",
        *(f"n = {i}" for i in range(3, 10)),
        "a = 'rebound'",
    ]
    for code in cells:
        run(shell, code)
        m = manifest(shell)
        entries, groups = _saved(shell)
        assert (m["entries"], m["groups"]) == (entries, groups), code
        files = {g["file"] for g in groups.values() if "file" in g}
        on_disk = {n for n in os.listdir(_dir(shell)) if store_protocol.FILE_RE.match(n)}
        active = snapshot._get(shell).store.log.name
        assert on_disk <= files | {active}, f"{code}: a file nothing names stayed"
        assert files <= on_disk, code
    report = new_kernel(shell)
    assert report["failed"] == []
    assert shell.user_ns["a"] == "rebound" and shell.user_ns["big"] == bytes(20_000)
    assert "s" not in shell.user_ns and shell.user_ns["n"] == 9 and len(shell.user_ns["mid3"]) == 4


def test_the_cell_records_stay_open_and_a_removed_file_is_made_again(shell):
    run(shell, "a = [1]")
    records = _dir(shell) / "cells.jsonl"
    assert "a = [1]" in records.read_text()
    records.unlink()  # by hand, between cells
    run(shell, "b = [2]")
    assert "b = [2]" in records.read_text() and oct(records.stat().st_mode & 0o777) == "0o600"


def test_a_journal_removed_by_hand_is_said_and_the_next_cell_saves_everything(shell, capsys):
    run(shell, "a = [1]")
    run(shell, "b = [2]")
    for name in _logs(shell):
        (_dir(shell) / name).unlink()
    run(shell, "c = [3]\ndel a")  # its record has nowhere to go
    assert "the journal was removed" in capsys.readouterr().err
    run(shell, "d = [4]")  # a whole manifest, with what the failed one held
    report = new_kernel(shell)
    assert report["failed"] == [] and {"b", "c", "d"} == set(report["restored"])
