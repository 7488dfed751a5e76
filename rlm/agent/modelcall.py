"""One model call of the loop: the projected messages, streaming, retries told as notices,
one retry after a compaction on overflow, and a resample the policy asked for.

Used by the loop (rlm.agent.loop) through `ModelHost`, the part of the Agent a call needs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol

from rlm.agent import notices
from rlm.agent.policy import AnswerPolicy, Resample
from rlm.agent.progress import ModelTextStream, prompt_tokens
from rlm.agent.prompts import system_prompt
from rlm.agent.runner import Work
from rlm.agent.runstate import RunState
from rlm.config import Config
from rlm.errors import AuthError, ContextOverflow, RateLimited, ScriptExhausted
from rlm.events import Event, ModelCallStarted, Notice
from rlm.llm.seam import retry_notices
from rlm.llm.types import LLM, PYTHON_TOOL, Completion, Usage
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry, MessageEntry


class ModelHost(Protocol):
    session: SessionLog
    config: Config
    llm: LLM
    state: RunState
    answers: AnswerPolicy
    overflow_hook: Callable[[Any, MessageEntry], str] | None

    def charge(self, usage: Usage, *, sub: bool = False) -> None: ...

    def in_thread(self, fn: Work, *, cell: bool = False) -> Generator[Event, None, Any]: ...


def call_model(host: ModelHost, temperature: float | None = None
               ) -> Generator[Event, None, Completion | None]:
    """One model call (a retry after a compaction on overflow); `temperature` overrides
    the policy's (`AnswerPolicy.temperature`). None when the call failed (said once, by
    RunEnded, or by a notice)."""
    native = host.llm.native_tools
    for attempt in range(2):
        # incremental projection kept by the store: O(new entries) per turn
        # (copied per message: the store's cache must not see provider-side mutation)
        messages = [_copy_message(m) for m in host.session.messages(
            system_prompt=system_prompt(host.config, native_tools=native), native_tools=native)]
        temp = host.answers.temperature(host.config.temperature) if temperature is None \
            else temperature

        def call(emit: Callable[[Event], None],
                 messages: list[dict[str, Any]] = messages, temp: float | None = temp
                 ) -> Completion:
            with retry_notices(lambda text: emit(Notice(text, "warning"))), \
                    ModelTextStream(emit) as on_text:
                return host.llm.complete(messages, tools=[PYTHON_TOOL] if native else None,
                                         on_text=on_text, temperature=temp)

        yield ModelCallStarted(host.llm.spec, prompt_tokens(messages))
        try:
            completion: Completion = yield from host.in_thread(call)
            return completion
        except (RateLimited, AuthError, ScriptExhausted) as e:
            host.session.append(MessageEntry(
                message={"role": "assistant", "content": ""}, error=f"{type(e).__name__}: {e}",
                model=host.llm.spec))
            host.state.error_detail = str(e)  # told once, by RunEnded
            return None
        except ContextOverflow as e:
            entry = MessageEntry(
                message={"role": "assistant", "content": ""}, error=f"context overflow: {e}",
                model=host.llm.spec)
            host.session.append(entry)
            decision = host.overflow_hook(host, entry) if host.overflow_hook else ""
            if decision == "retry" and attempt == 0:
                yield Notice("context overflow: compacted, retrying once", "warning")
                continue
            report = decision if decision not in ("", "retry", "report") else None
            yield Notice(report or notices.overflow_report(e), "warning")
            return None
    return None


def resample(host: ModelHost, rejected: Completion, decision: Resample
             ) -> Generator[Event, None, Completion | None]:
    """Sample again instead of running a reply: the rejected reply is charged and logged as
    a hidden `resampled` entry (it never reaches the model)."""
    host.charge(rejected.usage)
    host.session.append(CustomEntry(
        custom_type="resampled", display=False, content=None,
        data={"why": decision.why, "content": rejected.content,
              "usage": rejected.usage.to_dict()}))
    yield Notice(decision.notice)
    return (yield from call_model(host, temperature=decision.temperature))


def _copy_message(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    if "tool_calls" in out:
        out["tool_calls"] = [{**tc, "function": dict(tc.get("function") or {})}
                             for tc in out["tool_calls"]]
    return out
