"""Acting on a model reply: log it, run its cells (rlm.agent.cells) or take its answer,
and carry out what the answer policy decides about that answer (a refusal is a note for
the model; an acceptance is kept for the end of the run).

Used by the loop (rlm.agent.loop) through `ActHost`, the part of the Agent a reply needs.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, Protocol

from rlm.agent.cells import CellHost, read_var, run_cells
from rlm.agent.codeparse import code_tool_calls, text_final
from rlm.agent.policy import Accept, Answer, Note
from rlm.chain import Chain, LoopHost
from rlm.events import Event, FinalAnswer, ModelReply, Notice
from rlm.llm.types import Completion, Usage
from rlm.session.entries import MessageEntry

# (reason, answer) when a turn says the run may end; None to keep going
Outcome = tuple[str, str | None] | None


class ActHost(CellHost, LoopHost, Protocol):
    chain: Chain  # its reply stage runs before a reply's cells (the advisor reads them)

    def charge(self, usage: Usage, *, role: str = "turns") -> None: ...


def act(host: ActHost, completion: Completion) -> Generator[Event, None, Outcome]:
    """Log the reply, then run its cells (native calls, else its fenced blocks) or judge
    the answer it gives without code."""
    calls = [c for c in completion.tool_calls if c.name == "python"]
    if not calls:
        calls = code_tool_calls(completion.content)
    host.charge(completion.usage)
    message: dict[str, Any] = {"role": "assistant", "content": completion.content}
    if calls:
        message["tool_calls"] = [c.to_message() for c in calls]
    # a reply with cells is made durable with their results: one fsync a step, begun when
    # a result is appended, done before the next model request (rlm.durability)
    logged = host.session.append(MessageEntry(
        message=message, usage=completion.usage.to_dict(), model=completion.model or None),
        durable=not calls)
    yield ModelReply(completion.content, [str(c.arguments.get("code", "")) for c in calls],
                     completion.usage.to_dict())
    if not calls:
        unknown = tuple(c.name for c in completion.tool_calls if c.name != "python")
        return (yield from _answer_without_code(host, completion.content, unknown))
    host.chain.call(host.chain.reply, host)
    yield from run_cells(host, calls, logged.id)
    if host.state.final is None:
        return None
    answer, kind = host.state.final
    if not (yield from _decide(host, Answer(answer, kind))):
        host.state.final = None
        return None
    host.state.shown = FinalAnswer(answer, kind)  # shown at the end, if it stands
    return ("final", answer)


def say(host: CellHost, note: Note | None) -> Iterator[Event]:
    """Carry out a policy note: a message for the model, a notice for the user."""
    if note is not None:
        host.session.append(MessageEntry(message={"role": "user", "content": note.text},
                                         origin=note.origin))
        yield Notice(note.notice)


def _decide(host: CellHost, answer: Answer) -> Generator[Event, None, bool]:
    """Ask the policy about `answer`: carry out a refusal (False) or keep the acceptance
    for the end of the run (True)."""
    decision = host.answers.answer(answer, host.session.branch())  # a view: no copy
    if isinstance(decision, Accept):
        host.state.accepted = decision
        return True
    yield from say(host, decision)
    return False


def _answer_without_code(host: CellHost, content: str, unknown_tools: tuple[str, ...] = ()
                         ) -> Generator[Event, None, Outcome]:
    found = text_final(content)
    if found is None:
        answer = Answer(content.strip(), "reply", unknown_tools=unknown_tools)
    elif found[0] == "var":
        answer = Answer(found[1], "var", read=lambda name: read_var(host, name))
    else:
        answer = Answer(found[1], "text")
    if not (yield from _decide(host, answer)):
        return None
    host.state.shown = FinalAnswer(answer.text, "reply" if found is None else "text")
    return ("no_code" if found is None else "final", answer.text)
