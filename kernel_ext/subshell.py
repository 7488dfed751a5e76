"""The namespace listing while a cell runs: a shell handler for kernel subshells (JEP 91).

A busy kernel's main shell queues every request behind the running cell. ipykernel >= 7
runs a shell message whose header carries a `subshell_id` on that subshell's own thread,
concurrently with the cell. The host sends `wire.NAMESPACE_REQUEST` there and this module's
handler answers `wire.NAMESPACE_REPLY` on the shell socket: {"status": "ok", "listing":
<the text of snapshot.namespace_json()>}, or {"status": "error", "ename", "evalue"}.

Why a handler of our own rather than an execute_request with user_expressions: executing,
even an empty silent cell, runs IPython's run_cell on the subshell thread, which fires the
`post_execute` hooks — matplotlib's inline backend then shows and closes the figures the
running cell is still drawing — clears the payload the cell is building, and swaps
`builtins.input` under it. This handler only reads.

Thread safety: the running cell may rebind names and mutate containers meanwhile. The
listing reads copies (`namespace.user_values`, `describe.summary`, `estimate_size` copy a
dict or set before walking it); a RuntimeError ("dictionary changed size during
iteration") or KeyError that still gets through restarts the listing, up to `RETRIES`
times, then the host gets an error reply (and falls back to the snapshot). Interrupts
reach only the main thread, so a listing is never cut short by one.
"""

from __future__ import annotations

from typing import Any

from kernel_ext import wire

RETRIES = 5

_state: dict[str, Any] = {"kernel": None, "previous": None}


def listing_text(ip: Any = None) -> str:
    """`snapshot.namespace_json()`, retried while a concurrent change breaks it."""
    from kernel_ext import snapshot

    last: Exception | None = None
    for _ in range(RETRIES):
        try:
            return snapshot.namespace_json(ip)
        except (RuntimeError, KeyError) as exc:  # the cell changed a dict under us
            last = exc
    raise RuntimeError(f"the namespace kept changing while it was listed ({last})")


def _reply_content(ip: Any) -> dict[str, Any]:
    try:
        return {"status": "ok", "listing": listing_text(ip)}
    except Exception as exc:  # noqa: BLE001 - the host needs an answer, not a silent thread
        return {"status": "error", "ename": type(exc).__name__, "evalue": str(exc)[:500]}


def _handler(stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    kernel = _state["kernel"]
    if kernel is None:
        return
    content = _reply_content(getattr(kernel, "shell", None))
    kernel.session.send(stream, wire.NAMESPACE_REPLY, content, parent, ident)


def install(ip: Any) -> None:
    kernel = getattr(ip, "kernel", None)
    handlers = getattr(kernel, "shell_handlers", None)
    if not isinstance(handlers, dict):
        return  # plain IPython: nothing to answer
    _state["kernel"] = kernel
    _state["previous"] = handlers.get(wire.NAMESPACE_REQUEST)
    handlers[wire.NAMESPACE_REQUEST] = _handler


def uninstall(ip: Any) -> None:
    kernel = _state["kernel"]
    handlers = getattr(kernel, "shell_handlers", None)
    if isinstance(handlers, dict) and handlers.get(wire.NAMESPACE_REQUEST) is _handler:
        if _state["previous"] is None:
            handlers.pop(wire.NAMESPACE_REQUEST, None)
        else:
            handlers[wire.NAMESPACE_REQUEST] = _state["previous"]
    _state["kernel"] = _state["previous"] = None
