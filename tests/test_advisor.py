"""The advisor: the emission guard and feed (pure), the advisor's own thread with a scripted
advisor model (what it was sent, what it delivered), and end to end through build_agent with
a real kernel: a nit reaches the next model call, a blocker interrupts a running cell."""

from __future__ import annotations

import threading
from pathlib import Path

from rlm.agent.advisor import RECORDED, Advice, Advisor, EmissionGuard
from rlm.agent.advisor.guard import judged_reply, render_delta, running_reply
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import CellFinished, RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore


def _advisor_of(agent) -> Advisor:
    """The run's advisor, as the advisor feature exposes it (rlm.app.seam: Wiring.expose)."""
    advisor = agent.parts.get(Advisor)
    assert advisor is not None
    return advisor


def advise(*pairs: tuple[str, str]) -> dict:
    return {"content": "", "tool_calls": [
        {"name": "advise", "arguments": {"note": n, "severity": s}} for n, s in pairs]}


def user(text: str) -> MessageEntry:
    return MessageEntry(message={"role": "user", "content": text})


def reply(text: str, code: str | None = None) -> MessageEntry:
    msg: dict = {"role": "assistant", "content": text}
    if code is not None:
        msg["tool_calls"] = [{"id": "c1", "type": "function",
                              "function": {"name": "python", "arguments": f'{{"code": "{code}"}}'}}]
    return MessageEntry(message=msg)


def test_the_guard_drops_filler_duplicates_and_a_second_advice_per_update():
    g = EmissionGuard()
    assert not g.admit("Stop.", "nit", slot_used=False)
    assert not g.admit("  LGTM!! ", "concern", slot_used=False)
    assert not g.admit("No issues.", "nit", slot_used=False)
    assert not g.admit("use the parquet files", "urgent", slot_used=False)  # no such severity
    assert g.admit("Use the parquet files, not the CSVs", "concern", slot_used=False)
    assert not g.admit("use the parquet files not the csvs", "nit", slot_used=False)  # same
    assert not g.admit("Check the totals", "nit", slot_used=True)  # one per update
    assert g.admit("Check the totals", "nit", slot_used=False)  # the slot was not its to use
    assert g.suppressed == 6


def test_the_feed_collapses_repeated_text_and_knows_a_running_cell():
    sent: set[str] = set()
    first = render_delta([user("go"), reply("", "print(1)")], sent)
    assert "[user] go" in first and "[agent cell]\nprint(1)" in first
    again = render_delta([reply("", "print(1)")], sent)
    assert again == "[agent cell] [same as before]"
    tool = MessageEntry(message={"role": "tool", "tool_call_id": "c1", "content": "1"})
    first, answer = reply("", "x"), reply("the answer")
    assert running_reply([user("go"), first]) == first.id
    assert running_reply([user("go"), first, tool]) is None
    assert running_reply([user("go"), first, tool, answer]) is None
    # what an update judges: the newest reply, with cells or not
    assert judged_reply([user("go"), first, tool]) == first.id
    assert judged_reply([user("go"), first, tool, answer]) == answer.id


def _advisor(replies: list, **kw) -> tuple[Advisor, ScriptedLLM, list[Advice]]:
    llm = ScriptedLLM(replies)
    got: list[Advice] = []
    return Advisor(llm, got.append, **kw), llm, got


def test_suppressed_and_admitted_calls_are_both_answered_recorded():
    adv, llm, got = _advisor([
        advise(("LGTM", "nit")),
        advise(("Read the parquet file instead", "concern"), ("Also check nulls", "nit")),
        {"content": "nothing to add"},
    ], primary_tokens=lambda: 10**9)
    branch = [user("total revenue?"), reply("", "df = pd.read_csv('a.csv')")]
    adv.update(branch)
    assert adv.wait_idle(60)
    branch += [reply("The total is 5.")]
    adv.update(branch)
    assert adv.wait_idle(60)
    branch += [user("and by region?")]
    adv.update(branch)
    assert adv.wait_idle(60)
    # it carries the reply its update judged (the newest on that branch)
    assert got == [Advice("Read the parquet file instead", "concern", branch[2].id)]
    second, third = llm.calls[1], llm.calls[2]
    assert [m["content"] for m in second if m["role"] == "tool"] == [RECORDED]
    assert [m["content"] for m in third if m["role"] == "tool"] == [RECORDED] * 3
    # its context is append-only: each request extends the one before
    assert third[:len(second)] == second
    assert adv.stats.advice == 1 and adv.stats.suppressed == 2 and adv.stats.calls == 3
    assert adv.stats.health == "silent for 1 turns"


