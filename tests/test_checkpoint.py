"""Tier 0 (issue 27): a checkpoint written in the background as the context fills.

The writer runs on real session logs and files; its model is a scripted one, or, through
the composition root with no setting, a hosted model at a real OpenAI-compatible endpoint
on 127.0.0.1 (bench/fake_openai.py), which is what turns the writer on by default."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.fake_openai import serving
from rlm import app
from rlm.app.build import writer_session
from rlm.compaction import checkpoint as ck
from rlm.compaction.checkpoint import SECTIONS, CheckpointWriter, rungs_for, validate
from rlm.compaction.controller import CompactionController
from rlm.llm import ScriptedLLM
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests import rlmcli
from tests.rlmcli import call


def text(progress: str = "x = 41 computed", task: str = "add one to x") -> str:
    body = {"Task": task, "Progress": progress}
    return "\n\n".join(f"## {s}\n- {body.get(s, '(none)')}" for s in SECTIONS)


def session_with(home: Path, *lines: str) -> SessionStore:
    s = SessionStore.create(home, model="script:none", task="t")
    for i, line in enumerate(lines):
        role = "user" if i % 2 == 0 else "assistant"
        s.append(MessageEntry(message={"role": role, "content": line}))
    return s


def entries(s: SessionStore, kind: str) -> list[CustomEntry]:
    return [e for e in s.branch() if isinstance(e, CustomEntry) and e.custom_type == kind]


# ------------------------------------------------------------------------ the rules
def test_rungs_are_fractions_of_the_window_kept_below_the_compaction_threshold():
    assert rungs_for((0.75, 0.4, 0.6), 8192, 6144) == [3276, 4915, 5529]  # 0.75 -> 90% of 6144
    assert rungs_for((0.4, 0.4), 100_000, 85_000) == [40_000]
    assert rungs_for((0.4,), None, None) == [] and rungs_for((), 8192, 6144) == []


def test_a_checkpoint_needs_every_section_in_order_within_its_budget():
    assert validate(text(), 600) is None
    assert validate(text().replace("## Files touched", "## Files"), 600) == \
        "the section '## Files touched' is missing"
    swapped = text().replace("## Task", "## TMP").replace("## Progress", "## Task") \
        .replace("## TMP", "## Progress")
    assert "out of order" in (validate(swapped, 600) or "")
    assert "over the 50-token budget" in (validate(text(), 50) or "")


# --------------------------------------------------------------------- the writer
def test_the_writer_retries_a_refused_reply_then_writes_the_file_before_the_watermark(tmp_path):
    s = session_with(tmp_path, "compute x", "x = 41 done")
    llm = ScriptedLLM(["## Task\nonly one section", text()])
    w = CheckpointWriter(s, lambda: llm, budget=600)
    assert w.check(tokens=500, rungs=[100, 400]) and w.wait(30)
    data = ck.path_of(s.dir).read_bytes()
    assert data == (text() + "\n").encode()
    assert (ck.path_of(s.dir).stat().st_mode & 0o777) == 0o600
    [mark] = entries(s, "checkpoint")
    assert mark.data["watermark"] == s.branch()[1].id and mark.data["attempts"] == 2
    assert mark.data["sha256"] == hashlib.sha256(data).hexdigest()
    retry = llm.calls[1][-1]["content"]
    assert "refused: the section '## The user's words that still matter' is missing" in retry
    first = llm.calls[0][1]["content"]
    assert "(none yet)" in first and "[User]: compute x" in first
    assert ck.read(SessionStore.open(s.id, tmp_path))[0] == text() + "\n"  # a new process


def test_a_rung_fires_once_per_fill_and_the_next_writing_covers_only_what_is_new(tmp_path):
    s = session_with(tmp_path, "compute x", "x = 41 done")
    llm = ScriptedLLM([text(), text("x = 42 now")])
    w = CheckpointWriter(s, lambda: llm, budget=600)
    assert w.check(150, [100, 200]) and w.wait(30)
    assert not w.check(150, [100, 200])  # the same rung: nothing new is due
    s.append(MessageEntry(message={"role": "user", "content": "and add one"}))
    assert w.check(250, [100, 200]) and w.wait(30)  # the next rung
    second = llm.calls[1][1]["content"]
    assert "[User]: and add one" in second and "compute x" not in second.split("<conversation>")[1]
    assert "x = 41 computed" in second.split("<conversation>")[0]  # the previous checkpoint
    assert [e.data["entries"] for e in entries(s, "checkpoint")] == [2, 2]
    assert not w.check(250, [100, 200])
    assert not w.check(50, [100, 200])  # relieved below the lowest rung: a new fill
    s.append(MessageEntry(message={"role": "assistant", "content": "x is 42"}))
    llm.enqueue(text("x is 42"))
    assert w.check(120, [100, 200]) and w.wait(30)
    assert ck.read(s)[0].count("x is 42") == 1
    # a compaction starts a new fill even when the context never went below the lowest
    # rung: a checkpoint from before it cannot serve the next rebuild
    from rlm.session.entries import CompactionEntry

    assert not w.check(150, [100, 200])
    s.append(CompactionEntry(summary="S", first_kept_entry_id=s.branch()[-1].id,
                             tokens_before=300, trigger="threshold"))
    s.append(MessageEntry(message={"role": "user", "content": "go on"}))
    llm.enqueue(text("after the summary"))
    assert w.check(150, [100, 200]) and w.wait(30)
    assert len(entries(s, "checkpoint")) == 4


def test_a_failed_writer_keeps_the_previous_checkpoint_and_says_why(tmp_path):
    s = session_with(tmp_path, "compute x", "x = 41 done")
    llm = ScriptedLLM([text(), {"error": "auth", "message": "the key was revoked"}])
    w = CheckpointWriter(s, lambda: llm, budget=600)
    assert w.check(150, [100, 200]) and w.wait(30)
    before = ck.path_of(s.dir).read_bytes()
    s.append(MessageEntry(message={"role": "user", "content": "more"}))
    assert w.check(250, [100, 200]) and w.wait(60)
    assert ck.path_of(s.dir).read_bytes() == before
    assert len(entries(s, "checkpoint")) == 1 and ck.read(s)[0] == before.decode()
    [failed] = entries(s, "checkpoint_outcome")
    assert "the key was revoked" in failed.data["reason"]
    shown = rlmcli.rlm("checkpoint", s.id, "--json", cwd=tmp_path,
                       env={"RLM_HOME": str(tmp_path)})
    out = json.loads(shown.stdout)
    assert out["text"] == before.decode() and "the key was revoked" in out["last_failure"]


def test_replies_that_never_pass_and_a_file_that_cannot_be_written_leave_no_watermark(tmp_path):
    s = session_with(tmp_path, "compute x", "x = 41 done")
    w = CheckpointWriter(s, lambda: ScriptedLLM(["no sections"] * 3), budget=600)
    assert w.check(150, [100]) and w.wait(30)
    assert not ck.path_of(s.dir).exists() and not entries(s, "checkpoint")
    assert "3 replies were refused, the last because the section '## Task' is missing" in \
        entries(s, "checkpoint_outcome")[0].data["reason"]
    shown = rlmcli.rlm("checkpoint", s.id, cwd=tmp_path, env={"RLM_HOME": str(tmp_path)})
    assert shown.returncode == 1 and "has no checkpoint yet" in shown.stderr
    assert "the last writing failed: 3 replies were refused" in shown.stderr

    ck.path_of(s.dir).mkdir()  # where the file goes: the rename cannot replace a folder
    w = CheckpointWriter(s, lambda: ScriptedLLM([text()]), budget=600)
    assert w.check(150, [100]) and w.wait(30)
    assert not entries(s, "checkpoint") and ck.read(s) is None
    assert "could not be written" in entries(s, "checkpoint_outcome")[-1].data["reason"]


def test_a_closed_writer_starts_nothing_and_a_confirmed_draft_needs_its_file(tmp_path):
    s = session_with(tmp_path, "compute x", "x = 41 done")
    w = CheckpointWriter(s, lambda: ScriptedLLM([text()]), budget=600)
    w.close()
    assert not w.check(150, [100]) and not ck.path_of(s.dir).exists()
    d = ck.draft(s, ScriptedLLM([text()]), s.branch()[-1].id, 600)
    assert d.text == text() and d.entries == 2
    ck.confirm(s, d)
    ck.path_of(s.dir).write_text(text("edited by hand"))  # not what the watermark confirmed
    assert ck.read(s) is None


# ------------------------------------------------------- the root, the kernel, the CLI
def test_checkpoints_as_the_context_fills_for_a_hosted_model_with_tiers_only(tmp_path, _isolated_home,
                                                                 monkeypatch):
    model = tmp_path / "s.json"
    model.write_text(json.dumps(["hi"]))
    options = app.RunOptions(overrides={"model": f"script:{model}"})
    with app.SessionRun.new("run", "t", options, start=False) as run:
        assert run.agent is not None and run.agent.parts.get(CompactionController) is not None
        writer = run.agent.parts.get(CompactionController).checkpoint
        assert writer is not None and not writer.automatic  # it writes on `/rebuild` only
    hosted = {"model": f"script:{model}", "compaction_model": "openai/gpt-4o-mini"}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-checkpoint")  # never called: not started
    for tiers, automatic in ((True, True), (False, False)):  # summaries only: no writer
        options = app.RunOptions(overrides={**hosted, "context_tiers": tiers})
        with app.SessionRun.new("run", "t", options, start=False) as run:
            assert run.agent is not None and run.agent.parts.get(CompactionController) is not None
            assert run.agent.parts.get(CompactionController).checkpoint.automatic is automatic


PADDING = "print(' '.join(f'value{i}' for i in range(250)))"
WAIT_FOR_IT = ("import time\nt = time.time()\n"
               "while history.checkpoint() is None and time.time() - t < 60:\n"
               "    time.sleep(0.05)\n"
               "seen = history.checkpoint()\nprint(seen['text'].splitlines()[0], seen['entries'])")


@pytest.mark.timeout(180)
def test_a_hosted_compaction_model_writes_the_checkpoint_by_default(tmp_path, _isolated_home):
    """No setting: the compaction model is hosted, so the default rungs apply; the run's
    cells go on while it writes, and the kernel reads it through `history.checkpoint()`."""
    session_model = tmp_path / "s.json"
    session_model.write_text(json.dumps({"window": 4000, "replies": [
        call(PADDING), call(PADDING), call(WAIT_FOR_IT), call("final(seen['text'][:7])")]}))
    with serving([{"content": text()}]) as server:
        out = rlmcli.rlm("run", "pad, then wait for the checkpoint", "--model",
                         f"script:{session_model}", "--compaction-model", "openai/gpt-4o-mini",
                         "--json", cwd=tmp_path, check=False,
                         env={"OPENAI_API_KEY": "sk-test-checkpoint",
                              "OPENAI_API_BASE": server.base})
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["final"] == "## Task", res
    # verification is not this test's subject: the answer is the checkpoint's first line,
    # read through history.checkpoint() (the host's text, not the task's data), so the run
    # ends answered or unverified; either way it ended with that answer
    assert res["status"] in ("answered", "unverified"), res
    assert out.returncode == res["exit_code"] and res["exit_code"] in (0, 5), res
    sdir = Path(res["session_path"]).parent
    assert (sdir / "checkpoint.md").read_text() == text() + "\n"
    request = server.requests[0]
    assert request["model"] == "gpt-4o-mini"
    assert request["messages"][0]["content"].startswith("You keep the checkpoint")
    assert "value249" in request["messages"][1]["content"]  # the cells' outputs it covers
    shown = rlmcli.rlm("checkpoint", res["session_id"], cwd=tmp_path, check=True)
    assert shown.stdout == text() + "\n" and "covers the log up to entry" in shown.stderr
    # the writer is a session of its own under the parent's: what it was asked and answered
    writer = sdir / "children" / "checkpoint"
    assert f"rlm log {writer}" in shown.stderr
    asked, answered = [e.message for e in SessionStore.open(writer).branch()
                       if isinstance(e, MessageEntry)]
    assert "value249" in asked["content"] and answered["content"] == text()
    assert SessionStore.open(writer).header.parent_session == res["session_id"]
    assert text().splitlines()[0] in rlmcli.rlm("log", str(writer), cwd=tmp_path).stdout


# ------------------------------------------------------------------------ the rebuild
def prose(tag: str, n: int = 300) -> str:
    """Assistant prose: what no tier shakes or prunes, so only a summary or a rebuild
    brings the context back under its threshold."""
    return f"Notes {tag}: " + " ".join(f"{tag}{i}" for i in range(n))


def test_over_the_threshold_the_run_is_rebuilt_from_its_checkpoint_without_a_model_call(
        tmp_path, _isolated_home):
    """Through the root (run_task): the writer checkpoints early; later, the context over
    its threshold is rebuilt from that checkpoint, and the summary model is never asked."""
    from rlm.config import load_config

    wait_for_second = ("import time\nt = time.time()\n"
                       "while 'y = 42' not in (history.checkpoint() or {}).get('text', '') "
                       "and time.time() - t < 60:\n    time.sleep(0.05)\nprint('ready')")
    data = tmp_path / "x.txt"  # the task's data: x, and so the answer, rest on it
    data.write_text("41")
    session_model = tmp_path / "s.json"
    session_model.write_text(json.dumps({"window": 4000, "replies": [
        call(f"x = int(open({str(data)!r}).read())\nprint(x)", prose("a", 450)),  # over 0.3 of the window: a checkpoint
        call("y = x + 1\nprint(y)", prose("b", 450)),  # over 0.6: a second one
        call(wait_for_second),
        call("print(x + y)", prose("c", 450)),  # over the threshold (3,000)
        call("final(str(x + y))"),
    ]}))
    compaction_model = tmp_path / "c.json"
    compaction_model.write_text(json.dumps([text("x = 41"), text("x = 41 and y = 42")]))
    cfg = load_config(model=f"script:{session_model}",
                      compaction_model=f"script:{compaction_model}", checkpoint_rungs=(0.3, 0.6))
    res = app.run_task("add x and y", config=cfg)
    assert res.final == "83", res
    s = SessionStore.open(res.session_id)
    log = list(s.branch())
    [rebuilt] = [e for e in log if e.type == "compaction"]
    assert rebuilt.details["kind"] == "rebuild" and rebuilt.trigger == "threshold"
    assert "x = 41 and y = 42" in rebuilt.summary
    assert "<task>\nadd x and y\n</task>" in rebuilt.summary
    assert not entries(s, "compaction_outcome")  # no summary was tried (its script is empty)
    marks = entries(s, "checkpoint")
    assert len(marks) == 2 and rebuilt.details["watermark"] == marks[-1].data["watermark"]
    # the projection starts at the boundary: what the checkpoint covers is gone from it
    # but for the newest turns (keep_recent_tokens, as after a summary), what it does not
    # cover is kept verbatim, and the kernel's names follow
    from rlm.session.context import build_messages

    sent = json.dumps(build_messages(s.branch(), system_prompt="", native_tools=True))
    assert "a449" not in sent and "c449" in sent
    ids = [e.id for e in log]
    ids = [e.id for e in log]
    assert ids.index(rebuilt.first_kept_entry_id) <= ids.index(rebuilt.details["watermark"]) + 1, (
        [(e.type, getattr(e, "role", None), getattr(e, "custom_type", None)) for e in log],
        rebuilt.details, [m.data for m in marks])
    assert "<ipython_state>" in sent and "- x: int = 41" in sent
    shown = rlmcli.rlm("log", res.session_id, cwd=tmp_path).stdout
    assert "x = 41 and y = 42" in shown


def test_no_boundary_without_a_checkpoint_from_an_older_one_or_over_the_limit(tmp_path):
    from rlm.compaction.rebuild import rebuild
    from rlm.session.entries import CompactionEntry

    s = session_with(tmp_path, "compute x", prose("a", 400), "and y", prose("b", 400))
    assert rebuild(s, "threshold", limit=None) is None  # no checkpoint yet
    covered = s.branch()[1].id  # "compute x" and the first long reply
    ck.confirm(s, ck.Draft(text(), covered, 2, 1))
    n = len(s.branch())
    assert rebuild(s, "threshold", limit=10) is None and len(s.branch()) == n  # still over
    entry = rebuild(s, "overflow", limit=None)
    assert entry is not None and entry.first_kept_entry_id == s.branch()[2].id  # "and y"
    assert "<recent-user-messages>" not in entry.summary  # one user message before the cut
    # a summary after the checkpoint's watermark covers more than it: no boundary from it
    s2 = session_with(tmp_path, "compute x", prose("a", 400), "and y", prose("b", 400))
    ck.confirm(s2, ck.Draft(text(), s2.branch()[1].id, 2, 1))
    s2.append(CompactionEntry(summary="S", first_kept_entry_id=s2.branch()[3].id,
                              tokens_before=900, trigger="threshold"))
    s2.append(MessageEntry(message={"role": "user", "content": "go on"}))
    assert rebuild(s2, "threshold", limit=None) is None


def test_the_watermarks_own_entry_after_the_covered_turn_does_not_bring_that_turn_back(
        tmp_path):
    """The writer's watermark lands after the last entry it covers (here, before the next
    turn): the boundary cuts at the next turn, not at the covered turn before the mark."""
    from rlm.compaction.rebuild import rebuild

    s = session_with(tmp_path, "compute x", prose("a", 400), "and y", prose("b", 400))
    ck.confirm(s, ck.Draft(text(), s.branch()[-1].id, 4, 1))  # the mark: a hidden entry
    s.append(MessageEntry(message={"role": "user", "content": "go on"}))
    s.append(MessageEntry(message={"role": "assistant", "content": prose("c", 50)}))
    entry = rebuild(s, "overflow", limit=None)
    assert entry is not None
    assert s.get(entry.first_kept_entry_id).message["content"] == "go on"


def test_a_key_in_the_writers_reply_never_reaches_the_file(tmp_path, monkeypatch):
    key = "sk-test-" + "k3y" * 12
    monkeypatch.setenv("OPENAI_API_KEY", key)
    s = session_with(tmp_path, "compute x", "x = 41 done")
    llm = ScriptedLLM([text(progress=f"used the key {key}")])
    w = CheckpointWriter(s, lambda: llm, 600, log=lambda: writer_session(s, llm))
    assert w.check(150, [100]) and w.wait(30)
    found = ck.read(s)
    assert found is not None and key not in found[0] and "used the key [redacted]" in found[0]
    assert key.encode() not in ck.path_of(s.dir).read_bytes()
    kept = (s.dir / "children" / "checkpoint" / "session.jsonl").read_bytes()
    assert b"used the key [redacted]" in kept and key.encode() not in kept


def test_a_failed_writing_is_said_once_on_the_terminal(tmp_path, _isolated_home):
    """The user's config asks for checkpoints; the compaction model's replies are refused:
    the run goes on, and the terminal says once why there is no checkpoint."""
    config = tmp_path / "user.toml"
    config.write_text("checkpoint_rungs = [0.1]\n")
    wait_for_outcome = (
        "import os, time\np = os.path.join(os.environ['RLM_SESSION_DIR'], 'session.jsonl')\n"
        "t = time.time()\n"
        "while 'checkpoint_outcome' not in open(p).read() and time.time() - t < 60:\n"
        "    time.sleep(0.05)\nprint('seen')")
    session_model = tmp_path / "s.json"
    session_model.write_text(json.dumps({"window": 4000, "replies": [
        call(PADDING), call(wait_for_outcome),
        call("print(int(open('six.txt').read()) * 7)"), call("final('42')")]}))
    (tmp_path / "six.txt").write_text("6")  # the task's data: the answer 42 rests on it
    compaction_model = tmp_path / "c.json"
    compaction_model.write_text(json.dumps(["no sections at all"] * 3))
    out = rlmcli.rlm("run", "pad", "--model", f"script:{session_model}", "--compaction-model",
                     f"script:{compaction_model}", cwd=tmp_path, check=True,
                     env={"RLM_CONFIG": str(config)})
    said = out.stdout + out.stderr
    assert said.count("the checkpoint was not written: 3 replies were refused") == 1, said
    # the refused replies and the reasons given back are kept in the writer's session
    [writer] = list(_isolated_home.glob("sessions/*/children/checkpoint"))
    kept = [e.message for e in SessionStore.open(writer).branch() if isinstance(e, MessageEntry)]
    assert [m["role"] for m in kept] == ["user", "assistant"] * 3
    assert [m["content"] for m in kept[1::2]] == ["no sections at all"] * 3
    assert "That checkpoint was refused: the section '## Task' is missing" in kept[2]["content"]


# ------------------------------------------------- a checkpoint written on the main path
@pytest.mark.parametrize("writer_replies, rebuilt", [([text("x = 41, y = 42")], True),
                                                     (["no sections"] * 3, False)])
def test_over_the_threshold_with_no_checkpoint_one_is_written_now_else_the_summary_runs(
        tmp_path, _isolated_home, writer_replies, rebuilt):
    """Rungs are set but one turn jumps from under the lowest to over the threshold: the
    relief writes a checkpoint now and rebuilds from it (no summary: the summary's reply
    is never taken). When the writer's replies are refused, the summary runs instead."""
    from rlm.config import load_config

    data = tmp_path / "x.txt"  # the task's data: x, and so the answer, rest on it
    data.write_text("41")
    session_model = tmp_path / "s.json"
    session_model.write_text(json.dumps({"window": 4000, "replies": [
        call(f"x = int(open({str(data)!r}).read())\nprint(x)", prose("a", 350)),
        call("y = x + 1\nprint(y)", prose("b", 350)),
        call("print(x + y)", prose("c", 420)),  # from under the rung to over the threshold
        call("final(str(x + y))"),
    ]}))
    compaction_model = tmp_path / "c.json"
    compaction_model.write_text(json.dumps([*writer_replies, "## Goal\nthe summary"]))
    cfg = load_config(model=f"script:{session_model}",
                      compaction_model=f"script:{compaction_model}", checkpoint_rungs=(0.75,))
    res = app.run_task("add x and y", config=cfg)
    assert res.final == "83", res
    s = SessionStore.open(res.session_id)
    [compacted] = [e for e in s.branch() if e.type == "compaction"]
    assert compacted.trigger == "threshold"
    if rebuilt:
        assert compacted.details["kind"] == "rebuild" and "x = 41, y = 42" in compacted.summary
        assert compacted.details["written_now"] is True
        [mark] = entries(s, "checkpoint")  # written on the main path, covering the turn
        ids = [e.id for e in s.branch()]
        assert ids.index(mark.data["watermark"]) > ids.index(compacted.first_kept_entry_id)
        from rlm.session.context import build_messages

        sent = json.dumps(build_messages(s.branch(), system_prompt="", native_tools=True))
        assert "a419" not in sent and "c419" in sent  # the newest turn stays verbatim
        assert "- x: int = 41" in sent
    else:
        assert (compacted.details or {}).get("kind") != "rebuild"
        assert "the summary" in compacted.summary
        assert "3 replies were refused" in entries(s, "checkpoint_outcome")[0].data["reason"]


