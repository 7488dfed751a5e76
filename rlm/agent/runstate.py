"""What one `Agent.run` owns, reset in one place when the run starts.

Everything else on the Agent lives as long as the session (hooks, handlers, the total
token count); a value that must not leak from one run into the next belongs here. What
the answer policy knows of a run is its own (rlm.agent.policy.Facts).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunState:
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    tokens_at_start: int = 0  # limits are per run (chat runs many)
    final: tuple[str, str] | None = None  # (answer, kind) from final()/final_var()
    accepted: Any = None  # rlm.agent.policy.Accept: the answer that ends the run, judged
    error_detail: str | None = None
    interrupts: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()
