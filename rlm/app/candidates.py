"""Candidate programs chosen by what they compute (issue 60): the feature.

With config `candidates = k` (k > 1), at the replies that decide an answer (the policy's
`point`: the run's first cell, the reply after a failed cell, a reply that answers) the
host draws k - 1 more replies from the same prompt (temperature CANDIDATE_TEMPERATURE,
seed SEED_BASE + i: the same inputs give the same draws), runs every candidate's cells in
a forked copy of the kernel (`Trials.trial`, kernel_ext.trial: nothing a trial binds
reaches the real namespace; files it writes stay written, as any cell's would) and puts
the reply the vote picks (rlm.agent.policy.candidates) in the turn's place. That reply
then runs as a normal cell. A text answer's candidates are compared by their answers.

Candidates pass the same screens as the turn's reply: one a stream rule would stop, or
the answer policy would resample, is not drawn into the vote. The replies not acted on are
charged as `candidates` (rlm.ledger) and logged in one hidden `candidates` entry (what
each computed and the vote), never sent to the model. Where the executor cannot fork
(`%%rlm` runs in the user's own kernel) cells are not voted on; text answers still are.

It plugs into the chain's `choose` stage (rlm.chain); `k = 1` adds nothing to the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from rlm.agent.assembly import assemble
from rlm.agent.codeparse import code_tool_calls, text_final
from rlm.agent.policy.candidates import (
    CANDIDATE_TEMPERATURE,
    SEED_BASE,
    Outcome,
    outcome,
    point,
    settled,
    vote,
)
from rlm.app.features import tells_user
from rlm.app.seam import Plain
from rlm.events import Event, Notice
from rlm.llm.types import PYTHON_TOOL, Completion
from rlm.protocols import Trials
from rlm.session.entries import CustomEntry

if TYPE_CHECKING:
    from rlm.agent.loop import Agent
    from rlm.app.seam import Wiring

ENTRY = "candidates"  # the hidden entry a vote leaves in the log
TRIAL_TIMEOUT_S = 60.0  # a candidate's cells, at most (and never past the cell timeout)
OUTPUT_CAP = 4000  # characters of a trial's output read by the vote


def codes_of(reply: Completion) -> list[str]:
    """The cells a reply asks for (native calls, else its fenced blocks), as `act` reads
    them."""
    calls = [c for c in reply.tool_calls if c.name == "python"] or \
        code_tool_calls(reply.content)
    return [str(c.arguments.get("code", "")) for c in calls]


def attach(agent: Agent, wiring: Wiring) -> None:
    k = int(agent.config.candidates or 1)
    if k <= 1:
        return
    wiring.chain.choose.append(lambda host, reply: choose(agent, reply, k))
    if agent.executor is not None and not isinstance(agent.executor, Trials) \
            and tells_user(wiring.entry):
        agent.notices.append(Notice(
            f"candidates = {k}: this kernel cannot be forked for trials (%%rlm runs in your "
            "own kernel), so only text answers are voted on; cells run as the model wrote "
            "them", "info"))


CANDIDATES = Plain("candidates", attach)


def choose(agent: Agent, reply: Completion, k: int) -> Generator[Event, None, Completion]:
    """The reply the turn acts on: `reply` itself unless this is a point to vote on and
    the vote picks another candidate. Candidates are drawn one at a time and each is tried
    as it comes; drawing stops once no more could change the vote (`settled`): the turn's
    own reply that ran without output, or one enough others agree with, costs one trial."""
    codes = codes_of(reply)
    why = point(agent.answers.facts, codes, not codes and text_final(reply.content) is not None)
    trials = agent.executor if isinstance(agent.executor, Trials) else None
    if why is None or ((codes or _var_read(reply)) and trials is None):
        return reply  # cells, or FINAL_VAR's value, that no trial can read here
    candidates, drawn = [reply], []
    try:
        outcomes = yield from agent.in_thread(_trying(agent, [reply], trials))
        for i in range(1, k):
            if settled(outcomes, k - i) or agent.state.stopping:
                break
            got = yield from agent.in_thread(_drawing(agent, i))
            drawn.append(got)
            if _screened(agent, got):
                candidates.append(got)
                outcomes += yield from agent.in_thread(_trying(agent, [got], trials))
    except Exception as e:  # noqa: BLE001 - a failed draw or trial: the turn's reply runs
        _charge_losers(agent, drawn, keep=None)
        yield Notice(f"candidate programs skipped at the {why} step ({type(e).__name__}: "
                     f"{str(e)[:200]}); the model's own reply runs", "warning")
        return reply
    if not drawn:
        return reply
    picked = vote(outcomes)
    winner = candidates[picked.winner]
    _charge_losers(agent, [reply, *drawn], keep=winner)
    _log(agent, why, candidates, outcomes, picked.winner, picked.groups, picked.why)
    if picked.winner != 0:
        yield Notice(f"{len(candidates)} candidate programs at the {why} step: "
                     f"candidate {picked.winner + 1} runs ({picked.why})")
    return winner


def _drawing(agent: Agent, i: int) -> Callable[[Callable[[Event], None]], Completion]:
    """Candidate i: the turn's prompt sampled hot with a seed of its own, in the form the
    turn's reply was asked for (a cell, after a refused answer)."""
    choice = agent.answers.tool_choice(agent.state.turns)

    def work(emit: Callable[[Event], None]) -> Completion:
        return agent.llm.complete(assemble(agent).messages, tools=[PYTHON_TOOL],
                                  temperature=CANDIDATE_TEMPERATURE, seed=SEED_BASE + i,
                                  tool_choice=choice)
    return work