def test_a_writer_past_its_wait_leaves_the_relief_to_the_summary_and_finishes_for_later(
        tmp_path):
    import threading

    from rlm.compaction.rebuild import from_checkpoint

    s = session_with(tmp_path, "compute x", prose("a", 400), "and y", prose("b", 400))
    slow = threading.Event()

    def model():  # the compaction model is slow to answer
        slow.wait(30)
        return ScriptedLLM([text()])

    w = CheckpointWriter(s, model, 600, (0.5,))
    assert from_checkpoint(w, s, "overflow", limit=None, wait_s=0.2, start=True) is None
    [why] = entries(s, "compaction_outcome")
    assert "did not finish within 0.2 s" in why.data["reason"] and why.display
    slow.set()
    assert w.wait(30) and ck.read(s) is not None  # its checkpoint serves the next relief
    entry = from_checkpoint(w, s, "overflow", limit=None, wait_s=0.2, start=True)
    assert entry is not None and "x = 41 computed" in entry.summary


def test_slash_rebuild_writes_the_checkpoint_and_restarts_the_context_from_it(
        tmp_path, _isolated_home):
    """No setting, an in-process model (no rungs): `/rebuild` in chat writes the checkpoint
    on the compaction model, then the context starts at its boundary."""
    data = tmp_path / "x.txt"  # the task's data: x, and so the answers, rest on it
    data.write_text("41")
    session_model = tmp_path / "s.json"
    session_model.write_text(json.dumps([
        call(f"x = int(open({str(data)!r}).read())\nprint(x)", prose("a", 300)), "x is 41",
        call("print(x + 1)"), "x + 1 is 42"]))
    compaction_model = tmp_path / "c.json"
    compaction_model.write_text(json.dumps([text("x = 41 and printed")]))
    out = rlmcli.rlm("chat", "--model", f"script:{session_model}", "--compaction-model",
                     f"script:{compaction_model}", cwd=tmp_path, check=True,
                     stdin="compute x\n/rebuild\nand add one\n/exit\n")
    assert "context rebuilt from a checkpoint written now" in out.stdout, out.stdout + out.stderr
    [path] = sorted(_isolated_home.glob("sessions/*/session.jsonl"))
    s = SessionStore.open(path.parent.name)
    [rebuilt] = [e for e in s.branch() if e.type == "compaction"]
    assert rebuilt.trigger == "manual" and rebuilt.details["kind"] == "rebuild"
    assert "x = 41 and printed" in rebuilt.summary
    assert (path.parent / "checkpoint.md").read_text() == text("x = 41 and printed") + "\n"
    # the next prompt's model call starts at the boundary
    from rlm.session.context import build_messages

    sent = json.dumps(build_messages(s.branch(), system_prompt="", native_tools=True))
    assert "a299" not in sent and "x = 41 and printed" in sent and "and add one" in sent


def test_the_writers_prompt_fits_its_window_for_text_denser_than_prose(tmp_path):
    """The conversation is cut to the writer's window by count (rlm.llm.tokens.tail_within),
    not by a characters-per-token guess: before, 3 characters a token let dense text (CJK,
    here) send a prompt past the writer model's window."""
    import random

    from rlm.llm.tokens import count_messages

    rng = random.Random(7)
    dense = ["".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(6000)) for _ in range(6)]
    s = session_with(tmp_path, *dense)
    llm = ScriptedLLM([text()], window=8000)
    budget = ck.budget_for(8000)
    d = ck.draft(s, llm, s.branch()[-1].id, budget)
    assert d.text == text()
    sent = count_messages(llm.calls[0])
    assert sent + budget + budget // 4 <= 8000  # the prompt and the reply it may write
    assert "characters elided" in llm.calls[0][1]["content"]  # the newest part is kept
    assert dense[-1][-200:] in llm.calls[0][1]["content"]
