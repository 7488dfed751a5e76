"""Session store: disk format, durability, branching, recovery, corruption, migrations."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from rlm.errors import SessionCorrupt, SessionError
from rlm.session import store as store_mod
from rlm.session.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    ModelChangeEntry,
    SessionHeader,
)
from rlm.session.store import SessionStore, list_sessions


def _msg(role: str, content: str, **kw) -> MessageEntry:
    return MessageEntry(message={"role": role, "content": content}, **kw)


def _all_kinds() -> list:
    return [
        _msg("user", "load the data", usage=None),
        MessageEntry(
            message={
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "python", "arguments": '{"code": "x = 1"}'},
                    }
                ],
            },
            usage={"input_tokens": 10, "output_tokens": 5},
            model="script:x",
        ),
        MessageEntry(
            message={"role": "tool", "tool_call_id": "c1", "content": "ok"},
            cell={"status": "ok", "execution_count": 1},
        ),
        CompactionEntry(
            summary="did things",
            first_kept_entry_id=None,
            tokens_before=123,
            details={"read_files": ["a.csv"]},
            trigger="manual",
        ),
        BranchSummaryEntry(summary="tried another way", from_id="abc"),
        CustomEntry(
            custom_type="ipython_state",
            data={"names": ["x"]},
            display=False,
            content="<ipython_state>x</ipython_state>",
        ),
        ModelChangeEntry(model="openai/gpt-4o-mini"),
        _msg("assistant", "failed", error="rate limited"),
    ]


def test_round_trip_all_kinds_on_disk(rlm_home_path):
    s = SessionStore.create(rlm_home_path, model="script:x", task="count rows")
    written = [s.append(e) for e in _all_kinds()]
    lines = s.path.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "session"
    assert json.loads(lines[0])["version"] == 1
    assert [json.loads(line)["id"] for line in lines[1:]] == [e.id for e in written]
    # parents chain in order
    assert json.loads(lines[2])["parent_id"] == written[0].id
    again = SessionStore.open(s.id, rlm_home_path)
    assert [e.to_dict() for e in again.entries] == [e.to_dict() for e in written]
    assert again.header.to_dict() == s.header.to_dict()
    assert again.leaf_id == written[-1].id
    assert [type(e) for e in again.entries] == [type(e) for e in written]


@pytest.fixture
def rlm_home_path(_isolated_home):
    return _isolated_home


def test_permissions_and_layout(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    assert s.path == rlm_home_path / "sessions" / s.id / "session.jsonl"
    assert stat.S_IMODE(os.stat(s.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(s.path).st_mode) == 0o600
    assert [i.id for i in list_sessions(rlm_home_path)] == [s.id]


def test_every_append_is_fsynced(rlm_home_path, monkeypatch):
    s = SessionStore.create(rlm_home_path)
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(store_mod.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    s.append(_msg("user", "a"))
    s.append(_msg("user", "b"))
    assert len(synced) == 2
    # the bytes are on disk right after append, before close
    assert s.path.read_text().count("\n") == 3


def test_branching_set_leaf_and_tree(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    a = s.append(_msg("user", "a"))
    b = s.append(_msg("assistant", "b"))
    c = s.append(_msg("user", "c"))
    s.set_leaf(b.id)
    d = s.append(_msg("user", "d"))
    assert d.parent_id == b.id
    assert [e.id for e in s.branch()] == [a.id, b.id, d.id]
    assert [e.id for e in s.branch(c.id)] == [a.id, b.id, c.id]
    assert s.tree() == {None: [a.id], a.id: [b.id], b.id: [c.id, d.id]}
    from rlm.session.treetext import format_tree

    text = format_tree(s)
    assert c.id in text and d.id in text
    reopened = SessionStore.open(s.path)
    assert reopened.leaf_id == d.id  # last entry in the file
    assert [e.id for e in reopened.branch()] == [a.id, b.id, d.id]
    with pytest.raises(SessionError):
        s.set_leaf("nope")


def test_torn_last_line_recovered_and_preserved(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    good = s.path.read_bytes()
    torn = b'{"type":"message","id":"x1","parent_id":null,"timest'
    with open(s.path, "ab") as f:
        f.write(torn)
    again = SessionStore.open(s.path)
    assert len(again) == 1
    assert s.path.read_bytes() == good
    assert again.recovered is not None and again.recovered.read_bytes() == torn
    assert again.recovered.name.startswith("session.jsonl.torn-")
    assert stat.S_IMODE(os.stat(again.recovered).st_mode) == 0o600
    again.append(_msg("user", "b"))  # appends after the recovery stay valid
    assert len(SessionStore.open(s.path)) == 2


def test_invalid_json_last_line_with_newline_is_torn(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    good = s.path.read_bytes()
    with open(s.path, "ab") as f:
        f.write(b'{"type": "mess\n')
    again = SessionStore.open(s.path)
    assert s.path.read_bytes() == good and again.recovered.read_bytes() == b'{"type": "mess\n'


def test_a_whole_last_entry_without_its_newline_is_kept(rlm_home_path):
    """Issue 15.11: a valid last entry that lost only its newline is not torn. The entry
    stays in the session, the newline is written back, the next append starts a line."""
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    b = s.append(_msg("assistant", "kept"))
    s.close()
    s.path.write_bytes(s.path.read_bytes().rstrip(b"\n"))
    ro = SessionStore.open(s.path, readonly=True)
    assert ro.leaf_id == b.id and not s.path.read_bytes().endswith(b"\n")  # readonly: untouched
    again = SessionStore.open(s.path)
    assert again.recovered is None and not list(s.dir.glob("*.torn-*"))
    assert [e.message["content"] for e in again.branch()] == ["a", "kept"]
    again.append(_msg("user", "next"))
    again.close()
    assert [e.message["content"] for e in SessionStore.open(s.path).branch()] == ["a", "kept", "next"]


@pytest.mark.parametrize("tail", [b"{}", b'{"type": "message", "id": "z", "parent_id": "nope"}'])
def test_an_unterminated_object_that_is_no_valid_entry_is_a_torn_tail(rlm_home_path, tail):
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    s.close()
    good = s.path.read_bytes()
    s.path.write_bytes(good + tail)
    again = SessionStore.open(s.path)
    assert len(again) == 1 and s.path.read_bytes() == good
    assert again.recovered is not None and again.recovered.read_bytes() == tail


def test_readonly_open_never_touches_the_file(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    with open(s.path, "ab") as f:
        f.write(b'{"partial')
    before = s.path.read_bytes()
    ro = SessionStore.open(s.path, readonly=True)
    assert len(ro) == 1 and ro.recovered is None
    assert s.path.read_bytes() == before


@pytest.mark.parametrize(
    "bad, reason",
    [
        (b"not json at all", "invalid JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"type": "bogus", "id": "z"}', "unknown entry type"),
        (
            b'{"type": "message", "id": "z", "parent_id": "nope", "timestamp": "t"}',
            "unknown parent",
        ),
        (b'{"type": "message", "id": "z", "message": 5, "timestamp": "t"}', "message"),
        (b"", "invalid JSON"),
    ],
)
def test_corrupt_middle_line_names_file_and_line(rlm_home_path, bad, reason):
    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "a"))
    lines = s.path.read_bytes().split(b"\n")
    lines.insert(2, bad)
    s.path.write_bytes(b"\n".join(lines))
    s.append(_msg("user", "after"))  # make the bad line a middle line
    before = s.path.read_bytes()
    with pytest.raises(SessionCorrupt) as info:
        SessionStore.open(s.path)
    assert info.value.line == 3
    assert reason in info.value.reason
    assert f"{s.path}:3:" in str(info.value)
    assert s.path.read_bytes() == before
    assert not list(s.dir.glob("*.torn-*"))


def test_duplicate_ids_and_missing_header_are_corrupt(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    e = s.append(_msg("user", "a"))
    line = json.dumps(e.to_dict()).encode() + b"\n"
    with open(s.path, "ab") as f:
        f.write(line)
    with pytest.raises(SessionCorrupt, match="duplicate"):
        SessionStore.open(s.path)
    s.path.write_bytes(line)
    with pytest.raises(SessionCorrupt, match="header"):
        SessionStore.open(s.path)


def test_migration_from_version_0(rlm_home_path):
    folder = rlm_home_path / "sessions" / "old"
    folder.mkdir(parents=True)
    path = folder / "session.jsonl"
    v0 = [
        {"type": "session", "id": "old", "timestamp": "2024-01-01T00:00:00Z", "model": "m"},
        {
            "type": "message",
            "id": "m1",
            "parent_id": None,
            "timestamp": "t",
            "role": "user",
            "content": "hi",
        },
    ]
    original = "".join(json.dumps(r) + "\n" for r in v0).encode()
    path.write_bytes(original)
    s = SessionStore.open("old", rlm_home_path)
    assert s.header.version == 1
    assert s.entries[0].message == {"role": "user", "content": "hi"}
    assert (folder / "session.jsonl.v0.bak").read_bytes() == original
    assert json.loads(path.read_text().splitlines()[0])["version"] == 1
    assert SessionStore.open(path).entries[0].message["content"] == "hi"


def test_newer_version_refused_without_rewrite(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    data = s.path.read_bytes().replace(b'"version":1', b'"version":99')
    s.path.write_bytes(data)
    with pytest.raises(SessionCorrupt, match="newer"):
        SessionStore.open(s.path)
    assert s.path.read_bytes() == data


def test_in_memory_store_never_writes(rlm_home_path, tmp_path):
    s = SessionStore.in_memory(model="m")
    a = s.append(_msg("user", "a"))
    s.append(_msg("assistant", "b"))
    assert s.path is None and [e.parent_id for e in s.entries] == [None, a.id]
    assert not (rlm_home_path / "sessions").exists()


def test_append_rejects_bad_entries(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    e = s.append(_msg("user", "a"))
    with pytest.raises(SessionError):
        s.append(e)  # duplicate id
    with pytest.raises(SessionError):
        s.append(_msg("user", "b", parent_id="missing"))
    with pytest.raises(SessionError):
        s.append(SessionHeader())
    with pytest.raises(SessionError):
        s.append(CustomEntry(custom_type="x", data=object()))
    assert len(SessionStore.open(s.path)) == 1  # nothing half-written


def test_open_by_prefix_and_unknown(rlm_home_path):
    s = SessionStore.create(rlm_home_path)
    assert SessionStore.open(s.id[:12], rlm_home_path).id == s.id
    assert SessionStore.open(s.dir).id == s.id
    with pytest.raises(SessionError, match="rlm sessions"):
        SessionStore.open("does-not-exist", rlm_home_path)


def test_child_session_dir(rlm_home_path):
    parent = SessionStore.create(rlm_home_path)
    child = SessionStore.create(
        session_dir=parent.dir / "children" / "kid1", parent_session=parent.id
    )
    assert child.id == "kid1" and child.header.parent_session == parent.id
    assert child.path.parent.parent.parent == parent.dir


def test_a_full_disk_mid_append_leaves_no_partial_line(rlm_home_path, monkeypatch):
    """Issue 15.6: ENOSPC after half a line: one-line SessionError, the file is as before."""
    import errno

    s = SessionStore.create(rlm_home_path)
    s.append(_msg("user", "kept"))
    before = s.path.read_bytes()
    real_write = os.write

    def half_then_full(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.os, "write", half_then_full)
    with pytest.raises(SessionError, match="No space left on device; nothing was recorded"):
        s.append(_msg("user", "lost"))
    monkeypatch.setattr(store_mod.os, "write", real_write)
    assert s.path.read_bytes() == before
    assert [e.message["content"] for e in SessionStore.open(s.path).branch()] == ["kept"]


def test_an_append_left_unsynced_is_synced_by_the_next_or_by_close(rlm_home_path, monkeypatch):
    s = SessionStore.create(rlm_home_path)
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(store_mod.os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_size), real(fd)))
    s.append(_msg("assistant", "a"), durable=False)
    assert synced == [] and s.path.read_text().count("\n") == 2  # written, not yet synced
    s.append(_msg("tool", "b"))
    assert synced == [s.path.stat().st_size]  # one fsync covers both
    s.append(_msg("assistant", "c"), durable=False)
    s.close()
    assert synced[-1] == s.path.stat().st_size


def test_each_step_is_one_fsync_and_the_log_is_synced_before_every_model_call(_isolated_home, monkeypatch):
    """Issue 32: a reply with a cell and the cell's result are made durable together, and
    nothing the log holds is unsynced when a request leaves for the model (the fsync runs
    beside the loop; the seam waits for it: rlm.durability)."""
    from rlm.app import build_agent
    from rlm.config import Config
    from rlm.llm import ScriptedLLM

    def call(code: str) -> dict:
        return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}

    session = SessionStore.create(_isolated_home, model="script:t", task="t")
    llm = ScriptedLLM([call("a = 1"), call("b = a + 1"), call("c = b + 1"), call("final(str(c))")])
    log_synced: list[int] = []  # the log's size at each of its fsyncs
    real = os.fsync

    def fsync(fd: int) -> None:
        log = os.path.samestat(os.fstat(fd), os.stat(session.path))
        if log:
            time.sleep(0.05)  # a slow disk: the next request comes long before this ends
        real(fd)
        if log:
            log_synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(store_mod.os, "fsync", fsync)
    unsynced_at_call: list[int] = []
    attempt = llm._attempt  # where the request leaves for the provider

    def checked(*a, **kw):  # type: ignore[no-untyped-def]
        unsynced_at_call.append(session.path.stat().st_size - log_synced[-1])
        return attempt(*a, **kw)

    llm._attempt = checked  # type: ignore[method-assign]
    with build_agent(session, Config(home=_isolated_home, model="script:t"), llm=llm) as agent:
        lines = session.path.read_text().count("\n")
        syncs = len(log_synced)
        list(agent.run("t"))
        steps = [e for e in session.branch() if getattr(e, "message", {}).get("role") == "tool"]
        added = session.path.read_text().count("\n") - lines
        assert unsynced_at_call == [0, 0, 0, 0], "every byte of the log is fsynced before a model call"
        # at most one fsync per step: a reply and its cell's result are made durable together
        # (an fsync still pending when the next line is written may cover it too, so the
        # count can be lower, never higher)
        assert len(steps) == 4 and 0 < len(log_synced) - syncs <= added - len(steps)
    assert log_synced[-1] == session.path.stat().st_size  # closed: every byte synced
