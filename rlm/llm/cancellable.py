"""A model call the user can stop at once: `CancellableLLM(llm, cancelled)` runs each call
on a thread of its own and raises `Cancelled` within POLL_S of `cancelled()` turning true,
whether or not the provider has sent a token yet (a large prompt is read for seconds before
the first one). The abandoned call stops at its next streamed piece (its `on_text` /
`on_call` raise: the embedded model's generation ends and its one lock is free for the next
turn, a hosted stream is closed) and its reply is dropped; nothing it returns is written
anywhere, so the caller's own writes stay on one thread.

Used for the model calls made between turns (a compaction's summary), where the loop waits
for the work to end instead of abandoning it (rlm.agent.loop.Agent.in_phase).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from rlm.errors import Cancelled
from rlm.llm.types import LLM, Completion

POLL_S = 0.1


class CancellableLLM:
    def __init__(self, llm: LLM, cancelled: Callable[[], bool]):
        self.inner, self.cancelled = llm, cancelled
        self.spec, self.native_tools = llm.spec, llm.native_tools

    def context_window(self) -> int | None:
        return self.inner.context_window()

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Completion:
        if self.cancelled():
            raise Cancelled("stopped by the user before the model call")
        done: queue.Queue[tuple[bool, Any]] = queue.Queue()
        abandoned = threading.Event()  # this call's own: the user's flag clears at the next piece
        for key in ("on_text", "on_call"):
            kwargs[key] = _stopping(kwargs.get(key), abandoned)

        def call() -> None:
            try:
                done.put((True, self.inner.complete(messages, **kwargs)))
            except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
                done.put((False, e))

        threading.Thread(target=call, name="rlm-cancellable-call", daemon=True).start()
        while True:
            try:
                ok, value = done.get(timeout=POLL_S)
            except queue.Empty:
                if self.cancelled():
                    abandoned.set()  # its stream stops at the next piece
                    raise Cancelled("stopped by the user during the model call") from None
                continue
            if ok:
                return value  # type: ignore[no-any-return]
            raise value


def _stopping(given: Callable[..., None] | None,
              abandoned: threading.Event) -> Callable[..., None]:
    """A stream callback that raises once the call is abandoned (the seam stops a stream
    whose callback raises), and passes each piece on to `given` otherwise."""

    def piece(*args: Any) -> None:
        if abandoned.is_set():
            raise Cancelled("the call was abandoned: its stream stops here")
        if given is not None:
            given(*args)

    return piece
