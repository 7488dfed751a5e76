"""A cell's save after its reply: the replay record and the snapshot of what the cell left
run once the kernel has sent the cell's execute_reply and gone idle, before it takes its
next shell message, and end with an IOPub message `wire.SAVED` (parent: the cell's
request) that carries the problems the save met.

The host learns from the cell's `user_expressions` (contract.SAVE_DUE) that a save is
due, does its own work for the step meanwhile (the log entry and its fsync, the context
check), and waits for SAVED before its next model call (rlm.kernel.settling): what a
cell leaves is on disk before the model is asked again, as when the save ran inside the
cell, but the reply no longer waits for the pickles and their fsync. A long save (a
large frame) overlaps the host's work the same way. An interrupt stops the save as it
stopped it inside the cell: the names it would have written stay due for the next one.

Only on ipykernel's main shell; elsewhere (a plain IPython shell, a cell run on a
subshell thread) the save stays inside the cell (kernel_ext.snapshot.post_run_cell).
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

from kernel_ext import snapshot, wire

_installed: tuple[Any, Any] | None = None  # (kernel, its own dispatch_shell)


def install(ip: Any) -> None:
    global _installed
    kernel, state = getattr(ip, "kernel", None), snapshot._state
    if kernel is None or state is None or not state.path or _installed is not None:
        return
    own = getattr(kernel, "dispatch_shell", None)
    if own is None or getattr(kernel, "session", None) is None:
        return

    async def dispatch_shell(msg: Any, *args: Any, **kwargs: Any) -> None:
        await own(msg, *args, **kwargs)
        if kwargs.get("subshell_id") is None and not kwargs.get("concurrent"):
            save_due(kernel, snapshot._state)  # the current one (a cell may reload us)

    kernel.dispatch_shell = dispatch_shell
    state.deferring = True
    _installed = (kernel, own)


def uninstall(ip: Any) -> None:
    global _installed
    if _installed is None:
        return
    kernel, own = _installed
    _installed = None
    kernel.dispatch_shell = own
    state = snapshot._state
    if state is not None:
        state.deferring = False
        for line in state.save_due() or []:
            print(line, file=sys.stderr)


def save_due(kernel: Any, state: Any) -> None:
    """Run the deferred save, if one is due, and say SAVED to the cell's request."""
    if state is None or not state.due:
        return
    problems = ["[rlm] the snapshot after this cell was interrupted: what the cell "
                "changed is saved after the next cell"]
    try:  # Ctrl-C reaches the save as it reached it inside the cell, and no further
        try:
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread
            previous = None
        try:
            problems = state.save_due() or []
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    except KeyboardInterrupt:
        pass
    try:
        parent = kernel.get_parent("shell")
    except TypeError:  # ipykernel 6: one parent
        parent = kernel.get_parent()
    kernel.session.send(kernel.iopub_socket, wire.SAVED, {"problems": problems},
                        parent=parent, ident=kernel._topic(wire.SAVED))


def due_json() -> str:
    """With each cell's execute_request: "1" when its save runs after the reply."""
    state = snapshot._state
    return json.dumps(bool(state is not None and state.deferring and state.due))
