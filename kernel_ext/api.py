"""The names the model uses inside the kernel. Thin: each call is one `bridge.request`.

Injected into the user namespace and hidden from it (`user_ns_hidden`), so namespace
listings and snapshots leave them out. An error reply from the host raises RuntimeError
with the host's message.

`llm_query_batched` sends ONE request with all prompts; the host fans them out
(bounded by its `batch_concurrency`), so the kernel never needs threads for it.
"""

from __future__ import annotations

import json
from typing import Any

from kernel_ext import bridge


def _jsonable(value: Any) -> Any:
    """The value itself when it survives JSON, else its str()."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def final(value: Any) -> None:
    """Give the final answer (sent as text: str(value))."""
    bridge.request("final", {"value": value if isinstance(value, str) else str(value)})


def final_var(name: str) -> None:
    """Give the final answer as the str() of the variable `name` in the user namespace."""
    ip = _shell()
    ns = ip.user_ns if ip is not None else {}
    if name not in ns:
        raise NameError(f"final_var: no variable named {name!r}")
    bridge.request("final", {"value": str(ns[name]), "name": name})


def llm_query(prompt: str, model: str | None = None) -> str:
    """One sub-model completion; returns its text."""
    return bridge.request("llm_query", {"prompt": str(prompt), "model": model})


def llm_query_batched(prompts: list[str], model: str | None = None) -> list[str]:
    """Many independent completions (run concurrently on the host), in order."""
    return bridge.request(
        "llm_query_batched", {"prompts": [str(p) for p in prompts], "model": model}
    )


def rlm_query(task: str, context: Any = None) -> str:
    """Run a child agent on `task` (with optional `context`); returns its final answer."""
    return bridge.request("rlm_query", {"task": str(task), "context": _jsonable(context)})


class _Compact:
    def run(self, instructions: str | None = None) -> Any:
        """Compact the conversation now (kernel state is untouched)."""
        return bridge.request("compact.run", {"instructions": instructions})

    def status(self) -> Any:
        return bridge.request("compact.status", {})

    def __repr__(self) -> str:
        return "<compact: .run(instructions=None), .status()>"


class _Goal:
    def get(self) -> Any:
        return bridge.request("goal.get", {})

    def complete(self) -> Any:
        return bridge.request("goal.complete", {})

    def block(self, reason: str) -> Any:
        return bridge.request("goal.block", {"reason": str(reason)})

    def __repr__(self) -> str:
        return "<goal: .get(), .complete(), .block(reason)>"


class _Heartbeat:
    def create(self, prompt: str, interval: Any, label: str | None = None) -> Any:
        return bridge.request(
            "heartbeat.create",
            {"prompt": str(prompt), "interval": _jsonable(interval), "label": label},
        )

    def list(self) -> Any:
        return bridge.request("heartbeat.list", {})

    def pause(self, id: str) -> Any:
        return bridge.request("heartbeat.pause", {"id": str(id)})

    def resume(self, id: str) -> Any:
        return bridge.request("heartbeat.resume", {"id": str(id)})

    def delete(self, id: str) -> Any:
        return bridge.request("heartbeat.delete", {"id": str(id)})

    def __repr__(self) -> str:
        return "<heartbeat: .create(prompt, interval, label=None), .list(), .pause(id), .resume(id), .delete(id)>"


class _Cron:
    def add(self, when: str, prompt: str) -> Any:
        return bridge.request("cron.add", {"when": str(when), "prompt": str(prompt)})

    def list(self) -> Any:
        return bridge.request("cron.list", {})

    def cancel(self, id: str) -> Any:
        return bridge.request("cron.cancel", {"id": str(id)})

    def __repr__(self) -> str:
        return "<cron: .add(when, prompt), .list(), .cancel(id)>"


compact = _Compact()
goal = _Goal()
heartbeat = _Heartbeat()
cron = _Cron()

NAMES: dict[str, Any] = {
    "final": final,
    "final_var": final_var,
    "llm_query": llm_query,
    "llm_query_batched": llm_query_batched,
    "rlm_query": rlm_query,
    "compact": compact,
    "goal": goal,
    "heartbeat": heartbeat,
    "cron": cron,
}

_state: dict[str, Any] = {"ip": None}


def _shell() -> Any:
    return _state["ip"]


def install(ip: Any) -> None:
    _state["ip"] = ip
    ip.push(dict(NAMES), interactive=False)  # interactive=False: hidden from %who etc.
    for name in NAMES:
        ip.user_ns_hidden[name] = NAMES[name]


def uninstall(ip: Any) -> None:
    for name, obj in NAMES.items():
        if ip.user_ns.get(name) is obj:
            del ip.user_ns[name]
        ip.user_ns_hidden.pop(name, None)
    _state["ip"] = None
