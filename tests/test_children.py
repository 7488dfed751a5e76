"""Children beside the parent (issue 28): `rlm_spawn` handles, the session tree's slots,
steering, cancel, interrupts and the registry in the parent's log.

Real kernels (one per child), scripted models from script files, agents built by the
composition root (`SessionRun`); a recording model factory keeps every model instance so
a test can read what reached each child's model.
"""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from rlm import app
from rlm.cli.render import Renderer
from rlm.events import ChildProgress
from rlm.llm import get_llm
from tests.rlmcli import call, script

pytestmark = pytest.mark.timeout(240)


class Recording:
    """The run's model factory (get_llm), keeping each model it builds per spec."""

    def __init__(self, config):
        self.config = config
        self.built: dict[str, list] = {}
        self._lock = threading.Lock()

    def __call__(self, spec: str):
        llm = get_llm(spec, self.config)
        with self._lock:
            self.built.setdefault(spec, []).append(llm)
        return llm


def session_run(parent: str, child: str, **overrides) -> app.SessionRun:
    options = app.RunOptions(overrides={"model": parent, "sub_model": child, **overrides})
    return app.SessionRun.new("run", "go", options)


def drive(run: app.SessionRun, on_event=None):
    with run:
        events = run.drive("go", on_event)
        return events, run.session


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def child_entries(session_dir: Path) -> list[dict]:
    return [e["data"] for e in entries(session_dir / "session.jsonl")
            if e.get("type") == "custom" and e.get("custom_type") == "child"]


def ended(session_dir: Path) -> dict[str, dict]:
    """The last registry entry of each child, by name."""
    return {d["name"]: d for d in child_entries(session_dir)}


def max_overlap(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                   key=lambda x: (x[0], x[1]))
    now = most = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def tool_texts(run: app.SessionRun) -> list[str]:
    assert run.session is not None
    return [str(e["message"]["content"]) for e in entries(run.session.path)
            if e.get("type") == "message" and e["message"]["role"] == "tool"]


# ------------------------------------------------------------------------ fan-out
SQUARE = {"type": "object", "required": ["n", "square"], "additionalProperties": False,
          "properties": {"n": {"type": "integer"}, "square": {"type": "integer"}}}
FINDINGS = {"type": "object", "required": ["total", "findings"],
            "properties": {"total": {"type": "integer"},
                           "findings": {"type": "array", "minItems": 2,
                                        "items": {"type": "string"}}}}


def test_eight_children_under_max_children_3(tmp_path):
    child = script(tmp_path / "child.json", [
        call("import time\ntime.sleep(0.5)  # work that overlaps\n"
             "final({'n': context, 'square': context * context})"),
    ])
    parent = script(tmp_path / "parent.json", [
        call(f"schema = {SQUARE!r}\n"
             "hs = [rlm_spawn('square the number', context=i, name='sq', schema=schema)\n"
             "      for i in range(8)]\n"
             "print([h.name for h in hs])\n"
             "res = rlm_gather(hs)\nprint(list(res), res.partial)"),
        call("final(','.join(str(r['square']) for r in res if r['n'] >= 0))"),
    ])
    run = session_run(parent, child, max_children=3)
    shown = io.StringIO()  # the terminal, as a pipe sees it: no live region
    events, session = drive(run, Renderer(console=Console(file=shown, width=100)))
    assert events[-1].final == ",".join(str(i * i) for i in range(8))  # input order
    # each child's start and end reached the run's events while the parent's cell ran
    progress = [e for e in events if isinstance(e, ChildProgress)]
    assert {e.name for e in progress if e.state == "done"} == {"sq", *(f"sq-{i}" for i in
                                                                       range(2, 9))}
    screen = shown.getvalue()
    assert "child sq-3: running" in screen and "child sq-3: done · 1 turn(s)" in screen
    out = tool_texts(run)[0]
    assert "['sq', 'sq-2', 'sq-3', 'sq-4', 'sq-5', 'sq-6', 'sq-7', 'sq-8']" in out
    assert "False" in out  # not partial
    last = ended(session.dir)
    assert len(last) == 8 and all(d["state"] == "done" for d in last.values())
    spans = [(d["started_at"], d["ended_at"]) for d in last.values()]
    assert max_overlap(spans) <= 3  # never more than 3 at once
    assert max_overlap(spans) >= 2  # and they did run side by side
    # each child is a full session under the parent's children/, named by its id
    for d in last.values():
        assert (session.dir / "children" / d["id"] / "session.jsonl").is_file()
        assert d["tokens"] > 0 and d["turns"] == 1


