"""The names the model uses inside the kernel. Thin: each call is one `bridge.request`.

Injected into the user namespace and hidden from it (`user_ns_hidden`), so namespace
listings and snapshots leave them out. An error reply from the host raises RuntimeError
with the host's message.

`llm_query_batched` sends ONE request with all prompts; the host fans them out
(bounded by its `batch_concurrency`), so the kernel never needs threads for it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from kernel_ext import bridge, contract
from kernel_ext.children import rlm_gather, rlm_max_children, rlm_spawn, rlm_wait, yield_section


def _jsonable(value: Any) -> Any:
    """The value itself when it survives JSON, else its str()."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def final(value: Any) -> None:
    """Give the final answer (sent as text: str(value))."""
    bridge.request(contract.FINAL, {"value": value if isinstance(value, str) else str(value)})


def final_var(name: str) -> None:
    """Give the final answer as the str() of the variable `name` in the user namespace."""
    ip = _shell()
    ns = ip.user_ns if ip is not None else {}
    if name not in ns:
        raise NameError(f"final_var: no variable named {name!r}")
    bridge.request(contract.FINAL, {"value": str(ns[name]), "name": name})


def llm_query(prompt: str, model: str | None = None) -> str:
    """One sub-model completion; returns its text."""
    return bridge.request(contract.LLM_QUERY, {"prompt": str(prompt), "model": model})


def llm_query_batched(prompts: list[str], model: str | None = None) -> list[str]:
    """Many independent completions (run concurrently on the host), in order."""
    return bridge.request(
        contract.LLM_QUERY_BATCHED, {"prompts": [str(p) for p in prompts], "model": model}
    )


def rlm_query(task: str, context: Any = None) -> str:
    """Run a child agent on `task`; `context` (optional) reaches it as the object itself in
    its variable `context` (kernel_ext.child_context); returns its final answer."""
    from kernel_ext import child_context

    return bridge.request(contract.RLM_QUERY, {"task": str(task),
                                        "context": child_context.pack(context)})


class _Compact:
    def run(self, instructions: str | None = None) -> Any:
        """Compact the conversation now (kernel state is untouched)."""
        return bridge.request(contract.COMPACT_RUN, {"instructions": instructions})

    def status(self) -> Any:
        return bridge.request(contract.COMPACT_STATUS, {})

    def shake(self) -> Any:
        """Old cell outputs become placeholders at the end of this turn (no model call)."""
        return bridge.request(contract.COMPACT_SHAKE, {})

    def __repr__(self) -> str:
        return "<compact: .run(instructions=None), .status(), .shake()>"


class _History:
    """The session's own log, read-only through the host: what compaction took out of the
    context is still here (`history.cell(N)` returns a cell's full original output)."""

    def cell(self, n: int) -> Any:
        """Cell N's code, status and full output (also when pruned, shaken or summarised)."""
        return bridge.request(contract.HISTORY_CELL, {"n": int(n)})

    def search(self, pattern: str, limit: int = 20) -> Any:
        """Messages and outputs matching a regex (or plain text), with a snippet each."""
        return bridge.request(contract.HISTORY_SEARCH, {"pattern": str(pattern), "limit": int(limit)})

    def messages(self, since: int = 0, role: str | None = None, limit: int = 20) -> Any:
        """Messages from position `since`, optionally of one role (user/assistant/tool)."""
        return bridge.request(contract.HISTORY_MESSAGES,
                              {"since": int(since), "role": role, "limit": int(limit)})

    def checkpoint(self) -> Any:
        """The session's checkpoint (written in the background as the context fills): its
        text and the last entry it covers; None before the first one."""
        return bridge.request(contract.HISTORY_CHECKPOINT, {})

    def __repr__(self) -> str:
        return ("<history: .cell(N), .search(pattern), .messages(since=0, role=None), "
                ".checkpoint()>")


