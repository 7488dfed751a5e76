"""`worker-events.jsonl` kept open between lines (rlm.longrun.events_file): what is on
disk after each line, a session directory removed under it, a link in its place."""

import json
import os
import shutil

import pytest

from rlm.errors import SessionGone
from rlm.longrun.events_file import EventsFile


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_line_is_on_disk_when_append_returns_and_two_writers_keep_lines_whole(tmp_path):
    path = tmp_path / "worker-events.jsonl"
    fg, worker = EventsFile(path), EventsFile(path)
    line = fg.append({"event": "TurnStarted", "turn": 1}, 1.0)
    assert path.read_text() == line  # no buffer: `rlm attach` sees it now
    worker.append({"event": "WorkerStarted"}, 2.0)
    fg.append({"event": "CellStarted", "code": "x" * 70_000}, 3.0)
    assert [r["event"] for r in _lines(path)] == ["TurnStarted", "WorkerStarted", "CellStarted"]
    assert [r["ts"] for r in _lines(path)] == [1.0, 2.0, 3.0]
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_session_directory_removed_under_an_open_file_is_said_not_written_to_nowhere(
        tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    f = EventsFile(d / "worker-events.jsonl")
    f.append({"event": "TurnStarted"}, 0.0)
    shutil.rmtree(d)
    with pytest.raises(SessionGone):
        f.append({"event": "CellStarted"}, 0.0)
    with pytest.raises(SessionGone):  # and again: no file is made where the session was
        f.append({"event": "CellStarted"}, 0.0)
    assert not d.exists()


def test_a_link_in_the_files_place_is_refused(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("")
    path = tmp_path / "worker-events.jsonl"
    path.symlink_to(target)
    with pytest.raises(OSError):
        EventsFile(path).append({"event": "TurnStarted"}, 0.0)
    assert target.read_text() == ""


def test_a_key_known_when_the_file_was_opened_never_reaches_it(tmp_path, monkeypatch):
    key = "sk-" + "Q7f" * 12
    monkeypatch.setenv("OPENAI_API_KEY", key)
    path = tmp_path / "worker-events.jsonl"
    f = EventsFile(path)
    f.append({"event": "CellOutput", "text": f"the key is {key}"}, 0.0)
    monkeypatch.delenv("OPENAI_API_KEY")  # gone from the environment: still masked
    f.append({"event": "FinalAnswer", "text": key}, 0.0)
    assert key not in path.read_text() and key[:12] not in path.read_text()
