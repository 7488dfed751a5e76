"""The advisor wired into an agent (`--advisor MODEL`, `advisor = "..."` in rlm.toml or the
user's config, RLM_ADVISOR): rlm.agent.advisor does the watching; this module builds its
model, gives it what it should know, feeds it, and carries its advice into the run.

When it is fed: the moment a reply with cells is logged, before its cells run (it reads the
code it may stop, and the outputs of the turn before), and after a turn that ran no cell
(an answer). One update per turn; the cost cap thins them.

Delivery: every admitted advice is steered into the run as
`<advisory guidance="weigh, don't blindly obey" severity=...>`, written into the session
before the agent's next model call (in this loop the next turn boundary and "before the
next model call" are the same point, so a `nit` and a `concern` land there alike). A
`blocker` about a reply whose cells have not all run also stops them: the running cell is
interrupted (rlm.kernel.interrupting holds the interrupt until the kernel has started it)
and the reply's cells not started yet are not run (`RunState.blockers`, by reply id); the
run goes on, and the model reads the interrupted cell and the advice. Advice carries the
id of the reply it judged (the newest on the branch the advisor read): a blocker that
comes after that reply's cells have all run (the advisor was slow) is delivered as advice
and stops nothing, never the cells of a later reply. After the user's own stop, advice
waits in the queue and is written as a visible note when the next run starts; it never
restarts a run.

What it knows: `WATCHDOG.md` and the project context files (AGENTS.md, CLAUDE.md) found
walking up from the working directory, and the project memory's state and conventions
(`.agent/`, rlm.memory) as they are when it is (re-)seeded; each is read as a regular file,
at most KNOWLEDGE_CHARS characters in all.

What the user is told: a failing advisor (three failures in a row) at the next turn
boundary, and an advisor silent for SILENT_NOTICE turns, never "healthy".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.agent.advisor import STATS_ENTRY, Advice, Advisor, advisory_text, report_line
from rlm.agent.advisor.guard import replied_with_cells, running_reply
from rlm.agent.loop import Agent
from rlm.app.features import gap
from rlm.app.memory import project_root
from rlm.app.seam import Plain, Wiring
from rlm.chain import LoopHost
from rlm.events import Event, Notice
from rlm.llm.types import Usage
from rlm.memory.files import DIRNAME, FILES
from rlm.session.entries import CustomEntry
from rlm.trust import read_regular

KNOWLEDGE_FILES = ("WATCHDOG.md", "AGENTS.md", "CLAUDE.md")
MEMORY_FILES = (FILES["state"], FILES["conventions"])
KNOWLEDGE_CHARS = 12_000
SILENT_NOTICE = 10  # turns without advice between notices saying so


def knowledge(start: Path, memory: Path | None = None) -> str:
    """The advisor's extra knowledge: the project files nearest first, then the memory."""
    found = [folder / name for folder in [start, *start.parents] for name in KNOWLEDGE_FILES]
    if memory is not None:
        found += [memory / DIRNAME / name for name in MEMORY_FILES]
    parts, used = [], 0
    for path in found:
        raw = read_regular(path, KNOWLEDGE_CHARS)
        if raw is None or used >= KNOWLEDGE_CHARS or not raw.strip():
            continue
        text = raw.decode("utf-8", "replace")[: KNOWLEDGE_CHARS - used]
        used += len(text)
        parts.append(f"## {path}\n{text.strip()}")
    return "\n\n".join(parts)


def attach_advisor(agent: Agent, wiring: Wiring, project: Path | None = None) -> None:
    """Start the advisor `agent.config.advisor` names (none: no advisor); its thread is the
    run's background work (closed with it)."""
    spec = agent.config.advisor
    if not spec or gap(wiring.entry, "advisor") is not None:
        return
    told_user: list[str] = []  # from the advisor's thread; shown at the next boundary

    def deliver(advice: Advice) -> None:
        # what the model is told, the user reads as it is delivered
        agent.steer(advisory_text(advice.note, advice.severity), "advisory",
                    shown=f"advisor ({advice.severity}): {advice.note.strip()[:400]}")
        # a blocker stops only the cells of the reply it judged, while they run: one
        # about an earlier reply (it came late) is advice and nothing more
        if advice.severity == "blocker" and advice.reply is not None and agent.turn_active \
                and running_reply(agent.session.branch()) == advice.reply:
            agent.state.blockers[advice.reply] = advice.note  # its cells not started stay so
            if agent.executor is not None:
                agent.executor.interrupt()  # the running one stops: the run goes on

    def charge(usage: Usage) -> None:
        agent.charge(usage, role="advisor")

    start = project or Path.cwd()
    memory = None if agent.config.memory is False else project_root(agent.config)
    advisor = wiring.task(Advisor(agent.llm_factory(spec), deliver,
                                  knowledge=lambda: knowledge(start, memory), charge=charge,
                                  tell=told_user.append))
    advisor.primary_tokens = lambda: agent.tokens_used - advisor.stats.input_tokens \
        - advisor.stats.output_tokens
    told: dict[str, Any] = {"silent": 0, "report": None}

    def take_told() -> list[Notice]:
        """What the advisor's thread said for the user, taken (it may append meanwhile)."""
        said = told_user[:]
        del told_user[:len(said)]
        return [Notice(f"advisor: {text}", "warning") for text in said]

    def before_cells(a: LoopHost) -> None:
        advisor.update(list(a.session.branch()))

    def after_turn(a: LoopHost) -> list[Event]:
        branch = list(a.session.branch())
        if not replied_with_cells(branch):  # an answer: its reply was not fed yet
            advisor.update(branch)
        shown: list[Event] = [*take_told()]
        s = advisor.stats
        report = s.report()
        if report != told["report"]:  # for `rlm ps` and a resume: the log says how it is
            told["report"] = report
            a.session.append(CustomEntry(custom_type=STATS_ENTRY, data=report, display=False))
        if s.turns_silent >= told["silent"] + SILENT_NOTICE:  # never "healthy" while silent
            told["silent"] = s.turns_silent
            shown.append(Notice(f"advisor: {report_line(report)}"))
        if s.turns_silent < told["silent"]:
            told["silent"] = 0
        return shown

    def at_end(a: LoopHost, reason: str, detail: str | None) -> None:
        agent.notices.extend(take_told())  # said after the last boundary: shown when the next run starts

    wiring.chain.reply.append(before_cells)
    wiring.chain.turn.append(after_turn)
    wiring.chain.end.append(at_end)
    wiring.expose(advisor)  # its stats, for the run's result (rlm.agent.result)


ADVISOR = Plain("advisor", attach_advisor)
