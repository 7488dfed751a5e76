"""An injectable clock, so schedules and budgets are testable without real sleeps.

Times are POSIX seconds (float). Wall-clock calendars (cron, ISO times) are read in the
local time zone from these seconds; see rlm.longrun.schedule.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to: `sleep` and `advance` add to the time."""

    def __init__(self, start: float | datetime = 1_750_000_000.0):
        self.t = start.timestamp() if isinstance(start, datetime) else float(start)
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> float:
        if seconds > 0:
            self.t += seconds
        return self.t

    def set(self, when: float | datetime) -> None:
        self.t = when.timestamp() if isinstance(when, datetime) else float(when)


def iso(ts: float) -> str:
    """A local-time ISO string with offset, to the second, for humans and files. A time
    that no datetime can hold (a jobs file written before schedules were bounded) shows as
    its raw number instead of crashing every listing."""
    try:
        return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"{ts:.0f} (out of range)"