def test_rlm_query_is_the_blocking_form_and_a_failure_is_raised(tmp_path):
    child = script(tmp_path / "child.json", [call("final(str(sum(context)))")])
    parent = script(tmp_path / "parent.json", [
        call("print(rlm_query('add', context=[1, 2, 3]))\n"
             "h = rlm_spawn('bad', model='script:/elsewhere.json')"),
        call("final('ok')"),
    ])
    run = session_run(parent, child)
    events, session = drive(run)
    out = tool_texts(run)[0]
    assert "6" in out and "is not a configured model" in out
    states = [d["state"] for d in child_entries(session.dir)]
    assert [s for s in states if s != "running"] == ["queued", "done"], states


def test_steer_reaches_a_running_child_and_cancel_frees_its_slot(tmp_path):
    marker = tmp_path / "child-started"
    go = tmp_path / "go-on"
    wait_for_go = (f"import os, time\nopen({str(marker)!r}, 'w').close()\n"
                   f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")
    child = script(tmp_path / "child.json", [
        call(wait_for_go + "print('waited')"),
        call("final('B' if True else 'A')"),
    ])
    slow = script(tmp_path / "slow.json", [
        call(f"open({str(tmp_path / 'slow-started')!r}, 'w').close()\nimport time\n"
             "time.sleep(120)"),
        call("final('never')"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("import os, time\n"
             f"h = rlm_spawn('read the table', name='reader')\n"
             f"while not os.path.exists({str(marker)!r}):\n    time.sleep(0.05)\n"
             "h.steer('use column B')\nh.send('and report the row count')\n"
             f"open({str(go)!r}, 'w').close()\n"
             "print(h.result(120))\n"
             f"s = rlm_spawn('never ends', model={slow!r})\n"
             f"while not os.path.exists({str(tmp_path / 'slow-started')!r}):\n"
             "    time.sleep(0.05)\n"
             "print(s.status()['state'], s.cancel())\n"
             "try:\n    s.result(120)\nexcept Exception as e:\n    print('ended:', e)\n"
             "print(rlm_spawn('again', name='reader').result(120))"),
        call("final('done')"),
    ])
    options = app.RunOptions(overrides={"model": parent, "sub_model": child, "max_children": 1})
    # the slow child's model must be one the user configured: it is the compaction model
    options.overrides["compaction_model"] = slow
    rec = Recording(None)
    run = app.SessionRun.new("run", "go", options, llm_factory=rec)
    with run:
        run.drive("go")
        session = run.session
        slots = run.agent.slots
    out = tool_texts(run)[0]
    assert "running True" in out and "ended:" in out and "cancelled" in out
    assert out.strip().endswith("B")  # the slot the cancelled child held was freed
    # the steer reached the child's model before its second call
    readers = rec.built[child]
    second = readers[0].calls[1]
    assert any("use column B" in str(m.get("content")) for m in second)
    assert any("and report the row count" in str(m.get("content")) for m in second)
    assert not any("use column B" in str(m.get("content")) for m in readers[0].calls[0])
    last = ended(session.dir)
    assert last["reader"]["state"] == "done" and last["reader-2"]["state"] == "done"
    assert [d for d in last.values() if d["state"] == "cancelled"]
    assert slots.in_use == 0 and slots.waiting == 0


def test_an_interrupted_parent_cancels_its_children_and_gathers_partial_results(tmp_path):
    never = tmp_path / "never"
    started = tmp_path / "started"
    started.mkdir()
    slow = script(tmp_path / "slow.json", [
        call(f"import os, time\nopen(os.path.join({str(started)!r}, str(context)), 'w').close()\n"
             f"while not os.path.exists({str(never)!r}):\n    time.sleep(0.05)"),
        call("final('never')"),
    ])
    fast = script(tmp_path / "fast.json", [call("final('quick')")])
    parent = script(tmp_path / "parent.json", [
        call(f"hs = [rlm_spawn('quick one', name='fast', model={fast!r})]\n"
             f"hs += [rlm_spawn('slow one', context=i, model={slow!r}) for i in range(2)]\n"
             "res = rlm_gather(hs)\nprint(res.partial, res.states, res[0])"),
        call("final(str(res.partial))"),
    ])
    options = app.RunOptions(overrides={"model": parent, "sub_model": fast,
                                        "compaction_model": slow, "max_children": 0})
    run = app.SessionRun.new("run", "go", options)
    out: list = []
    with run:
        t = threading.Thread(target=lambda: out.extend(run.drive("go")))
        t.start()
        children = run.agent.children
        deadline = time.monotonic() + 120
        while (len(list(started.iterdir())) < 2 or len(children.runs) < 3) \
                and time.monotonic() < deadline:
            threading.Event().wait(0.05)  # both slow children are inside their cells
        fast_run = next(r for r in children.runs.values() if r.name == "fast")
        assert fast_run.done.wait(120)
        run.agent.interrupt()  # what Ctrl-C does
        t.join(180)
        session = run.session
    assert out[-1].final == "True"
    printed = tool_texts(run)[0]
    assert "True ['done', 'cancelled', 'cancelled'] quick" in printed
    assert "partial: 1 of 3 children finished" in printed
    states = [d["state"] for d in ended(session.dir).values()]
    assert sorted(states) == ["cancelled", "cancelled", "done"]


def test_an_invalid_final_goes_back_to_the_child_and_is_fixed_within_the_bound(tmp_path):
    child = script(tmp_path / "child.json", [
        call("yield_section('findings', 'row 3 is empty')\nfinal({'total': 'many'})"),
        call("yield_section('findings', 'row 9 repeats row 2')\nfinal({'total': 12})"),
    ])
    stubborn = script(tmp_path / "stubborn.json",
                      [call("final({'total': 'x'})")] * 4 + [call("final('never asked')")])
    parent = script(tmp_path / "parent.json", [
        call(f"schema = {FINDINGS!r}\n"
             "good = rlm_spawn('audit the table', schema=schema).result(120)\n"
             "print(type(good).__name__, good)\n"
             f"bad = rlm_spawn('audit again', schema=schema, model={stubborn!r})\n"
             "try:\n    bad.result(120)\nexcept Exception as e:\n"
             "    print(type(e).__name__, e)\n"
             "try:\n    rlm_spawn('x', schema={'type': 'nonsense'})\nexcept Exception as e:\n"
             "    print('refused:', e)"),
        call("final('ok')"),
    ])
    rec = Recording(None)
    options = app.RunOptions(overrides={"model": parent, "sub_model": child,
                                        "compaction_model": stubborn})
    run = app.SessionRun.new("run", "go", options, llm_factory=rec)
    with run:
        run.drive("go")
    out = tool_texts(run)[0]
    assert "dict {'total': 12, 'findings': ['row 3 is empty', 'row 9 repeats row 2']}" in out
    assert "ChildError" in out and "does not match its schema" in out and "total" in out
    assert "refused: schema is not a valid JSON schema" in out
    # the child was told what was wrong before its second call
    first = rec.built[child][0]
    told = " ".join(str(m.get("content")) for m in first.calls[1])
    assert "does not match the required JSON schema" in told and "total" in told
    system, task = first.calls[0][0]["content"], first.calls[0][1]["content"]
    assert "findings" in system  # the schema is in its role, after the system prompt ...
    assert "You are a child agent" in system and "no data was passed to you" in system
    assert "cannot start children of your own" in system
    assert "child agent" not in task and "findings" not in task  # ... not in its task
    # the stubborn child was refused 3 times (the bound), then failed
    assert len(rec.built[stubborn][0].calls) == 4


def test_compaction_tells_the_model_its_children_and_retries_a_failed_cleanup(
        tmp_path, monkeypatch):
    """A compaction while a child runs and another ended unread: `<children_state>` names
    both; the kernel of the child whose stop failed is killed by the retry. Then the
    session resumes: the restored kernel's handle still answers from the registry, and a
    reused name gets a suffix."""
    import psutil

    from rlm.kernel.kernel import Kernel

    go = tmp_path / "go"
    real_stop, stuck = Kernel.stop, []

    def failing_stop(self):  # the first child kernel's stop fails silently (injected)
        if "children" in str(self.session_dir) and not stuck:
            stuck.append(self.pid)
            return
        real_stop(self)

    monkeypatch.setattr(Kernel, "stop", failing_stop)
    child = script(tmp_path / "child.json", [
        call("import os, time\nif context == 'slow':\n"
             f"    while not os.path.exists({str(go)!r}):\n        time.sleep(0.05)\n"
             "final('answer of ' + context)"),
    ])
    summaries = script(tmp_path / "sum.json", ["## Goal\nfan out two children"] * 3)
    parent = script(tmp_path / "parent.json", [
        call("print(' '.join(str(i) for i in range(1500)))"),  # an older output to summarise
        call("d = rlm_spawn('quick task', context='quick', name='d')\n"
             "rlm_wait([d])\n"
             "h = rlm_spawn('slow task', context='slow', name='h')\ncompact.run()"),
        call(f"open({str(go)!r}, 'w').close()\nprint(h.result(120), '|', d.result())"),
        call("final('done')"),
    ])
    rec = Recording(None)
    options = app.RunOptions(overrides={"model": parent, "sub_model": child,
                                        "compaction_model": summaries,
                                        "keep_recent_tokens": 20})
    run = app.SessionRun.new("run", "go", options, llm_factory=rec)
    with run:
        events = run.drive("go")
        session_id = run.session.id
        pending_at_end = run.agent.children.retry_cleanup()
    assert events[-1].final == "done"
    assert stuck and pending_at_end == []
    assert not psutil.pid_exists(stuck[0]) or \
        psutil.Process(stuck[0]).status() == psutil.STATUS_ZOMBIE  # killed by the retry
    told = "\n".join(str(m.get("content")) for m in rec.built[parent][0].calls[2])
    assert "<children_state>" in told
    assert "- h (running" in told and "slow task" in told
    assert "- d (done; ended, result not read yet" in told
    assert "answer of slow | answer of quick" in tool_texts(run)[2]

    # resume: the handle `d` comes back with the kernel's snapshot and still answers
    again = script(tmp_path / "again.json", [
        call("print(d.result(), d.status()['state'])\n"
             "print(rlm_spawn('quick task', context='quick', name='d').name)"),
        call("final('resumed')"),
    ])
    resumed = app.SessionRun.open("resume", session_id,
                                  app.RunOptions(overrides={"model": again}))
    with resumed:
        out = resumed.drive("again")
    assert out[-1].final == "resumed"
    printed = tool_texts(resumed)[-2]
    assert "answer of quick done" in printed
    assert "d-2" in printed


def test_rlm_run_with_defaults_fans_out_and_rlm_tree_shows_the_children(tmp_path):
    """The user's path: `rlm run` with no concurrency flag (the default --max-children),
    then `rlm tree` lists each child with its state, tokens and time."""
    from test_cli import rlm

    child = script(tmp_path / "child.json", [call("final(context.upper())")])
    parent = script(tmp_path / "parent.json", [
        call("hs = [rlm_spawn('shout it', context=w, name=w) for w in ['ab', 'cd', 'ef']]\n"
             "res = rlm_gather(hs)\nprint(' '.join(res))"),
        call("final(' '.join(res))"),
    ])
    out = json.loads(rlm("run", "fan out", "--model", parent, "--sub-model", child, "--json",
                         cwd=tmp_path).stdout)
    assert out["final"] == "AB CD EF"
    tree = rlm("tree", out["session_id"], cwd=tmp_path).stdout
    lines = [ln for ln in tree.splitlines() if ln.startswith("child ")]
    assert [ln.split()[1:3] for ln in lines] == [["ab", "done"], ["cd", "done"], ["ef", "done"]]
    assert all(" tok " in ln and "children/" in ln for ln in lines)
    # the exported notebook re-runs offline: rlm_spawn answers with what the children said
    import nbformat
    from nbclient import NotebookClient

    nb_path = tmp_path / "fan.ipynb"
    rlm("export", out["session_id"], "-o", str(nb_path), cwd=tmp_path)
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()  # raises on any error
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.get("outputs", []) if o["output_type"] == "stream")
    assert "AB CD EF" in printed
    # each child's own notebook is exported beside it, and linked from the parent's
    links = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for w in ("ab", "cd", "ef"):
        assert f"[{w}](fan.children/{w}.ipynb): done" in links
        child_nb = nbformat.read(tmp_path / "fan.children" / f"{w}.ipynb", as_version=4)
        assert any("final(context.upper())" in c.source for c in child_nb.cells)


def test_a_child_over_its_share_of_the_tree_budget_ends_with_the_typed_error(tmp_path):
    small = {"input_tokens": 10, "output_tokens": 5}
    child = script(tmp_path / "child.json", [
        {**call("print('reading')"), "usage": {"input_tokens": 1900, "output_tokens": 100}},
        {**call("final('never reached')"), "usage": small},
    ])
    parent = script(tmp_path / "parent.json", [
        {**call("h = rlm_spawn('read everything')\n"
                "try:\n    h.result(120)\nexcept Exception as e:\n"
                "    print(type(e).__name__, e.kind, '|', e)\n"
                "print('spent', h.status()['tokens'])"), "usage": small},
        {**call("final('ok')"), "usage": small},
    ])
    run = session_run(parent, child, token_budget=4000)
    with run:
        events = run.drive("go")
        root = run.agent.budget
    out = tool_texts(run)[0]
    # the child was promised half of what the parent could lend (3,985 left less its
    # reserve of 400: 1,792): its first call passed that, and it stopped
    assert "ChildError budget |" in out and "token_budget" in out
    assert "spent 2000" in out  # the parent sees what the child spent
    assert root.spent == 2000 + 2 * 15  # the tree's budget was charged for all of it
    assert events[-1].final == "ok"


def test_turns_are_budgeted_over_the_tree_and_a_child_out_of_turns_ends_typed(tmp_path):
    """--turn-budget 8: the parent's first turn leaves 7, of which it keeps 2 to answer
    (rlm.agent.budget); the child is promised half of the 5 it can lend (2); it would need
    5 turns, so it ends with the typed budget error after 2, and the parent sees what it
    spent. Every turn, the child's included, is charged to the tree."""
    child = script(tmp_path / "child.json", [call(f"print({i})") for i in range(4)]
                   + [call("final('never reached')")])
    parent = script(tmp_path / "parent.json", [
        call("h = rlm_spawn('count slowly')\n"
             "try:\n    h.result(120)\nexcept Exception as e:\n"
             "    print(type(e).__name__, e.kind, '|', e)\n"
             "print('turns', h.status()['turns'])"),
        call("final('ok')"),
    ])
    run = session_run(parent, child, turn_budget=8)
    with run:
        events = run.drive("go")
        root = run.agent.budget
    out = tool_texts(run)[0]
    assert "ChildError budget |" in out and "turn_budget" in out, out
    assert "turns 2" in out  # the parent sees what the child spent
    assert "2 of the 2 turns the tree's --turn-budget 8 promised this child used" in out
    assert root.turns == 2 + 2 and events[-1].final == "ok"


def test_host_sigkill_while_three_children_run_then_resume(tmp_path, _isolated_home):
    """The host dies (SIGKILL) while three children run and a fourth waits for a slot:
    their kernels end with it (none is orphaned). `rlm resume` keeps the finished child's
    result and resumes the others from their own logs: the three that ran go on with their
    kernels restored (their `context` among the variables) and the queued one starts; the
    handles in the restored kernel answer with their results."""
    import os
    import signal
    import subprocess
    import sys

    from test_cli import rlm

    started = tmp_path / "started"
    started.mkdir()
    child = script(tmp_path / "child.json", [
        call("import os, time\nif context != 'quick':\n"
             f"    open(os.path.join({str(started)!r}, context), 'w').close()\n"
             f"    while not os.path.exists({str(tmp_path / 'never')!r}):\n"
             "        time.sleep(0.05)\n"
             "final('answer of ' + context)"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("d = rlm_spawn('quick task', context='quick', name='d')\nrlm_wait([d])\n"
             "hs = [rlm_spawn('slow task', context=c, name=c) for c in ['a', 'b', 'c', 'e']]"),
        call("rlm_gather(hs)"),
        call("final('never')"),
    ])
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    host = subprocess.Popen([sys.executable, "-P", "-m", "rlm", "run", "fan out", "--model",
                             parent, "--sub-model", child, "--max-children", "3"],
                            cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while len(list(started.iterdir())) < 3:
            assert time.monotonic() < deadline and host.poll() is None, "children never ran"
            threading.Event().wait(0.05)
        session_dir = next(_isolated_home.glob("sessions/*"))
        pids = kernel_pids(session_dir)
        assert len(pids) == 3  # the three running children's kernels (d's has stopped)
        host.send_signal(signal.SIGKILL)
        host.wait(30)
    finally:
        if host.poll() is None:
            host.kill()
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids):  # ipykernel's parent poller: they end with the host
        assert time.monotonic() < deadline, "a child kernel outlived its host"
        threading.Event().wait(0.1)
    assert sorted(p.name for p in started.iterdir()) == ["a", "b", "c"]  # e was queued

    again = script(tmp_path / "again.json", [
        call("print(d.result(), '|', [h.result(120) for h in hs])"),
        call("final('resumed')"),
    ])
    goes_on = script(tmp_path / "goes_on.json", [call("final('went on with ' + context)")])
    out = rlm("resume", session_dir.name, "where are the children?", "--model", again,
              "--sub-model", goes_on, cwd=tmp_path, check=False)
    assert "answer of quick | ['went on with a', 'went on with b', 'went on with c', " \
           "'went on with e']" in out.stdout, out.stdout + out.stderr
    states = {d["name"]: d["state"] for d in child_entries(session_dir)}
    assert states == {"d": "done", "a": "done", "b": "done", "c": "done", "e": "done"}
    told = [e["content"] for e in entries(session_dir / "session.jsonl")
            if e.get("custom_type") == "children_state"]  # the model was told, once
    assert len(told) == 1 and "Your host stopped while these children" in told[0]
    assert all(f"- {w} (" in told[0] for w in "abce") and "- d (" not in told[0]
    # a went on in its own log: its first run's cell is there, then the note it resumed
    ids = {d["name"]: d["id"] for d in child_entries(session_dir)}
    log = (session_dir / "children" / ids["a"] / "session.jsonl").read_text()
    assert log.index("time.sleep(0.05)") < log.index("Your host stopped while you were")
    assert "Your host stopped" not in \
        (session_dir / "children" / ids["e"] / "session.jsonl").read_text()
    assert not any(alive(p) for p in kernel_pids(session_dir))  # none left by the resume


def test_a_lost_typed_child_resumes_with_its_context_and_one_on_a_working_copy_is_reported(
        tmp_path):
    """What a dead host leaves in the log: a typed child still queued (its context kept
    at its spawn) and one running on a private copy. Opened again, the first runs with its
    context and schema; the second cannot be rebuilt and is reported lost, saying why."""
    from kernel_ext.child_context import to_blob
    from rlm.agent.children import CHILD_ENTRY, CONTEXT_FILE
    from rlm.session.entries import CustomEntry
    from rlm.session.store import SessionStore

    parent = script(tmp_path / "parent.json", [call("final('first')")])
    with app.SessionRun.new("run", "go", app.RunOptions(overrides={"model": parent})) as run:
        run.drive("go")
        sid, folder = run.session.id, run.session.dir
    log = SessionStore.open(folder)
    now = time.time()
    for cid, name, extra in (("aaaa00000001", "typed", {"schema": SQUARE, "state": "queued"}),
                             ("aaaa00000002", "copied", {"state": "running", "started_at": now,
                                                         "isolation_mode": "copy"})):
        log.append(CustomEntry(custom_type=CHILD_ENTRY, display=False, content=None, data={
            "id": cid, "name": name, "task": "square it", "tokens": 0, "turns": 0,
            "queued_at": now, **extra}))
    log.close()
    (folder / "children" / "aaaa00000001").mkdir(parents=True)
    (folder / "children" / "aaaa00000001" / CONTEXT_FILE).write_bytes(to_blob(7, 1 << 20))
    child = script(tmp_path / "child.json", [call("final({'n': context, 'square': 49})")])
    again = script(tmp_path / "again.json", [
        call("from kernel_ext.children import ChildHandle\n"
             "print('typed:', ChildHandle('aaaa00000001', 'typed').result(120))\n"
             "try:\n    ChildHandle('aaaa00000002', 'copied').result()\n"
             "except Exception as e:\n    print('copied:', e)"),
        call("final('second')"),
    ])
    options = app.RunOptions(overrides={"model": again, "sub_model": child})
    with app.SessionRun.open("resume", sid, options) as run:
        run.drive("where are they?")
        out = tool_texts(run)[-2]
    assert "typed: {'n': 7, 'square': 49}" in out, out
    assert "copied:" in out and "lost: the host stopped while this child was running" in out
    assert "it ran on a working copy, which went with its host" in out
    states = {d["name"]: d["state"] for d in child_entries(folder)}
    assert states == {"typed": "done", "copied": "failed"}


def kernel_pids(session_dir: Path) -> list[int]:
    return [int((k / "host" / "kernel.pid").read_text().split("\n")[0])
            for k in (session_dir / "children").iterdir()
            if (k / "host" / "kernel.pid").is_file()]


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_worktree_isolation_applies_two_childrens_edits_and_keeps_a_conflicting_patch(
        tmp_path):
    """Two children's edits apply; a third starts from the parent's working state (their
    edits in it) and edits a.txt while the parent edits it too: its patch no longer
    applies and is kept, the parent's version stays."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("a.txt", "b.txt"):
        (repo / name).write_text(f"{name} line 1\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    started, go = tmp_path / "started", tmp_path / "go"
    child = script(tmp_path / "child.json", [  # the third waits while the parent edits a
        call(f"import os, time\nif len(context) > 2:\n    open({str(started)!r}, 'w').close()\n"
             f"    while not os.path.exists({str(go)!r}):\n        time.sleep(0.05)\n"
             "open(context[0], 'w').write(context[1])\nfinal(os.getcwd())"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("import os, time\n"
             "a = rlm_spawn('edit a', context=['a.txt', 'A was here\\n'], isolation='worktree')\n"
             "b = rlm_spawn('edit b', context=['b.txt', 'B was here\\n'], isolation='worktree')\n"
             "print(rlm_gather([a, b]))\n"
             "c = rlm_spawn('edit a too', context=['a.txt', 'C disagrees\\n', 1], "
             f"isolation='worktree')\nwhile not os.path.exists({str(started)!r}):\n"
             "    time.sleep(0.05)\nopen('a.txt', 'w').write('A was here\\nthe parent too\\n')\n"
             f"open({str(go)!r}, 'w').close()\nc.result(120)\n"
             "for h in (a, b, c):\n    print(h.name, h.status()['isolation'])"),
        call("final('ok')"),
    ])
    # unsandboxed: the parent and the third child meet on marker files outside the repo
    options = app.RunOptions(overrides={"model": parent, "sub_model": child, "sandbox": False},
                             workdir=str(repo))
    run = app.SessionRun.new("run", "go", options)
    with run:
        run.drive("go")
    out = tool_texts(run)[0]
    assert str(repo) not in out.splitlines()[0]  # the children worked elsewhere
    assert "/worktree" in out.splitlines()[0]
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:] if ln.startswith("child-")}
    assert "'outcome': 'applied'" in lines["child-1"] and "'outcome': 'applied'" in lines["child-2"]
    assert "'outcome': 'failed'" in lines["child-3"] and "is kept" in lines["child-3"]
    assert (repo / "a.txt").read_text() == "A was here\nthe parent too\n"  # the parent's
    assert (repo / "b.txt").read_text() == "B was here\n"
    kept = next(run.session.dir.glob("children/*/changes.patch"), None)
    assert kept is not None
    patches = [p.read_text() for p in run.session.dir.glob("children/*/changes.patch")]
    assert any("C disagrees" in p for p in patches)
    listed = subprocess.run(git + ["worktree", "list"], capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1  # every child's worktree was removed


def test_outside_git_children_work_on_private_copies_and_only_finished_changes_come_back(
        tmp_path):
    """No git repository: isolation='worktree' falls back to a private copy. A child's edit
    comes back when the parent's file is as copied; a file the parent edited meanwhile stays
    in the child's copy (reported); a cancelled child's edit is kept, never applied."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (work / name).write_text(f"{name} as it was\n")
    started, go, wrote = tmp_path / "started", tmp_path / "go", tmp_path / "wrote"
    child = script(tmp_path / "child.json", [
        call("import os, time\nname, text, wait = context\n"
             f"open({str(started)!r} + name, 'w').close()\n"
             f"while wait and not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
             f"open(name, 'w').write(text)\nopen({str(wrote)!r} + name, 'w').close()\n"
             "if name == 'c.txt':\n    time.sleep(60)\nfinal(os.getcwd())"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("import os, time\n"
             "a = rlm_spawn('edit a', context=['a.txt', 'A was here\\n', False], isolation='worktree')\n"
             "b = rlm_spawn('edit b', context=['b.txt', 'B was here\\n', True], isolation='copy')\n"
             "c = rlm_spawn('edit c', context=['c.txt', 'C half done\\n', False], isolation='copy')\n"
             f"while not os.path.exists({str(started)!r} + 'b.txt'):\n    time.sleep(0.05)\n"
             "open('b.txt', 'w').write('the parent edited b\\n')\n"
             f"open({str(go)!r}, 'w').close()\n"
             f"while not os.path.exists({str(wrote)!r} + 'c.txt'):\n    time.sleep(0.05)\n"
             "c.cancel()\nprint(rlm_gather([a, b]))\nrlm_wait([c], timeout=60)\n"
             "for h in (a, b, c):\n    print(h.name, h.status()['isolation'])"),
        call("final('ok')"),
    ])
    # unsandboxed: the parent and its children meet on marker files in tmp_path, outside
    # every working dir (the sandbox shows each kernel its own working dir only)
    options = app.RunOptions(overrides={"model": parent, "sub_model": child, "sandbox": False},
                             workdir=str(work))
    run = app.SessionRun.new("run", "go", options)
    with run:
        run.drive("go")
    out = tool_texts(run)[0]
    assert str(work) not in out.splitlines()[0] and "/copy" in out.splitlines()[0]
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:] if ln.startswith("child-")}
    assert "'outcome': 'applied'" in lines["child-1"], out
    assert "'outcome': 'failed'" in lines["child-2"] and "changed in the parent" in lines["child-2"]
    assert "'outcome': 'failed'" in lines["child-3"] and "did not finish" in lines["child-3"]
    assert (work / "a.txt").read_text() == "A was here\n"
    assert (work / "b.txt").read_text() == "the parent edited b\n"  # the parent's stays
    assert (work / "c.txt").read_text() == "c.txt as it was\n"  # never half-applied
    kept = {p.parent.parent.name: p.read_text() for p in
            run.session.dir.glob("children/*/copy/*.txt") if p.name in ("b.txt", "c.txt")
            and "as it was" not in p.read_text()}
    assert sorted(kept.values()) == ["B was here\n", "C half done\n"]


def test_max_children_in_chat_is_the_ceiling_a_cell_sees(tmp_path, capsys):
    """Chat's `/max-children N` is the user's ceiling: a cell is refused past it (it was
    checked against the startup flag, so a cell raised the tree back over it)."""
    from rlm.cli.chat import _slash

    parent = script(tmp_path / "parent.json", [
        call("try:\n    rlm_max_children(5)\nexcept Exception as e:\n    print('refused:', e)\n"
             "print('limit', rlm_max_children(2)['limit'])"),
        call("final('first')"),
        call("print('limit', rlm_max_children(4)['limit'])"),
        call("final('second')"),
    ])
    run = app.SessionRun.new("chat", None, app.RunOptions(overrides={
        "model": parent, "max_children": 8}))
    shown = io.StringIO()
    render = Renderer(console=Console(file=shown, width=100))
    with run:
        assert run.agent is not None
        assert _slash(run.agent, "/max-children 2", render)
        run.drive("first")
        assert _slash(run.agent, "/max-children 4", render)
        run.drive("second")
    first, second = [t for t in tool_texts(run) if "limit" in t or "refused" in t]
    assert "refused: rlm_max_children(5): the user allowed at most 2 children at once" in first
    assert "limit 2" in first
    assert "refused" not in second and "limit 4" in second
    assert "children at once: 2" in shown.getvalue() and "children at once: 4" in shown.getvalue()


def test_a_cell_resizes_the_tree_at_run_time_within_what_the_user_allowed(tmp_path):
    child = script(tmp_path / "child.json", [
        call("import time\ntime.sleep(0.3)\nfinal(context)"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("print(rlm_max_children(1))\n"
             "hs = [rlm_spawn('wait', context=i) for i in range(3)]\n"
             "print(rlm_gather(hs), rlm_max_children())\n"
             "try:\n    rlm_max_children(5)\nexcept Exception as e:\n    print('refused:', e)\n"
             "print(rlm_max_children(3)['limit'])"),
        call("final('ok')"),
    ])
    run = session_run(parent, child, max_children=3)
    events, session = drive(run)
    out = tool_texts(run)[0]
    assert "{'limit': 1, 'in_use': 0, 'waiting': 0, 'peak': 0}" in out
    assert "['0', '1', '2'] {'limit': 1, 'in_use': 0, 'waiting': 0, 'peak': 1}" in out  # one at a time
    assert "refused:" in out and "at most 3 children at once (--max-children" in out
    assert out.rstrip().endswith("3")
    spans = [(d["started_at"], d["ended_at"]) for d in ended(session.dir).values()]
    assert max_overlap(spans) == 1
