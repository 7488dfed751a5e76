"""Recursion from the kernel: llm_query, llm_query_batched and rlm_query.

These run on the host, called through the bridge while a cell waits. Every token they
spend is charged to the run that owns the cell, and to a `TokenBudget` shared by the
whole rlm_query tree, so a budget bounds the parent and all its children together.

Each answer is recorded in the session as a hidden `subcall` custom entry (content None:
never sent to the model): method, model, and per prompt (or task) its sha256, its first
characters and the reply; a batch is one entry. An exported notebook answers the same
calls from them (rlm.notebook.export), so "Run All" reproduces the session offline.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlm.config import Config
from rlm.errors import LimitReached, RlmError
from rlm.llm.types import LLM, Usage
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry

MAX_PROMPT_CHARS = 2_000_000
MAX_BATCH = 1000
SUBCALL_ENTRY = "subcall"
PREVIEW_CHARS = 200


@dataclass
class TokenBudget:
    """Tokens spent by a run tree (parent + rlm_query children). Thread-safe."""

    limit: int | None = None
    spent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, usage: Usage) -> None:
        with self._lock:
            self.spent += usage.total

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.spent)

    def check(self, what: str) -> None:
        if self.limit is not None and self.spent >= self.limit:
            raise LimitReached("token budget", f"{self.spent} of {self.limit} tokens used before {what}")


class RecursionHost(Protocol):
    """What the handlers need of their agent (rlm.agent.loop.Agent)."""

    config: Config
    depth: int
    budget: TokenBudget
    session: SessionLog

    def charge(self, usage: Usage, *, sub: bool = False) -> None: ...

    def run_child(self, task: str, context: Any) -> str | None: ...


def configured_models(cfg: Config) -> list[str]:
    """The models a cell may name in a sub-call: the run's --model, --sub-model and
    compaction model (the user's choices; never a spec a cell makes up)."""
    out: list[str] = []
    for spec in (cfg.model, cfg.sub_model, cfg.compaction_model):
        if spec and spec not in out:
            out.append(spec)
    return out


def check_model(model: Any, cfg: Config) -> None:
    """Refuse a sub-call model the user did not configure (issue 26: a cell naming
    `script:/any/file`, `local:/any.gguf` or a provider would make the host read that
    file or use its keys). The cell gets the error as an exception."""
    allowed = configured_models(cfg)
    if isinstance(model, str) and model in allowed:
        return
    shown = repr(model if len(model) <= 200 else model[:200] + "…") if isinstance(model, str) \
        else f"a {type(model).__name__}"
    raise RlmError(f"llm_query(model={shown}) is not a configured model; a cell may name only "
                   f"{', '.join(map(repr, allowed)) or 'none'} (or leave model out for the "
                   "default); the user sets them with --model, --sub-model and --compaction-model")


class Recursion:
    """Host-side handlers for the kernel's sub-call helpers of one agent."""

    def __init__(self, agent: RecursionHost, llm_factory: Callable[[str], LLM]):
        self.agent = agent
        self._factory = llm_factory
        self._llms: dict[str, LLM] = {}
        self._lock = threading.Lock()

    def _llm(self, model: Any) -> LLM:
        cfg = self.agent.config
        if model is not None:
            check_model(model, cfg)
        spec = model or cfg.sub_model or cfg.model or ""
        with self._lock:
            if spec not in self._llms:
                self._llms[spec] = self._factory(spec)
            return self._llms[spec]

    def llm_query(self, params: dict[str, Any], record: bool = True) -> str:
        prompt = params.get("prompt")
        if not isinstance(prompt, str):
            raise RlmError("llm_query(prompt): prompt must be a string")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise RlmError(f"llm_query prompt is {len(prompt)} chars; slice it below {MAX_PROMPT_CHARS}")
        self.agent.budget.check("llm_query")
        llm = self._llm(params.get("model"))
        c = llm.complete([{"role": "user", "content": prompt}], tools=[],
                         temperature=self.agent.config.temperature)
        self.agent.charge(c.usage, sub=True)
        if record:
            self._record("llm_query", [(prompt, c.content)], params.get("model"))
        return c.content

    def llm_query_batched(self, params: dict[str, Any]) -> list[str]:
        prompts = params.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise RlmError("llm_query_batched(prompts): prompts must be a list of strings")
        if len(prompts) > MAX_BATCH:
            raise RlmError(f"llm_query_batched got {len(prompts)} prompts; at most {MAX_BATCH} per call")
        model = params.get("model")
        if model is not None:
            check_model(model, self.agent.config)  # once, before any prompt is sent
        workers = max(1, min(self.agent.config.batch_concurrency, len(prompts) or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm_query") as pool:
            replies = list(pool.map(lambda p: self.llm_query({"prompt": p, "model": model},
                                                             record=False), prompts))
        self._record("llm_query_batched", list(zip(prompts, replies, strict=True)), model)
        return replies

    def rlm_query(self, params: dict[str, Any]) -> str | None:
        task = params.get("task")
        if not isinstance(task, str) or not task.strip():
            raise RlmError("rlm_query(task, context=None): task must be a non-empty string")
        agent = self.agent
        if agent.depth >= agent.config.max_depth:
            raise RlmError(
                f"rlm_query depth limit reached (depth {agent.depth}, max_depth "
                f"{agent.config.max_depth}); use llm_query for a plain sub-call or raise --max-depth"
            )
        agent.budget.check("rlm_query")
        answer = agent.run_child(task, params.get("context"))
        self._record("rlm_query", [(task, answer)])
        return answer

    def _record(self, method: str, answered: list[tuple[str, Any]], model: Any = None) -> None:
        """One call's answers as a hidden `subcall` entry (a batch is one entry: an entry
        costs an fsync, ~7 ms here). One at a time: handlers answer from a thread pool."""
        data = {"method": method, "model": model, "calls": [
            {"sha256": hashlib.sha256(asked.encode()).hexdigest(),
             "preview": asked[:PREVIEW_CHARS], "reply": reply} for asked, reply in answered]}
        with self._lock:
            self.agent.session.append(CustomEntry(custom_type=SUBCALL_ENTRY, data=data,
                                                  display=False, content=None))
