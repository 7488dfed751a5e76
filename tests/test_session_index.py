"""session.index: a long session opens through a cache beside its log, reads only the tail
its projection needs, and falls back to the whole-file parse (with its torn-tail, corrupt
line and migration behaviour) whenever the cache is missing, stale or damaged."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rlm.errors import SessionCorrupt
from rlm.session import index
from rlm.session.branch import CHUNK, Branch, prompts, reply_count, with_replies_before
from rlm.session.context import build_messages
from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry
from rlm.session.index import INDEX_NAME
from rlm.session.lines import dumps
from rlm.session.store import SessionStore
from tests import rlmcli

N = 2_500  # a compaction every 500 entries: the projection needs the last few hundred


def _entry(i: int, ids: list[str]) -> Entry:
    if i == 1:
        return CustomEntry(custom_type="run_options", data={"model": "script:x"},
                           display=False, content=None)
    if i and i % 500 == 0:
        return CompactionEntry(summary=f"summary {i}", first_kept_entry_id=ids[-100],
                               tokens_before=9_000, details={})
    if i % 2:
        return MessageEntry(message={"role": "tool", "tool_call_id": f"c{i}",
                                     "content": f"out {i}"}, cell={"execution_count": i})
    return MessageEntry(message={"role": "assistant", "content": f"step {i}"})


def _long_session(home: Path, n: int = N, special: dict[int, Entry] | None = None) -> Path:
    """n entries written as a crashed writer would leave them: no index yet; `special`
    entries in place of the usual ones at their positions."""
    s = SessionStore.create(home, model="script:x", task="long")
    assert s.path is not None
    ids: list[str] = []
    lines = []
    for i in range(n):
        e = (special or {}).get(i) or _entry(i, ids)
        e.parent_id = ids[-1] if ids else None
        ids.append(e.id)
        lines.append(dumps(e))
    s.close()
    (s.path.parent / INDEX_NAME).unlink(missing_ok=True)
    with open(s.path, "ab") as f:
        f.write(b"".join(lines))
    return s.path


def _full(path: Path, native: bool = False) -> list[dict]:
    """The projection a whole-file parse gives (no index involved)."""
    branch = SessionStore._parse(path)[1].branch()
    return build_messages(list(branch), system_prompt="S", native_tools=native)


def test_an_indexed_open_projects_the_same_bytes_reading_only_the_tail(tmp_path):
    path = _long_session(tmp_path)
    first = SessionStore.open(path)  # no index: parses the file, writes the index
    assert (path.parent / INDEX_NAME).is_file() and not first._partial
    first.close()
    for native in (False, True):
        s = SessionStore.open(path, readonly=True)
        assert s._partial and len(s) == N
        msgs = s.messages(system_prompt="S", native_tools=native)
        assert json.dumps(msgs) == json.dumps(_full(path, native))
        branch = s.branch()
        # only the kept tail was read (from the last compaction's first kept entry, 1900,
        # less one read-ahead chunk)
        assert len(branch) == N and branch.unread() >= 1900 - CHUNK
        # the newest run_options is found without a scan of the branch
        assert branch.customs("run_options")[0].data == {"model": "script:x"}
        assert branch.unread() >= 1900 - 2 * CHUNK - 1  # one chunk read at position 1


def test_appends_after_an_indexed_open_are_durable_and_seen_by_the_next_open(tmp_path):
    path = _long_session(tmp_path)
    SessionStore.open(path).close()
    s = SessionStore.open(path)
    before = s.leaf_id
    e = s.append(MessageEntry(message={"role": "user", "content": "one more"}))
    assert e.parent_id == before
    # a crash before close: the index is stale by one line; the next open reads that line
    again = SessionStore.open(path, readonly=True)
    assert again._partial and len(again) == N + 1 and again.leaf_id == e.id
    msgs = again.messages(system_prompt="S", native_tools=False)
    assert msgs[-1]["content"] == "one more"
    assert json.dumps(msgs) == json.dumps(_full(path))
    s.close()
    third = SessionStore.open(path, readonly=True)
    assert third._partial and third.leaf_id == e.id and len(third) == N + 1


def test_everything_that_needs_every_entry_loads_it_once(tmp_path):
    path = _long_session(tmp_path, 600)
    SessionStore.open(path).close()
    s = SessionStore.open(path)
    assert s._partial
    early = s.branch()[10]
    assert len(s.entries) == 600 and not s._partial  # the whole file, parsed once
    assert s.tree()[early.id] and s.get(early.id) is early  # objects already read are kept
    s.set_leaf(early.id)  # resume from an earlier entry: a new branch
    fork = s.append(MessageEntry(message={"role": "user", "content": "a fork"}))
    assert fork.parent_id == early.id
    s.close()
    r = SessionStore.open(path, readonly=True)
    assert r.leaf_id == fork.id and [x.id for x in r.branch()][-2:] == [early.id, fork.id]
    assert len(r) == 601
    # a leaf moved back without an append: every open still starts from the last line
    w = SessionStore.open(path)
    w.append(MessageEntry(message={"role": "user", "content": "last line"}))
    w.set_leaf(early.id)
    w.close()
    for readonly in (True, False):
        assert SessionStore.open(path, readonly=readonly).branch()[-1].message["content"] \
            == "last line"


def test_a_missing_damaged_or_stale_index_is_rebuilt(tmp_path):
    path = _long_session(tmp_path, 300)
    index = path.parent / INDEX_NAME
    SessionStore.open(path).close()
    good = index.read_bytes()
    # format 1: an older rlm's, which did not index prompts and replies
    assert b'"format":2' in good
    for damage in (b"", b"garbage\n", good[:-5], good.replace(b'"format":2', b'"format":9'),
                   good.replace(b'"format":2', b'"format":1')):
        index.write_bytes(damage)
        s = SessionStore.open(path)
        assert not s._partial and len(s) == 300
        s.close()
        assert SessionStore.open(path, readonly=True)._partial  # rebuilt
    # the log rewritten in place with the same size: the mtime says stale
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"step 298"', b'"step 299"'))
    s = SessionStore.open(path, readonly=True)
    assert not s._partial and s.branch()[-2].message["content"] == "step 299"
    # a symlinked index is never followed
    index.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(good)
    index.symlink_to(target)
    assert not SessionStore.open(path, readonly=True)._partial


def test_torn_and_corrupt_tails_after_the_index_keep_their_behaviour(tmp_path):
    path = _long_session(tmp_path, 300)
    SessionStore.open(path).close()
    with open(path, "ab") as f:
        f.write(b'{"type":"message","id":"x1","par')  # the host died mid-append
    s = SessionStore.open(path)
    assert s.recovered is not None and s.recovered.read_bytes().startswith(b'{"type"')
    assert len(s) == 300 and path.read_bytes().endswith(b"\n")
    s.close()
    with open(path, "ab") as f:
        f.write(b"not json\n" + dumps(MessageEntry(message={"role": "user", "content": "x"})))
    size = path.stat().st_size
    with pytest.raises(SessionCorrupt) as e:
        SessionStore.open(path)
    assert e.value.line == 302 and path.stat().st_size == size  # left byte-identical


def test_a_viewer_indexes_only_what_it_read(tmp_path):
    path = _long_session(tmp_path, 300)
    v = SessionStore.open(path, readonly=True)  # `rlm log` on a live session: caches
    assert (path.parent / INDEX_NAME).is_file() and len(v) == 300
    with open(path, "ab") as f:  # the writer goes on
        f.write(dumps(MessageEntry(message={"role": "user", "content": "later"},
                                   parent_id=v.leaf_id)))
    s = SessionStore.open(path, readonly=True)
    assert s._partial and len(s) == 301 and s.branch()[-1].message["content"] == "later"


def test_rlm_log_last_n_and_resume_on_an_indexed_long_session(tmp_path):
    home = tmp_path / "home"
    path = _long_session(home / "x")  # moved under RLM_HOME/sessions below
    sessions = home / "sessions"
    sessions.mkdir(parents=True, exist_ok=True, mode=0o700)
    sid = path.parent.name
    path.parent.rename(sessions / sid)
    path = sessions / sid / "session.jsonl"

    def rlm(*args: str) -> subprocess.CompletedProcess:
        return rlmcli.rlm(*args, cwd=tmp_path, env={"RLM_HOME": str(home)}, check=True)

    out = rlm("log", sid, "-n", "2", "--all").stdout
    assert out.count("--- ") == 2 and f"step {N - 2}" in out and f"out {N - 1}" in out
    assert (path.parent / INDEX_NAME).is_file()  # the viewer left the cache
    script = tmp_path / "s.json"
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    script.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final(str(int(open('six.txt').read()) * 7))"}}]}]))
    res = json.loads(rlm("resume", sid, "and now?", "--model", f"script:{script}",
                         "--json").stdout.splitlines()[-1])
    assert res["final"] == "42"
    s = SessionStore.open(path, readonly=True)
    assert s._partial  # the resumed run left the index current
    branch = s.branch()
    assert len(branch) > N and branch[N - 1].message["content"] == f"out {N - 1}"
    assert json.dumps(s.messages(system_prompt="S", native_tools=True)) == \
        json.dumps(_full(path, True))


def test_branch_views_are_snapshots_and_read_lazily(tmp_path):
    path = _long_session(tmp_path, 1_200)
    SessionStore.open(path).close()
    s = SessionStore.open(path)
    before = s.branch()
    prefix = before[:10]  # a prefix is a view too: nothing read yet
    assert len(prefix) == 10 and before.unread() == 1_200
    s.append(MessageEntry(message={"role": "user", "content": "new"}))
    assert len(before) == 1_200 and len(s.branch()) == 1_201  # a view never grows
    assert [e.id for e in before[-3:]] == [e.id for e in s.branch()[-4:-1]]
    assert [e.id for e in reversed(before)][:2] == [before[-1].id, before[-2].id]
    assert list(prefix) == list(s.branch())[:10] and before == list(before)


def _in_home(tmp_path: Path) -> tuple[Path, str, Path]:
    """A long session under RLM_HOME/sessions: (home, its id, its session.jsonl)."""
    home = tmp_path / "home"
    path = _long_session(home / "x")
    sessions = home / "sessions"
    sessions.mkdir(parents=True, exist_ok=True, mode=0o700)
    sid = path.parent.name
    path.parent.rename(sessions / sid)
    return home, sid, sessions / sid / "session.jsonl"


def test_a_resume_reads_the_branchs_tail_not_the_whole_branch(tmp_path, monkeypatch):
    """Before: the children's registry, the turn number, the answer's check and the stream
    rules' counts each read every entry of the branch (a 100,000-entry session resumed in
    2 s, 1 s at 1,000)."""
    home, sid, path = _in_home(tmp_path)

    def rlm(*args: str) -> subprocess.CompletedProcess:
        return rlmcli.rlm(*args, cwd=tmp_path, env={"RLM_HOME": str(home)}, check=True)

    rlm("log", sid, "-n", "1")  # the viewer writes the index
    rules = tmp_path / ".rlm" / "rules"  # a stream rule watches every reply: its counts
    rules.mkdir(parents=True)  # come from the index too
    rules.joinpath("no_read_csv.md").write_text(
        (Path(__file__).parent / "fixtures" / "rules" / "no_read_csv.md").read_text())
    parsed: list[int] = []
    real = index.parse_entry
    monkeypatch.setattr(index, "parse_entry", lambda *a: parsed.append(1) or real(*a))
    script = tmp_path / "s.json"
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    script.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final(str(int(open('six.txt').read()) * 7))"}}]}]))
    out = rlm("resume", sid, "and now?", "--model", f"script:{script}").stdout
    replies = sum(1 for i in range(N) if i % 2 == 0 and (i == 0 or i % 500))
    assert f"turn {replies + 1}" in out and "42" in out  # numbers continue the session's
    # the projection's tail (from the last compaction's first kept entry, 1900) and a
    # read-ahead chunk, not the 2,500 entries
    assert 0 < len(parsed) < N - 1900 + 2 * CHUNK, len(parsed)


def _with(tmp_path: Path, special: dict[int, Entry]) -> tuple[list[Entry], Branch]:
    """A long session with `special` entries at their positions, indexed: its entries
    parsed whole, and its branch opened through the index (nothing read yet)."""
    path = _long_session(tmp_path, N, special)
    SessionStore.open(path).close()  # the first open writes the index
    return list(SessionStore._parse(path)[1].branch()), \
        SessionStore.open(path, readonly=True).branch()


def test_prompts_and_replies_are_found_without_reading_the_branch(tmp_path):
    asked = {0: "what is the total of 17 rows?", 1_200: "go on with the 2023 rows"}
    whole, branch = _with(tmp_path, {
        **{i: MessageEntry(message={"role": "user", "content": q}) for i, q in asked.items()},
        600: MessageEntry(message={"role": "user", "content": "call final"}, origin="nudge")})
    assert branch.unread() == len(branch) == N
    assert reply_count(branch) == reply_count(whole) == sum(
        1 for e in whole if isinstance(e, MessageEntry) and e.role == "assistant")
    assert branch.unread() == N  # counted from the index alone
    assert [e.message["content"] for e in prompts(branch)] == list(asked.values())
    assert [e.id for e in prompts(whole)] == [e.id for e in prompts(branch)]
    assert branch.unread() == N - 2  # exactly the two prompts' lines were read


def test_rule_injections_count_the_replies_before_them_from_the_index(tmp_path):
    def injection(rule: str) -> CustomEntry:
        return CustomEntry(custom_type="rule_injection", data={"rule": rule}, display=True,
                           content="stopped")

    failed = MessageEntry(message={"role": "assistant", "content": ""}, error="rate limited")
    whole, branch = _with(tmp_path, {700: injection("a"), 900: failed, 1_800: injection("b")})
    assert reply_count(branch) == reply_count(whole) == reply_count(branch, failed=True) - 1
    got = [(e.data["rule"], n) for e, n in with_replies_before(branch, "rule_injection")]
    assert got == [(e.data["rule"], n) for e, n in with_replies_before(whole, "rule_injection")]
    # replies are the even positions (step i) but the compactions (500, 1000, 1500), the
    # injection at 700 and the failed call at 900
    assert got == [("a", 350 - 1), ("b", 900 - 3 - 2)]
    assert branch.unread() == N - 2  # only the two injections were read
