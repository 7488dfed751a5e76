"""Bad input, fuzzed (hypothesis, bounded example counts).

- the session-file loader: any corruption yields `SessionCorrupt` naming file:line, or a
  correct parse (a torn tail is moved aside, byte for byte); never another exception, never
  a hang, never a rewrite of existing bytes (migrations keep the original as a .bak);
- the bridge parser: any JSON-like value yields (id, method, params) or `WireError`;
  oversized and odd fields are rejected; the dispatcher never raises and only replies with
  well-formed replies;
- artifact names: whatever mime types and payloads a kernel publishes, the host writes only
  inside `<session>/artifacts/`, under names it makes itself, and never raises.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_ext import wire
from rlm.errors import SessionCorrupt
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore

FAST = settings(max_examples=150, deadline=3000, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ session loader


@cache
def valid_session() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        s = SessionStore.create(Path(d), model="m", task="fuzz")
        s.append(MessageEntry(message={"role": "user", "content": "héllo \u2028 \"quoted\""}))
        s.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "python", "arguments": "{}"}}]},
            usage={"input_tokens": 3, "output_tokens": 4}))
        s.append(MessageEntry(message={"role": "tool", "tool_call_id": "c1", "content": "ok"},
                              cell={"status": "ok"}))
        s.append(CompactionEntry(summary="sum", first_kept_entry_id=None, tokens_before=9))
        s.append(CustomEntry(custom_type="ipython_state", data={"names": []}, display=False))
        return s.path.read_bytes()


def _load(data: bytes) -> tuple[Path, object, bytes]:
    d = Path(tempfile.mkdtemp())
    path = d / "session.jsonl"
    path.write_bytes(data)
    try:
        result: object = SessionStore.open(path)
    except SessionCorrupt as e:
        result = e
    return path, result, path.read_bytes()


def _check_load(data: bytes) -> None:
    path, result, after = _load(data)
    aside = sorted(path.parent.glob("session.jsonl.torn-*"))
    backups = sorted(path.parent.glob("session.jsonl.v*.bak"))
    if isinstance(result, SessionCorrupt):
        assert after == data, "a corrupt file was rewritten"
        assert f"{path}:{result.line}:" in str(result)
        assert not aside
        return
    assert isinstance(result, SessionStore)
    if backups:  # a migration (the header's version changed): original kept exactly
        assert backups[0].read_bytes() == data
        return
    if after == data + b"\n":  # a whole last entry that lost only its newline: kept, the
        assert not aside  # newline written (SessionStore._terminate), nothing moved aside
    elif after != data:  # torn-tail recovery: a truncation, the rest moved aside intact
        assert data.startswith(after) and after.endswith(b"\n") or after == b""
        assert len(aside) == 1 and aside[0].read_bytes() == data[len(after):]
        assert result.recovered == aside[0]
    # what was parsed is exactly the complete lines that remain
    assert len(result.entries) == after.count(b"\n") - 1


@FAST
@given(garbage=st.binary(min_size=1, max_size=200))
def test_appended_garbage_is_a_torn_tail_or_a_clear_error(garbage):
    data = valid_session()
    path, result, after = _load(data + garbage)
    if b"\n" not in garbage:  # a torn last write: recovered, the original parse intact
        # (a whole valid entry that lost only its newline would be kept; random bytes
        # are never one, so this branch always sees the torn case)
        assert isinstance(result, SessionStore) and after == data
        assert len(result.entries) == 5
    _check_load(data + garbage)


@FAST
@given(pos=st.integers(min_value=0), blob=st.one_of(
    st.binary(max_size=64), st.sampled_from([b"\n", b"{}\n", b"[" * 5000, b"\x00", b"\xff\xfe",
                                             b'{"type":"session"}\n', b"null\n", b"\r\n"])))
def test_inserted_bytes_never_crash_or_rewrite(pos, blob):
    data = valid_session()
    pos %= len(data) + 1
    _check_load(data[:pos] + blob + data[pos:])


@FAST
@given(pos=st.integers(min_value=0), length=st.integers(1, 40), fill=st.binary(min_size=1, max_size=40))
def test_overwritten_bytes_never_crash_or_rewrite(pos, length, fill):
    data = valid_session()
    pos %= len(data)
    _check_load(data[:pos] + fill + data[pos + length:])


@FAST
@given(cut=st.integers(min_value=0))
def test_truncation_anywhere_loads_a_prefix(cut):
    data = valid_session()
    cut %= len(data) + 1
    path, result, after = _load(data[:cut])
    if isinstance(result, SessionStore):  # a prefix, or a whole last line given its newline
        assert data.startswith(after) or after == data[:cut] + b"\n"
    else:  # only a damaged header line can make a prefix unreadable
        assert isinstance(result, SessionCorrupt) and result.line == 1
    _check_load(data[:cut])


def test_deep_nesting_is_a_clear_error_not_a_crash():
    data = valid_session()
    lines = data.split(b"\n")
    lines.insert(2, b"[" * 100_000 + b"]" * 100_000)
    path, result, after = _load(b"\n".join(lines))
    assert isinstance(result, SessionCorrupt) and result.line == 3
    assert "nested too deeply" in str(result)


# ------------------------------------------------------------------ bridge parser

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=80),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
    max_leaves=30,
)
VALID_REQUEST = {"v": 1, "kind": "request", "id": "r1", "method": "ping", "params": {}}
# Each draw is a valid request with at most one field mutated (or dropped), so both the
# accepting and the rejecting branch of the parser run; the tests below count both.
field_mutations = st.one_of(
    st.tuples(st.just("v"), st.sampled_from([1, 1.0, True, "1", 2, None, 0])),
    st.tuples(st.just("kind"), st.sampled_from(["request", "reply", "", None, 1])),
    st.tuples(st.just("id"), st.one_of(st.text(max_size=80), st.integers(), st.none())),
    st.tuples(st.just("method"), st.one_of(st.sampled_from(sorted(wire.METHODS)),
                                            st.text(max_size=100), json_values)),
    st.tuples(st.just("params"), json_values),
    st.tuples(st.sampled_from(["v", "kind", "id", "method", "params"]), st.just(KeyError)),
)


@st.composite
def near_requests(draw: st.DrawFn) -> dict:
    data = dict(VALID_REQUEST, method=draw(st.sampled_from(sorted(wire.METHODS))),
                id=draw(st.text(min_size=1, max_size=wire.MAX_ID_LEN)))
    if draw(st.booleans()):  # half the draws stay valid; the other half mutate one field
        key, value = draw(field_mutations)
        if value is KeyError:
            data.pop(key)
        else:
            data[key] = value
    return data


def _check_parse(data: object) -> bool:
    """True when the request parsed (and the triple is well formed), False on WireError."""
    try:
        req_id, method, params = wire.parse_request(data)
    except wire.WireError as e:
        assert len(str(e)) < 200
        return False
    assert isinstance(data, dict) and type(data["v"]) is int and data["v"] == 1
    assert data["kind"] == "request"
    assert isinstance(req_id, str) and 0 < len(req_id) <= wire.MAX_ID_LEN
    assert method in wire.METHODS and isinstance(params, dict)
    return True


def test_parse_request_returns_a_triple_or_wire_error():
    seen = {True: 0, False: 0}

    @settings(max_examples=300, deadline=2000, database=None)
    @given(data=st.one_of(json_values, near_requests()))
    def prop(data):
        seen[_check_parse(data)] += 1

    prop()
    assert seen[True] >= 30 and seen[False] >= 30, seen  # both branches really ran


def test_parse_request_rejects_odd_and_oversized_fields():
    ok = dict(VALID_REQUEST)
    assert wire.parse_request(ok) == ("r1", "ping", {})
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    odd = [
        {**ok, "v": True},  # True == 1 in Python; not a version number
        {**ok, "id": "x" * (wire.MAX_ID_LEN + 1)},
        {**ok, "method": deep},
        {**ok, "method": list(range(10**6))},
        {**ok, "params": {"n": "x" * (wire.MAX_REQUEST_BYTES + 1)}},
        {**ok, "params": []},
    ]
    for data in odd:
        with pytest.raises(wire.WireError):
            wire.parse_request(data)


def test_dispatcher_never_raises_and_replies_well_formed():
    """Valid requests get exactly one ok reply carrying the handler's result; invalid ones
    get an error reply when their id is usable, else none; nothing raises."""
    from rlm.kernel.bridge import BridgeDispatcher

    seen = {"ok": 0, "rejected": 0}

    @settings(max_examples=200, deadline=3000, database=None)
    @given(data=st.one_of(json_values, near_requests()),
           comm_id=st.one_of(st.text(max_size=20), st.none()))
    def prop(data, comm_id):
        replies: list = []
        disp = BridgeDispatcher(handler=lambda m, p: {"m": m})
        try:
            handled = disp.on_comm_msg({"comm_id": comm_id, "data": data},
                                       lambda c, r: replies.append(r))
        finally:
            disp.close(wait=True)  # every submitted answer has been sent
        assert isinstance(handled, bool)
        valid = isinstance(comm_id, str) and _check_parse(data)
        for r in replies:
            assert wire.parse_reply(r)[0] == r["id"]
        if valid:
            assert handled and len(replies) == 1
            assert replies[0]["ok"] is True and replies[0]["result"] == {"m": data["method"]}
            seen["ok"] += 1
        else:
            assert all(r["ok"] is False and r["error"] for r in replies)
            seen["rejected"] += 1

    prop()
    # both branches exercised; valid requests are ~10-15% of 200 random examples (19 was
    # seen: a bound of 20 failed by chance)
    assert seen["ok"] >= 8 and seen["rejected"] >= 20, seen


# ------------------------------------------------------------------ artifact names

mimes = st.one_of(
    st.sampled_from(["image/png", "image/jpeg", "image/svg+xml", "text/plain", "text/html",
                     "application/json", "../../escape", "image/../../../x", "/etc/passwd",
                     "image/png\x00", "a/" + "b" * 300]),
    st.text(max_size=60),
)
payloads = st.one_of(
    st.text(max_size=100), st.builds(lambda b: base64.b64encode(b).decode(), st.binary(max_size=64)),
    json_values, st.just("x" * 70_000), st.just(list(range(20_000))),
)


@settings(max_examples=150, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(bundles=st.lists(st.dictionaries(mimes, payloads, max_size=4), min_size=1, max_size=3),
       kind=st.sampled_from(["display_data", "execute_result"]))
def test_artifacts_stay_inside_the_session_dir(bundles, kind):
    from rlm.kernel.execution import CellCollector

    root = Path(tempfile.mkdtemp())
    session_dir = root / "sessions" / "s1"
    session_dir.mkdir(parents=True)
    col = CellCollector(session_dir, 2000, "cell-test-1")
    for data in bundles:
        col.handle({"header": {"msg_type": kind}, "content": {"data": data, "metadata": {}}})
    col.finish()
    artifacts = (session_dir / "artifacts").resolve()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = (Path(dirpath) / name).resolve()
            assert p.parent == artifacts, f"{p} is outside {artifacts}"
            assert name.startswith("cell-test-1")
    for out in col.outputs:
        for ref in (out.refs or {}).values():
            assert (session_dir / ref).resolve().parent == artifacts
    json.dumps([dataclasses.asdict(o) for o in col.outputs])  # the record stays JSON


def test_malformed_display_data_from_a_cell_does_not_crash_the_host(_isolated_home):
    """A cell can publish any mime bundle; the host must record it, not raise."""
    from rlm.config import Config
    from rlm.kernel import Kernel

    code = ("from IPython.display import display\n"
            "display({'image/png': 'not base64!'}, raw=True)\n"
            "display({'image/png': '\\u00e9t\\u00e9'}, raw=True)\n"
            "display({'text/plain': None, 'application/json': {'a': 1}}, raw=True)\n"
            "print('after')")
    session_dir = _isolated_home / "sessions" / "s1"
    with Kernel(session_dir, Config(home=_isolated_home, cell_timeout=60)) as k:
        res = k.execute(code)
        assert res.status == "ok" and "after" in res.shaped
        assert k.execute("print(1 + 1)").shaped.strip() == "2"
    for p in (session_dir / "artifacts").iterdir():
        assert p.resolve().parent == (session_dir / "artifacts").resolve()