def test_a_fenced_model_advises_in_text_lines_through_the_same_guard():
    """The local model's family has no native tools: the advisor asks for
    `ADVISE(severity): note` lines, offers no tool, and the guard still drops filler and a
    second advice in one update."""
    from rlm.agent.advisor.guard import text_advice

    assert text_advice("Looks risky.\nADVISE(Concern): use the parquet file\n") == [
        ("use the parquet file", "concern")]
    adv, llm, got = _advisor([
        "ADVISE(nit): LGTM",
        "ADVISE(concern): Read the parquet file instead\nADVISE(nit): Also check nulls",
        "NONE",
    ], primary_tokens=lambda: 10**9)
    llm.native_tools = False
    branch = [user("total revenue?"), reply("", "df = pd.read_csv('a.csv')")]
    for more in ([], [reply("The total is 5.")], [user("and by region?")]):
        branch += more
        adv.update(branch)
        assert adv.wait_idle(60)
    assert got == [Advice("Read the parquet file instead", "concern", branch[2].id)]
    assert "ADVISE(severity): note" in llm.calls[0][0]["content"]
    assert len(llm.requests) == 3 and all(not r.get("tools") for r in llm.requests)
    assert adv.stats.advice == 1 and adv.stats.suppressed == 2 and adv.stats.calls == 3


def test_a_compaction_reseeds_it_from_what_the_agents_context_shows():
    """After a compaction the seed is the agent's own projection: the summary, a rule
    reminder pinned from before the kept range, and the kept recent turns."""
    adv, llm, got = _advisor([{"content": ""}, {"content": ""}], primary_tokens=lambda: 10**9)
    rule = CustomEntry(custom_type="rule_injection", data={"rule": "r"}, display=True,
                       content="Rule: the data is JSON, use pd.read_json.")
    kept = reply("computing the totals per region")
    branch = [user("task one"), rule, reply("working on it"), kept]
    adv.update(branch)
    assert adv.wait_idle(60)
    comp = CompactionEntry(summary="the data was loaded into df", first_kept_entry_id=kept.id,
                           tokens_before=100)
    adv.update([*branch, comp, user("go on")])
    assert adv.wait_idle(60)
    seed = llm.calls[1]
    assert len(seed) == 2 and seed[0]["role"] == "system"
    text = seed[1]["content"]
    assert "the data was loaded into df" in text and "computing the totals per region" in text
    assert "use pd.read_json" in text and "go on" in text
    assert "task one" not in text and "working on it" not in text  # compacted: its summary


def test_its_own_context_past_half_its_window_reseeds_it():
    adv, llm, got = _advisor([{"content": ""}] * 3, primary_tokens=lambda: 10**9)
    llm.window = 200  # tokens: half of it is 400 characters
    branch = [user("x" * 300)]
    adv.update(branch)
    assert adv.wait_idle(60)
    branch.append(reply("y" * 300))
    adv.update(branch)  # the context passed its share during the first call: a new seed
    assert adv.wait_idle(60)
    assert len(llm.calls[1]) == 2 and "x" * 300 in llm.calls[1][1]["content"]


def test_its_context_is_measured_in_tokens_not_characters():
    """Its share of the window is counted (rlm.llm.tokens), not guessed at 4 characters a
    token: dense text (CJK, ~2 tokens a character) past half the window reseeds it though
    its characters are far below 4 per token of that half."""
    from rlm.llm.tokens import count_messages

    adv, llm, got = _advisor([{"content": ""}] * 3, primary_tokens=lambda: 10**9)
    llm.window = 2000  # tokens: half of it is 1,000
    dense = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(700))
    branch = [user(dense)]
    adv.update(branch)
    assert adv.wait_idle(60)
    first = llm.calls[0]
    assert count_messages(first) > 1000 and sum(len(m["content"]) for m in first) < 4000
    branch.append(reply("next"))
    adv.update(branch)
    assert adv.wait_idle(60)
    assert len(llm.calls[1]) == 2 and dense in llm.calls[1][1]["content"]  # a new seed


def test_the_cost_cap_thins_updates():
    adv, llm, got = _advisor([{"content": "", "usage": {"input_tokens": 500,
                                                         "output_tokens": 10}}] * 4,
                             primary_tokens=lambda: 100)  # far past 25% of the primary
    branch: list = []
    for i in range(7):
        branch.append(user(f"step {i}"))
        adv.update(branch)
        assert adv.wait_idle(60)
    # the first update is sent; then only every third one carries the skipped deltas along
    assert len(llm.calls) == 3 and adv.stats.thinned == 4
    assert "step 1" in llm.calls[1][-1]["content"] and "step 3" in llm.calls[1][-1]["content"]


