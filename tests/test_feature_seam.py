"""Features plug in through one seam (issue 59, part 3): a feature is one object in the
composition root's list (rlm.app.lifecycle.ROOT_FEATURES); it attaches through its wiring
(rlm.app.seam.Wiring) policies on the agent's chain (rlm.chain.Chain), context and
relief-note providers, bridge handlers of its own contract feature, and background tasks
the run owns and closes.

A toy feature, added by one argument (`features=`), is built through the root with a
scripted model and a real kernel: its turn policy's notices reach the run's events, its
context message reaches every model call right after the system prompt, its relief note
follows a compaction in the log, and its background thread runs until the SessionRun is
left, then is closed.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rlm import app
from rlm.app.lifecycle import ROOT_FEATURES, build_agent
from rlm.app.seam import Plain, check_order
from rlm.compaction.notes import RELIEF
from rlm.config import Config
from rlm.errors import RlmError
from rlm.events import Notice, RunEnded
from rlm.llm import get_llm
from rlm.memory import MEMORY_MARK
from rlm.session.entries import CustomEntry
from rlm.session.store import SessionStore
from tests.rlmcli import call, script
from tests.test_context_assembly import Models

pytestmark = pytest.mark.timeout(300)

TOY_HEAD = "<toy>the toy feature was here</toy>"


class Beside:
    """Background work: a thread that runs until it is closed."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.stop.wait, daemon=True)
        self.thread.start()
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        self.stop.set()
        self.thread.join(10)


class ToyNote:
    """A relief note: after any relief, one line the log keeps."""

    kind, supersedes, after = "toy_note", False, RELIEF

    def write(self, session, before, kernel) -> None:
        session.append(CustomEntry(custom_type=self.kind, data={}, display=False,
                                   content="<toy_note>told again</toy_note>"))


class Toy:
    """A feature: a turn policy, a context provider, a relief note, background work."""

    name, answers, after = "toy", (), ("compaction",)

    def __init__(self) -> None:
        self.task: Beside | None = None

    def attach(self, agent, wiring) -> None:
        wiring.chain.turn.append(self.after_turn)
        wiring.chain.context.append(lambda: {"role": "user", "content": TOY_HEAD})
        wiring.relief_note(ToyNote())
        self.task = wiring.task(Beside())

    def after_turn(self, agent) -> list[Notice]:
        return [Notice(f"toy: turn {agent.state.turns} done")]


def test_a_toy_feature_added_by_one_line_acts_at_each_seam_and_is_closed_with_the_run(
        tmp_path: Path):
    model = script(tmp_path / "m.json", [call("rows = list(range(300))\nprint(rows)\nx = 6 * 7"),
                                         call("final(str(x))")])
    summaries = script(tmp_path / "summary.json", ["## Goal\nthe summary"])
    models, toy = Models(), Toy()
    run = app.SessionRun.new("chat", None, app.RunOptions(overrides={
        "model": model, "compaction_model": summaries, "keep_recent_tokens": 64}),
        llm_factory=models, features=(toy,))
    with run:
        events = run.drive("six times seven?")
        assert app.compact_now(run.agent) is not None  # a relief: the notes follow it
        log = list(run.session.branch())
        assert toy.task is not None and toy.task.thread.is_alive()  # it runs with the run
        assert toy.task.closed == 0
    # the turn policy: one notice after each turn, in the run's events
    said = [e.text for e in events if isinstance(e, Notice) and e.text.startswith("toy:")]
    assert said == ["toy: turn 1 done", "toy: turn 2 done"]
    assert isinstance(events[-1], RunEnded) and events[-1].final == "42"
    # the context provider: after the system prompt and the memory head (a provider
    # registered before it), in every model call
    [llm] = models.built[model]
    assert len(llm.calls) == 2
    for sent in llm.calls:
        assert sent[0]["role"] == "system" and sent[1]["content"].startswith(MEMORY_MARK)
        assert sent[2]["content"] == TOY_HEAD, sent[:3]
    # the relief note: written after the compaction, after <ipython_state>
    kinds = [getattr(e, "custom_type", None) for e in log]
    assert kinds[-2:] == ["ipython_state", "toy_note"], kinds
    # the background task: closed once, by the SessionRun
    assert toy.task.closed == 1 and not toy.task.thread.is_alive()


def _agent(tmp_path: Path, *features):
    config = Config(home=tmp_path / "home", model="script:none")
    session = SessionStore.create(tmp_path / "home", model="script:none", task="t")
    return build_agent(session, config, llm=get_llm(script(tmp_path / "m.json", [])),
                       features=features)


def test_an_agent_built_without_a_session_run_closes_its_features_work(tmp_path: Path):
    toy = Toy()
    agent = _agent(tmp_path, toy)
    assert toy.task is not None and toy.task.thread.is_alive()
    agent.close()
    assert toy.task.closed == 1 and not toy.task.thread.is_alive()


def test_a_handler_for_an_undeclared_method_or_another_features_is_refused(tmp_path: Path):
    undeclared = Plain("toy", lambda a, w: w.handle("toy.hello", lambda p: "hi"))
    with pytest.raises(RlmError, match=r"'toy\.hello', which kernel_ext\.contract\.METHODS "
                                       r"does not declare"):
        _agent(tmp_path, undeclared)
    foreign = Plain("toy", lambda a, w: w.handle("memory.show", lambda p: {}),
                    answers=("history",))
    with pytest.raises(RlmError, match=r"'memory\.show', a method of the 'memory' feature; "
                                       r"it answers only history"):
        _agent(tmp_path, foreign)
    with pytest.raises(RlmError, match="a method of the 'goals' feature"):
        _agent(tmp_path, Plain("toy", lambda a, w: w.handlers.update(
            {"goal.get": lambda p: None})))


def test_a_feature_listed_before_one_it_needs_is_refused():
    """Order never matters silently: memory declares it follows compaction (its capture of
    a stated convention runs after compaction's check of the prompt)."""
    by_name = {f.name: f for f in ROOT_FEATURES}
    check_order(ROOT_FEATURES)
    swapped = [f for f in ROOT_FEATURES if f.name != "memory"]
    swapped.insert(0, by_name["memory"])
    with pytest.raises(RlmError, match="'memory' must attach after compaction"):
        check_order(swapped)


def test_the_agent_holds_no_features_object_by_name():
    """Issue 59: features attached by mutating the Agent (`agent.compaction`,
    `agent.advisor`, `agent.policy`, `agent.child_runner`). The entry points reach what a
    feature exposes by its type; an Agent's attributes are the loop's own."""
    import ast
    import inspect

    from rlm.agent import loop

    init = next(n for n in ast.walk(ast.parse(inspect.getsource(loop.Agent)))
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    attrs = {t.attr for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
             if isinstance(t, ast.Attribute)}
    assert not attrs & {"compaction", "advisor", "policy", "child_runner", "memory",
                        "run_start_hooks", "turn_hooks", "end_hooks", "overflow_hook"}