class GoalReply(dict):  # type: ignore[type-arg]
    """What goal.get/complete/block return: the dict, shown as one line when it is a
    cell's last value (not a 12-line dump in the output)."""

    def __repr__(self) -> str:
        g = self.get("goal") or {}
        if not g:
            return "<goal: none>"
        left = self.get("remaining_tokens")
        budget = f", {left:,} tokens left" if isinstance(left, int) else ""
        return f"<goal {g.get('status')}: {str(g.get('objective', ''))[:60]!r}{budget}>"

    def __str__(self) -> str:  # print(goal.get()) still shows every field
        return dict.__repr__(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


def _goal_reply(reply: Any) -> Any:
    return GoalReply(reply) if isinstance(reply, dict) else reply


class _Goal:
    def get(self) -> Any:
        return _goal_reply(bridge.request(contract.GOAL_GET, {}))

    def complete(self, summary: str | None = None) -> Any:
        """Claim the goal is met (`summary`: what shows it); the host checks the claim."""
        return _goal_reply(bridge.request(contract.GOAL_COMPLETE,
                                          {} if summary is None else {"summary": summary}))

    def block(self, reason: str) -> Any:
        return _goal_reply(bridge.request(contract.GOAL_BLOCK, {"reason": str(reason)}))

    def __repr__(self) -> str:
        return "<goal: .get(), .complete(summary=None), .block(reason)>"


class _Heartbeat:
    def create(self, prompt: str, interval: Any, label: str | None = None) -> Any:
        return bridge.request(
            contract.HEARTBEAT_CREATE,
            {"prompt": str(prompt), "interval": _jsonable(interval), "label": label},
        )

    def list(self) -> Any:
        return bridge.request(contract.HEARTBEAT_LIST, {})

    def pause(self, id: str) -> Any:
        return bridge.request(contract.HEARTBEAT_PAUSE, {"id": str(id)})

    def resume(self, id: str) -> Any:
        return bridge.request(contract.HEARTBEAT_RESUME, {"id": str(id)})

    def delete(self, id: str) -> Any:
        return bridge.request(contract.HEARTBEAT_DELETE, {"id": str(id)})

    def __repr__(self) -> str:
        return "<heartbeat: .create(prompt, interval, label=None), .list(), .pause(id), .resume(id), .delete(id)>"


class _Cron:
    def add(self, when: str, prompt: str) -> Any:
        return bridge.request(contract.CRON_ADD, {"when": str(when), "prompt": str(prompt)})

    def list(self) -> Any:
        return bridge.request(contract.CRON_LIST, {})

    def cancel(self, id: str) -> Any:
        return bridge.request(contract.CRON_CANCEL, {"id": str(id)})

    def __repr__(self) -> str:
        return "<cron: .add(when, prompt), .list(), .cancel(id)>"


class _Memory:
    """The project's memory: short files in `.agent/` of the working directory, shown at
    the head of every context in this and later sessions (they survive compaction).

    Write when: a unit of work is done or the next steps change (state), a decision is
    made or the user states a preference (conventions), a bug is found and fixed (log),
    a dataset's path/schema/row count is established (context). Never write narrative,
    or what the kernel or the data already say. Keep each line short and factual.
    """

    def update(self, file: str, content: Any, mode: str | None = None) -> Any:
        """file: 'state' (where the work stands: ## In progress / ## Recently done /
        ## Known problems / ## Next steps), 'conventions' ('- rule' lines) or 'context'
        (a dict). mode: 'merge' (default: state's ## sections replaced, new convention
        lines added, context keys updated), 'append' or 'replace' (the whole file). A
        write over the file's budget is refused with the reason: condense and replace."""
        if mode is None:
            mode = "merge"
        reply = bridge.request(contract.MEMORY_UPDATE, {"file": str(file),
                                                 "content": _jsonable(content), "mode": str(mode)})
        if isinstance(reply, dict) and reply.get("warning"):
            print(f"memory: {reply['warning']}")
        return reply

    def log(self, action: str, target: str = "", note: str = "") -> Any:
        """One line in .agent/history.log, e.g. log('fixed', 'clean.py', 'dates as UTC')."""
        return bridge.request(contract.MEMORY_LOG, {"action": str(action), "target": str(target),
                                             "note": str(note)})

    def snapshot(self, label: str) -> Any:
        """Copy state, conventions and context to .agent/snapshots/NNN-<label>.md (a
        milestone)."""
        return bridge.request(contract.MEMORY_SNAPSHOT, {"label": str(label)})

    def show(self) -> str:
        """The memory block as the model is shown it."""
        return str(bridge.request(contract.MEMORY_SHOW, {}).get("text", ""))

    def __repr__(self) -> str:
        return ("<memory: .update(file, content, mode='merge'), .log(action, target, note), "
                ".snapshot(label), .show()>")


compact = _Compact()
history = _History()
memory = _Memory()
goal = _Goal()
heartbeat = _Heartbeat()
cron = _Cron()

NAMES: dict[str, Any] = {
    "final": final,
    "final_var": final_var,
    "llm_query": llm_query,
    "llm_query_batched": llm_query_batched,
    "rlm_query": rlm_query,
    "rlm_spawn": rlm_spawn,
    "rlm_gather": rlm_gather,
    "rlm_wait": rlm_wait,
    "rlm_max_children": rlm_max_children,
    "yield_section": yield_section,
    "compact": compact,
    "history": history,
    "goal": goal,
    "heartbeat": heartbeat,
    "cron": cron,
    "memory": memory,
}

_state: dict[str, Any] = {"ip": None}


def _shell() -> Any:
    return _state["ip"]


def install(ip: Any) -> None:
    _state["ip"] = ip
    ip.push(dict(NAMES), interactive=False)  # interactive=False: hidden from %who etc.
    for name in NAMES:
        ip.user_ns_hidden[name] = NAMES[name]


def withdraw(ip: Any) -> None:
    """Take the API's names out of the user's namespace (where they are still the API's):
    `%load_ext rlm` leaves a notebook's globals as they were; `scoped` lends the names to
    a `%%rlm` run."""
    for name, obj in NAMES.items():
        if ip.user_ns.get(name) is obj:
            del ip.user_ns[name]
        ip.user_ns_hidden.pop(name, None)


@contextlib.contextmanager
def scoped(ip: Any) -> Iterator[None]:
    """The API's names in the user's namespace for one `%%rlm` run; afterwards the
    notebook's own values of those names (a user's `final = ...`) are back."""
    own = {n: ip.user_ns[n] for n, obj in NAMES.items()
           if n in ip.user_ns and ip.user_ns[n] is not obj}
    install(ip)
    try:
        yield
    finally:
        withdraw(ip)
        ip.user_ns.update(own)


def uninstall(ip: Any) -> None:
    for name, obj in NAMES.items():
        if ip.user_ns.get(name) is obj:
            del ip.user_ns[name]
        ip.user_ns_hidden.pop(name, None)
    _state["ip"] = None