def test_three_failures_drop_the_backlog_and_tell_the_user():
    told: list[str] = []
    adv, llm, got = _advisor([], tell=told.append, primary_tokens=lambda: 10**9)
    for i in range(4):
        adv.update([user(f"step {i}")] * (i + 1))
        assert adv.wait_idle(60)
    assert len(told) == 1 and "failed 3 times in a row" in told[0]  # once a streak
    assert adv.stats.health.startswith("failing (4 in a row")  # never merely "silent"


# ------------------------------------------------------------------------ end to end
class Waiting:
    """A model whose call number `at` first waits for `ready` (a barrier for the test)."""

    def __init__(self, inner: ScriptedLLM, at: int, ready: threading.Event):
        self.inner, self.at, self.ready, self.n = inner, at, ready, 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def complete(self, *a, **kw):
        if self.n == self.at:
            assert self.ready.wait(120), "the barrier was never reached"
        self.n += 1
        return self.inner.complete(*a, **kw)


def fenced(code: str) -> str:
    return f"Next.\n\n```python\n{code}\n```\n"


def _agent(home: Path, main, advisor_llm):
    config = Config(home=home, model="script:main", advisor="script:advisor", cell_timeout=120)
    session = SessionStore.create(home, model="script:main", task="t")
    agent = build_agent(session, config, llm=main,
                        llm_factory=lambda spec: advisor_llm)
    return agent, session


def test_a_nit_lands_before_the_next_model_call(_isolated_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "WATCHDOG.md").write_text("Totals here are always in euros.")
    (tmp_path / ".agent").mkdir()
    (tmp_path / ".agent" / "conventions.md").write_text("- round totals to cents\n")
    advisor_llm = ScriptedLLM([advise(("Say the currency: totals are in euros", "nit"))])
    inner = ScriptedLLM([fenced("total = 40 + 2\nprint(total)"), fenced("final(f'{total} EUR')")])
    advised = threading.Event()
    agent, session = _agent(_isolated_home, inner, advisor_llm)
    _advisor_of(agent).deliver = _also(_advisor_of(agent).deliver, advised.set)
    # a barrier after the turn's hooks: the next turn starts once the advisor has spoken
    agent.chain.turn.append(lambda a: None if advised.wait(120) else None)
    with agent:
        events = list(agent.run("What is the total?"))
    assert events[-1].final == "42 EUR"
    second = "\n".join(str(m["content"]) for m in inner.calls[1])
    assert '<advisory guidance="weigh, don\'t blindly obey" severity="nit">Say the currency' \
        in second
    assert "Totals here are always in euros." in advisor_llm.calls[0][0]["content"]
    assert "round totals to cents" in advisor_llm.calls[0][0]["content"]  # project memory
    assert _advisor_of(agent).stats.advice == 1
    # the user reads the advice as the model gets it (it was invisible: issue 58 item 11)
    assert "advisor (nit): Say the currency: totals are in euros" in _notices(events)


def _notices(events) -> list[str]:
    from rlm.events import Notice

    return [e.text for e in events if isinstance(e, Notice)]


def _also(deliver, then):
    def both(advice):
        deliver(advice)
        then()
    return both