def _screened(agent: Agent, reply: Completion) -> bool:
    """A drawn reply the turn's screens let through: no stream rule matches it, the
    answer policy would run it, and it has cells or an answer."""
    codes = codes_of(reply)
    if not codes and text_final(reply.content) is None:
        return False
    if not agent.answers.would_run(reply.content, bool(reply.tool_calls)):
        return False
    watch = agent.answers.watch(agent.session.branch())
    if watch is None:
        return True
    return watch.feed(reply.content) is None and watch.finish(codes) is None


def _trying(agent: Agent, candidates: list[Completion], trials: Trials | None
            ) -> Callable[[Callable[[Event], None]], list[Outcome]]:
    """Each candidate's outcome: its cells joined and run in a forked trial, or the
    answer it gives as text."""
    def work(emit: Callable[[Event], None]) -> list[Outcome]:
        codes = ["\n".join(codes_of(c)) or _var_read(c) for c in candidates]
        runs: dict[int, dict[str, Any]] = {}
        ran = [i for i, code in enumerate(codes) if code]
        if ran and trials is not None:
            timeout = min(TRIAL_TIMEOUT_S, agent.config.cell_timeout)
            got = trials.trial([codes[i] for i in ran], timeout=timeout, cap=OUTPUT_CAP)
            runs = dict(zip(ran, got, strict=True))
        out = []
        for i, c in enumerate(candidates):
            if i in runs:
                out.append(outcome(runs[i]))
                continue
            said = text_final(c.content)
            out.append(outcome(answer=said[1]) if said and said[0] == "answer"
                       else Outcome(False, "", "no result to compare"))
        return out
    return work


def _var_read(reply: Completion) -> str:
    """A text FINAL_VAR(name) is compared by the value it names: a trial reads it."""
    said = text_final(reply.content)
    return said[1] if said and said[0] == "var" and said[1].isidentifier() else ""


def _charge_losers(agent: Agent, replies: list[Completion], keep: Completion | None) -> None:
    """What the vote cost: every reply the turn does not act on (the one acted on is
    charged as a turn by `act`)."""
    for reply in replies:
        if reply is not keep:
            agent.charge(reply.usage, role="candidates")


def _log(agent: Agent, why: str, candidates: list[Completion], outcomes: list[Outcome],
         winner: int, groups: list[int], said: str) -> None:
    agent.session.append(CustomEntry(custom_type=ENTRY, display=False, content=None, data={
        "point": why, "winner": winner, "why": said,
        "candidates": [{"content": c.content, "ran": o.ran, "key": o.key, "shown": o.shown,
                        "group": g, "usage": c.usage.to_dict()}
                       for c, o, g in zip(candidates, outcomes, groups, strict=True)]}))
