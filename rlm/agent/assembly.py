"""What the model is sent, assembled in one place (issue 59, S3).

The prompt of a model call is: the system prompt (the run's config, its role, its tool
mode) followed by the answer policy's system note (the always-on rules), the memory head
right after it (rlm.memory; read fresh, so edits between turns show), then the branch's
projection (rlm.session.context: the latest summary, the kept entries, the live notes).

Everything that needs "what the model is sent" asks here: the model call sends it
(rlm.agent.modelcall), and the composition root hands `projection(host)` to compaction, so
its threshold, its tiers and the checkpoint rungs count exactly the prompt the next call
sends (rlm.compaction.plan.context_tokens counts it with rlm.llm.tokens). Before this,
compaction projected without the rules note and the memory (one always-rule file: 688
tokens counted, 1,580 sent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from rlm.agent.policy import AnswerPolicy
from rlm.agent.prompts import system_prompt
from rlm.chain import Chain
from rlm.config import Config
from rlm.llm.tokens import count_messages
from rlm.llm.types import LLM
from rlm.protocols import SessionLog
from rlm.session.entries import Entry


class ContextHost(Protocol):
    """The parts of an agent its prompt is made from (rlm.agent.loop.Agent has them)."""

    session: SessionLog
    config: Config
    llm: LLM
    answers: AnswerPolicy
    chain: Chain  # its context providers: messages after the system prompt (the memory)
    role: str  # after the system prompt: a child's role ("" for a root agent)


@dataclass(frozen=True)
class Context:
    """The messages one model call sends (read-only dicts shared with the session's
    projection cache) and what they cost."""

    messages: list[dict[str, Any]]

    @cached_property
    def tokens(self) -> int:
        """Exact tokens of the prompt (rlm.llm.tokens: the messages and the reply priming)."""
        return count_messages(self.messages)


def assemble(host: ContextHost, branch: Sequence[Entry] | None = None) -> Context:
    """The prompt for `branch` (None: the session's current branch, from its incremental
    projection), exactly as the model call sends it."""
    native = host.llm.native_tools
    shown = host.session.branch() if branch is None else branch
    system = system_prompt(host.config, native_tools=native, role=host.role) \
        + host.answers.system_note(shown)
    if branch is None:  # O(new entries) per turn: the same dicts each turn
        messages = host.session.messages(system_prompt=system, native_tools=native)
    else:
        messages = host.session.projection_of(branch, system_prompt=system, native_tools=native)
    heads = host.chain.messages_after_system() if messages else []
    return Context([messages[0], *heads, *messages[1:]] if heads else messages)


def projection(host: ContextHost) -> Callable[[Sequence[Entry]], list[dict[str, Any]]]:
    """`branch -> messages` as the model call sends them: compaction's projection
    (rlm.compaction.plan.Projection), so what it counts is what is sent."""
    return lambda branch: assemble(host, branch).messages