def test_a_blocker_interrupts_a_running_cell_and_the_run_goes_on(_isolated_home, tmp_path,
                                                                  monkeypatch):
    """The advisor reads a reply the moment it is logged; its blocker interrupts the cell
    that reply is running, and the run goes on (no test hook: the path a user takes)."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "sleeping"
    started = threading.Event()
    advisor_inner = ScriptedLLM([
        {"content": ""},  # on reply 1: nothing to say
        advise(("Do not sleep: the data is already loaded", "blocker")),  # on reply 2
    ])
    advisor_llm = Waiting(advisor_inner, 1, started)  # answers once the cell sleeps
    main = ScriptedLLM([
        fenced("x = 1\nprint(x)"),
        fenced(f"import time\nopen({str(marker)!r}, 'w').write('1')\nprint('sleeping', flush=True)\n"
               "time.sleep(30)"),
        fenced("final(str(x))"),
    ])
    agent, session = _agent(_isolated_home, main, advisor_llm)
    watcher = threading.Thread(target=lambda: _wait_for(marker, started), daemon=True)
    watcher.start()
    with agent:
        events = list(agent.run("x?"))
    statuses = [e.status for e in events if isinstance(e, CellFinished)]
    assert statuses[:2] == ["ok", "interrupted"] and statuses[-1] == "ok"
    end = events[-1]
    assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "1"
    third = "\n".join(str(m["content"]) for m in main.calls[2])
    assert "KeyboardInterrupt" in third and 'severity="blocker">Do not sleep' in third
    # whose interrupt it was, for the model and on screen (a bare KeyboardInterrupt before)
    assert "[This cell was stopped by the advisor (blocker): Do not sleep" in third
    assert ("the advisor stopped this cell (blocker): Do not sleep: the data is already "
            "loaded") in _notices(events)
    assert "time.sleep(30)" in advisor_inner.calls[1][-1]["content"]  # it read the cell


def test_a_late_blocker_about_an_earlier_reply_is_advice_and_stops_no_later_cell(
        _isolated_home, tmp_path, monkeypatch):
    """A blocker the advisor judged on reply 1, arriving while reply 2's cell runs, reaches
    the model and the user as advice; reply 2's cell runs to its end (it was interrupted,
    and told the advisor stopped it, when a blocker was not tied to its reply)."""
    monkeypatch.chdir(tmp_path)
    running, delivered = tmp_path / "running", tmp_path / "delivered"
    started = threading.Event()
    advisor_inner = ScriptedLLM([
        advise(("Do not trust x: it was never checked", "blocker")),  # on reply 1, late
        {"content": ""}, {"content": ""}, {"content": ""},
    ])
    advisor_llm = Waiting(advisor_inner, 0, started)  # answers once reply 2's cell runs
    main = ScriptedLLM([
        fenced("x = 1\nprint(x)"),
        # reply 2's cell runs until the advice was delivered, and a moment more (an
        # interrupt sent with the delivery lands in it)
        fenced(f"import os, time\nopen({str(running)!r}, 'w').write('1')\n"
               f"for _ in range(2400):\n    if os.path.exists({str(delivered)!r}): break\n"
               "    time.sleep(0.05)\ntime.sleep(1)\nprint('went on')"),
        fenced("final(str(x))"),
    ])
    agent, session = _agent(_isolated_home, main, advisor_llm)
    _advisor_of(agent).deliver = _also(_advisor_of(agent).deliver, lambda: delivered.write_text("1"))
    watcher = threading.Thread(target=lambda: _wait_for(running, started), daemon=True)
    watcher.start()
    with agent:
        events = list(agent.run("x?"))
    assert [e.status for e in events if isinstance(e, CellFinished)] == ["ok", "ok", "ok"]
    cells = [e for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"]
    assert "went on" in cells[1].message["content"]
    assert "stopped by the advisor" not in cells[1].message["content"]
    assert not any("the advisor stopped" in n for n in _notices(events))
    end = events[-1]
    assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "1"
    # not lost: the model reads it before its next call, the user as it is delivered
    third = "\n".join(str(m["content"]) for m in main.calls[2])
    assert 'severity="blocker">Do not trust x: it was never checked' in third
    assert "advisor (blocker): Do not trust x: it was never checked" in _notices(events)
    # it judged reply 1 (its update held reply 1's cell, not reply 2's)
    assert "print(x)" in advisor_inner.calls[0][-1]["content"]
    assert "went on" not in advisor_inner.calls[0][-1]["content"]


def test_a_blocker_before_the_cells_start_keeps_them_from_running(_isolated_home, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "deleted"
    advisor_llm = ScriptedLLM([advise(("Stop: that deletes the input", "blocker"))])
    main = ScriptedLLM([
        f"Two steps.\n\n```python\nopen({str(marker)!r}, 'w').write('1')\n```\n\n"
        "```python\nprint('second')\n```\n",
        fenced("final('kept')"),
    ])
    agent, session = _agent(_isolated_home, main, advisor_llm)
    advised = threading.Event()
    _advisor_of(agent).deliver = _also(_advisor_of(agent).deliver, advised.set)
    # a barrier after the advisor's hook: the cells start once it has spoken
    agent.chain.reply.append(lambda a: None if advised.wait(120) else None)
    with agent:
        events = list(agent.run("go"))
    assert not marker.exists()
    cells = [e for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"]
    assert [c.message["content"] for c in cells[:2]] == [
        "not run: the advisor stopped this reply (its advisory follows)"] * 2
    assert events[-1].final == "kept"
    assert ("2 more cell(s) of this reply not run: the advisor's blocker stopped the reply"
            in _notices(events))
    second = "\n".join(str(m["content"]) for m in main.calls[1])
    assert 'severity="blocker">Stop: that deletes the input' in second
    from rlm.notebook.export import export_session  # the notebook shows the advice too

    nb = export_session(session, tmp_path / "run.ipynb").read_text()
    assert "The advisor:" in nb and "Stop: that deletes the input" in nb


def test_a_failing_advisor_is_told_at_the_next_boundary_and_reads_failing(_isolated_home,
                                                                          tmp_path, monkeypatch):
    from rlm.events import Notice

    monkeypatch.chdir(tmp_path)
    main = ScriptedLLM([fenced(f"print({i})") for i in range(4)] + [fenced("final('done')")])
    agent, session = _agent(_isolated_home, main, ScriptedLLM([]))  # every call raises
    # the advisor's thread has handled the reply before the turn's own hooks run
    agent.chain.turn.insert(0, lambda a: None if _advisor_of(a).wait_idle(60) else None)
    with agent:
        events = list(agent.run("go"))
    told = [i for i, e in enumerate(events) if isinstance(e, Notice)
            and "the advisor failed 3 times in a row" in e.text]
    assert len(told) == 1 and told[0] < len(events) - 1, events  # during the run
    assert _advisor_of(agent).stats.report()["health"].startswith("failing")
    assert events[-1].final == "done"


def _wait_for(path: Path, then: threading.Event) -> None:
    done = threading.Event()
    while not path.exists():  # a marker file the cell writes; bounded by the test timeout
        done.wait(0.05)
    then.set()


def test_a_silent_advisor_is_reported_silent_in_json_and_in_the_log(tmp_path, _isolated_home):
    """`rlm run --advisor ... --json`: an advisor that never advised is "silent for N turns",
    never healthy, in the run's JSON and in the `advisor_stats` entry `rlm ps` reads."""
    import json

    from test_cli import call, rlm, script

    (tmp_path / "one.txt").write_text("1")  # the task's data: a verified answer reads it
    main = script(tmp_path / "main.json", [call("x = int(open('one.txt').read())\nprint(x)"),
                                           call("print(x + 1)"), call("final(str(x))")])
    quiet = script(tmp_path / "advisor.json", ["", "", "", ""])
    out = rlm("run", "a task", "--model", main, "--advisor", quiet, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "1"
    report = res["advisor"]
    assert report["advice"] == 0 and report["health"].startswith("silent for"), report
    logged = [json.loads(line)["data"] for line in Path(res["session_path"]).read_text().splitlines()
              if '"custom_type":"advisor_stats"' in line]
    assert logged and all(r["health"].startswith("silent for") for r in logged)


def test_advice_after_a_run_ended_waits_for_the_next_run_and_starts_none(_isolated_home,
                                                                         tmp_path, monkeypatch):
    """Advice that comes after the run's end (or after the user's stop) is not a reason to
    start a run (the foreground driver starts one for pending heartbeats and ticks); it is
    written as a visible note when the next run starts."""
    monkeypatch.chdir(tmp_path)
    main = ScriptedLLM([fenced("final('one')"), fenced("final('two')")])
    agent, session = _agent(_isolated_home, main, ScriptedLLM([{"content": ""}]))
    with agent:
        assert list(agent.run("first"))[-1].final == "one"
        _advisor_of(agent).deliver(Advice("Say which unit the answer is in", "concern"))
        assert not agent.pending_steered()
        agent.steer("heartbeat: check the inbox", "heartbeat")
        assert agent.pending_steered()  # a tick still gets its run
        assert list(agent.run("second"))[-1].final == "two"
    second = "\n".join(str(m["content"]) for m in main.calls[1])
    assert 'severity="concern">Say which unit' in second
    assert not agent.pending_steered()


def test_advice_given_before_a_resume_is_not_given_again():
    """The guard's "once per session" is read from the session's advisory entries, so an
    advisor started again on a resumed session does not repeat itself."""
    from rlm.agent.advisor import advisory_text

    given = CustomEntry(custom_type="advisory", display=True, data={"text": "x"},
                        content=advisory_text("Use the parquet files, not the CSVs", "concern"))
    adv, llm, got = _advisor([advise(("use the parquet files not the CSVs!", "nit")),
                              advise(("Check the totals", "nit"))],
                             primary_tokens=lambda: 10**9)
    branch = [user("total?"), given, reply("", "df = pd.read_csv('a.csv')")]
    adv.update(branch)
    assert adv.wait_idle(60)
    adv.update([*branch, user("and now?")])
    assert adv.wait_idle(60)
    assert got == [Advice("Check the totals", "nit", branch[-1].id)] and adv.stats.suppressed == 1
