"""Recursion from the kernel: llm_query, llm_query_batched and rlm_query.

These run on the host, called through the bridge while a cell waits. Every token they
spend is charged to the run that owns the cell, and to the tree's budget
(rlm.agent.budget), so a budget bounds the parent and all its children together.

Each answer is recorded in the session as a hidden `subcall` custom entry (content None:
never sent to the model): method, model, and per prompt (or task) its sha256, its first
characters and the reply; a batch is one entry. An exported notebook answers the same
calls from them (rlm.notebook.export), so "Run All" reproduces the session offline.

A batch in flight when its cell is interrupted (Ctrl-C, the stop button, the cell's
timeout, the advisor's blocker) is abandoned (`Recursion.abandon`): its prompts still
waiting for a slot leave the queue, so the tree's pool keeps its size, and the ones not
sent yet are not sent; those already with the model finish and are discarded.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Protocol

from rlm.agent.budget import TokenBudget
from rlm.agent.slots import Ticket, TreeSlots
from rlm.config import Config
from rlm.errors import RlmError
from rlm.llm.types import LLM, Usage
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry

MAX_PROMPT_CHARS = 2_000_000
MAX_BATCH = 1000
SUBCALL_ENTRY = "subcall"
PREVIEW_CHARS = 200


class ChildQueries(Protocol):
    """What the handlers ask of the agent's children registry (rlm.agent.children.Children,
    which imports this module): rlm_query's spawn-and-wait, and lending a child's slot
    while its batch waits."""

    def lend(self) -> AbstractContextManager[None]: ...

    def query(self, task: object, context: object) -> Any: ...


class RecursionHost(Protocol):
    """What the handlers need of their agent (rlm.agent.loop.Agent)."""

    config: Config
    depth: int
    budget: TokenBudget
    session: SessionLog
    slots: TreeSlots

    @property
    def children(self) -> ChildQueries: ...

    def charge(self, usage: Usage, *, role: str = "turns") -> None: ...


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


class _Batch:
    """One llm_query_batched call in flight: the slot tickets its prompts wait on."""

    def __init__(self) -> None:
        self.abandoned = False
        self.tickets: set[Ticket] = set()


class Recursion:
    """Host-side handlers for the kernel's sub-call helpers of one agent."""

    def __init__(self, agent: RecursionHost, llm_factory: Callable[[str], LLM]):
        self.agent = agent
        self._factory = llm_factory
        self._llms: dict[str, LLM] = {}
        self._lock = threading.Lock()
        self._append_lock = threading.Lock()
        self._batches: set[_Batch] = set()  # in flight; guarded by _lock

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
        self.agent.charge(c.usage, role="subcalls")
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
        batch = _Batch()
        with self._lock:
            self._batches.add(batch)
        try:
            with self.agent.children.lend(), ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="llm_query") as pool:
                replies = list(pool.map(
                    lambda p: self._slotted({"prompt": p, "model": model}, batch), prompts))
        finally:
            with self._lock:
                self._batches.discard(batch)
        self._record("llm_query_batched", list(zip(prompts, replies, strict=True)), model)
        return replies

    def _slotted(self, params: dict[str, Any], batch: _Batch) -> str:
        """One prompt of a batch, holding a slot of the session tree (`--max-children`);
        not sent when the batch was abandoned before it got one."""
        slots, ticket = self.agent.slots, Ticket()
        with self._lock:
            if batch.abandoned:
                raise RlmError("llm_query_batched: not sent, the cell was interrupted")
            batch.tickets.add(ticket)
        try:
            if not slots.acquire(ticket):
                raise RlmError("llm_query_batched: not sent, the cell was interrupted")
            return self.llm_query(params, record=False)
        finally:
            slots.withdraw(ticket)
            with self._lock:
                batch.tickets.discard(ticket)

    def abandon(self) -> int:
        """The cell that asked for the batches in flight was interrupted: their prompts
        waiting for a slot leave the queue (the pool keeps its size) and the ones not
        sent yet are not sent. How many waiting prompts left."""
        with self._lock:
            waiting = [t for b in self._batches for t in b.tickets if not t.granted]
            for b in self._batches:
                b.abandoned = True
        for t in waiting:
            self.agent.slots.withdraw(t)
        return len(waiting)

    def rlm_query(self, params: dict[str, Any]) -> Any:
        """The blocking form of rlm_spawn (rlm.agent.children): same path, same slots."""
        task = params.get("task")
        if not isinstance(task, str) or not task.strip():
            raise RlmError("rlm_query(task, context=None): task must be a non-empty string")
        answer = self.agent.children.query(task, params.get("context"))
        self._record("rlm_query", [(task, answer)])
        return answer

    def append(self, entry: CustomEntry) -> None:
        """Append from a bridge handler (they answer from a thread pool: one at a time)."""
        with self._append_lock:
            self.agent.session.append(entry)

    def _record(self, method: str, answered: list[tuple[str, Any]], model: Any = None) -> None:
        """One call's answers as a hidden `subcall` entry (a batch is one entry: an entry
        costs an fsync, ~7 ms here). One at a time: handlers answer from a thread pool."""
        data = {"method": method, "model": model, "calls": [
            {"sha256": hashlib.sha256(asked.encode()).hexdigest(),
             "preview": asked[:PREVIEW_CHARS], "reply": reply} for asked, reply in answered]}
        self.append(CustomEntry(custom_type=SUBCALL_ENTRY, data=data, display=False,
                                content=None))
