"""Long-running work outside the message list: goals, autonomous policy, heartbeats, cron,
and the resident worker.

`install(agent, ...)` wires them into an agent (`rlm.protocols.LoopHost`: `handlers` and
the policy chain, rlm.chain; rlm.agent.Agent implements it):
- goals: bridge handlers goal.get/complete/block, per-turn token/time accounting, and the
  goal continuation (first, so a goal beats autonomous mode);
- scheduler: bridge handlers heartbeat.* and cron.* (as the agent, never the user's jobs);
- policy: the autonomous continuation (after the goal's).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from rlm.chain import LoopHost
from rlm.longrun.autonomous import AutonomousPolicy, Continue, RunState, Stop, attach_policy
from rlm.longrun.clock import Clock, FakeClock, SystemClock
from rlm.longrun.goals import (
    CompletionJudge,
    GoalError,
    GoalManager,
    GoalState,
    attach_goals,
    current_goal,
)
from rlm.longrun.schedule import KERNEL_METHODS as SCHEDULE_METHODS  # noqa: I001
from rlm.longrun.schedule import ScheduleError, Scheduler, Tick, parse_when
from rlm.protocols import Handler

__all__ = [
    "AutonomousPolicy", "Clock", "Continue", "FakeClock", "GoalError", "GoalManager",
    "GoalState", "RunState", "ScheduleError", "Scheduler", "Stop", "SystemClock", "Tick",
    "attach_goals", "attach_policy", "current_goal", "install", "parse_when",
]  # fmt: skip


def install(
    agent: LoopHost,
    *,
    goals: GoalManager | None = None,
    scheduler: Scheduler | None = None,
    policy: AutonomousPolicy | None = None,
    clock: Clock | None = None,
    judge: CompletionJudge | None = None,
    handlers: MutableMapping[str, Handler] | None = None,
) -> None:
    """`handlers`: where the bridge handlers go (default the agent's own table)."""
    table = agent.handlers if handlers is None else handlers
    if goals is not None:
        attach_goals(agent, goals, judge, table)
    if scheduler is not None:
        for method in SCHEDULE_METHODS:
            table[method] = _schedule_handler(scheduler, method)
    if policy is not None:
        attach_policy(agent, policy, clock)


def _schedule_handler(scheduler: Scheduler, method: str) -> Callable[[dict[str, Any]], Any]:
    return lambda p: scheduler.handle(method, p)
