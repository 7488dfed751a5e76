"""What one `Agent.run` owns, reset in one place when the run starts.

Everything else on the Agent lives as long as the session (hooks, handlers, the total
token count); a value that must not leak from one run into the next belongs here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class RunState:
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    tokens_at_start: int = 0  # limits are per run (chat runs many)
    final: tuple[str, str] | None = None  # (answer, kind) from final()/final_var()
    error_detail: str | None = None
    nudges: int = 0
    has_data: bool = False  # input was attached for this run's prompt
    prompt: str = ""  # this run's prompt (an answer's names it already holds are not new)
    last_failed_code: str | None = None
    looping: bool = False  # the newest cell repeated the failing one, or a successful one again
    succeeded: dict[str, int] = field(default_factory=dict)  # successful cells' code: runs
    cells: int = 0  # cells executed in this run
    last_cell_ok: bool | None = None  # the status of the newest of them
    outputs: list[str] = field(default_factory=list)  # what the successful ones printed
    refused: set[str] = field(default_factory=set)  # answer refusals given (nudge texts)
    unverified: str | None = None  # why the answer that ends the run is not verified
    interrupts: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    budget_reached: str | None = None  # a goal's budget ran out during this run

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()
