"""The composition root's part of steering: rule files loaded into an agent's answer policy
(rlm.agent.steer for the files and matching, rlm.agent.policy.stream for the decisions),
and the --gate checks a goal's completion waits for (rlm.longrun.gates)."""

from __future__ import annotations

from pathlib import Path

from rlm.agent.loop import Agent
from rlm.agent.policy.stream import StreamRules
from rlm.agent.steer.author import Authored, author_rule
from rlm.agent.steer.files import load_rules
from rlm.app.features import tells_user
from rlm.app.seam import Plain
from rlm.config import Config, load_config
from rlm.events import Notice
from rlm.kernel.runtime import gate_sandbox
from rlm.llm import get_llm
from rlm.llm.defaults import default_model
from rlm.llm.types import LLM
from rlm.longrun.gates import GateCheck, GatePlace, GoalGate
from rlm.protocols import SessionLog


def attach_rules(agent: Agent, project: Path | None = None) -> None:
    """Load the user's and the project's rule files (`project`: the working directory) into
    the agent's policy; a file with a problem is told once and skipped."""
    rules = load_rules(project or Path.cwd(), agent.config.home)
    agent.answers.stream = StreamRules(rules)
    if tells_user(agent.entry):
        agent.notices.extend(Notice(p, "warning") for p in rules.problems)


RULES = Plain("rules", lambda agent, wiring: attach_rules(agent))


def gate_place(config: Config, session_dir: Path | None, cwd: Path) -> GatePlace:
    """Gates run where cells run: in the kernel's sandbox, with its network setting and an
    environment without provider keys (rlm.kernel.runtime.gate_sandbox)."""
    prefix, env = gate_sandbox(config, session_dir, cwd)
    return GatePlace(tuple(prefix), env)


def goal_gate(agent: Agent, commands: list[str], place: GatePlace | None) -> GoalGate:
    """The --gate checks `goal.complete()` runs first (rlm.longrun.gates), in the working
    directory, where cells run (`place`); the kernel counts as changed once another cell
    has run."""

    def cells() -> int:
        return sum(1 for e in agent.session.branch() if getattr(e, "cell", None) is not None)

    return GoalGate(GateCheck(commands, Path.cwd(), agent.config.gate_timeout_s,
                              skip=(agent.config.home,), place=place,
                              cancelled=agent.pieces.cancelled,
                              announce=agent.announce), cells)


def add_rule(session: SessionLog, complaint: str, config: Config | None = None,
             llm: LLM | None = None, project: Path | None = None) -> Authored:
    """`rlm rule add SESSION "..."`: a rule written from the complaint by the configured
    model (`--model`, the user's config, else the default; never a model named only in
    the session's log: rlm.trust), validated against the session and saved in the project."""
    config = config or load_config()
    if llm is None:
        llm = get_llm(config.model or default_model(), config)
    return author_rule(llm, list(session.branch()), complaint, project or Path.cwd())


def rule_from_chat(agent: Agent, complaint: str) -> Authored:
    """`/rule <complaint>` in chat: the session's own model writes it; the agent's rules are
    reloaded so the new one watches the rest of this session too."""
    authored = author_rule(agent.llm, list(agent.session.branch()), complaint, Path.cwd())
    attach_rules(agent)
    return authored
