"""The advisor wired into an agent (`--advisor MODEL`, `advisor = "..."` in rlm.toml or the
user's config, RLM_ADVISOR): rlm.agent.advisor does the watching; this module builds its
model, gives it what it should know, and carries its advice into the run.

Delivery: every admitted advice is steered into the run as
`<advisory guidance="weigh, don't blindly obey" severity=...>`, written into the session
before the agent's next model call (in this loop the next turn boundary and "before the
next model call" are the same point, so a `nit` and a `concern` land there alike); a
`blocker` also interrupts a running cell (the run goes on: the model reads the interrupted
cell and the advice). After the user's own stop, advice waits in the queue and is written as
a visible note when the next run starts; it never restarts a run.

What it knows: `WATCHDOG.md` and the project context files (AGENTS.md, CLAUDE.md) found
walking up from the working directory, and the project's memory file (.rlm/memory.md)
when present; each is read as a regular file, at most KNOWLEDGE_CHARS characters in all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.agent.advisor import STATS_ENTRY, Advice, Advisor, advisory_text, report_line
from rlm.agent.advisor.guard import cell_running
from rlm.agent.loop import Agent
from rlm.events import Notice
from rlm.llm.types import Usage
from rlm.session.entries import CustomEntry
from rlm.trust import read_regular

KNOWLEDGE_FILES = ("WATCHDOG.md", "AGENTS.md", "CLAUDE.md", ".rlm/memory.md")
KNOWLEDGE_CHARS = 12_000
SILENT_NOTICE = 10  # turns without advice between notices saying so


def knowledge(start: Path) -> str:
    """The advisor's extra knowledge, nearest files first."""
    parts, used = [], 0
    for folder in [start, *start.parents]:
        for name in KNOWLEDGE_FILES:
            raw = read_regular(folder / name, KNOWLEDGE_CHARS)
            if raw is None or used >= KNOWLEDGE_CHARS:
                continue
            text = raw.decode("utf-8", "replace")[: KNOWLEDGE_CHARS - used]
            used += len(text)
            parts.append(f"## {folder / name}\n{text.strip()}")
    return "\n\n".join(parts)


def attach_advisor(agent: Agent, project: Path | None = None) -> Advisor | None:
    """Start the advisor `agent.config.advisor` names (None: no advisor)."""
    spec = agent.config.advisor
    if not spec or agent.entry in ("child", "compact"):
        return None

    def deliver(advice: Advice) -> None:
        agent.steer(advisory_text(advice.note, advice.severity), "advisory")
        if advice.severity == "blocker" and agent.turn_active and agent.executor is not None \
                and cell_running(list(agent.session.branch())):
            agent.executor.interrupt()  # the cell only: the run goes on

    def charge(usage: Usage) -> None:
        agent.charge(usage, sub=True)

    def tell(text: str) -> None:
        agent.notices.append(Notice(text, "warning"))

    advisor = Advisor(agent.llm_factory(spec), deliver, knowledge=knowledge(project or Path.cwd()),
                      charge=charge, tell=tell)
    advisor.primary_tokens = lambda: agent.tokens_used - advisor.stats.input_tokens \
        - advisor.stats.output_tokens
    told: dict[str, Any] = {"silent": 0, "report": None}

    def after_turn(a: Agent) -> list[Notice]:
        advisor.update(list(a.session.branch()))
        s = advisor.stats
        report = s.report()
        if report != told["report"]:  # for `rlm ps` and a resume: the log says how it is
            told["report"] = report
            a.session.append(CustomEntry(custom_type=STATS_ENTRY, data=report, display=False))
        if s.turns_silent >= told["silent"] + SILENT_NOTICE:  # never "healthy" while silent
            told["silent"] = s.turns_silent
            return [Notice(f"advisor: {report_line(report)}")]
        if s.turns_silent < told["silent"]:
            told["silent"] = 0
        return []

    agent.turn_hooks.append(after_turn)
    agent.advisor = advisor
    return advisor
