"""Long-running work outside the message list: goals, autonomous policy, heartbeats, cron,
and the resident worker.

`install(agent, ...)` wires them into an rlm.agent.Agent (duck-typed: it needs `handlers`,
`turn_hooks` and `continuations`):
- goals: bridge handlers goal.get/complete/block, per-turn token/time accounting, and the
  goal continuation (first, so a goal beats autonomous mode);
- scheduler: bridge handlers heartbeat.* and cron.* (as the agent, never the user's jobs);
- policy: the autonomous continuation (after the goal's).
"""

from __future__ import annotations

from typing import Any

from rlm.longrun.autonomous import AutonomousPolicy, Continue, RunState, Stop, attach_policy
from rlm.longrun.clock import Clock, FakeClock, SystemClock
from rlm.longrun.goals import GoalError, GoalManager, GoalState, attach_goals, current_goal
from rlm.longrun.schedule import KERNEL_METHODS as SCHEDULE_METHODS  # noqa: I001
from rlm.longrun.schedule import ScheduleError, Scheduler, Tick, parse_when

__all__ = [
    "AutonomousPolicy", "Clock", "Continue", "FakeClock", "GoalError", "GoalManager",
    "GoalState", "RunState", "ScheduleError", "Scheduler", "Stop", "SystemClock", "Tick",
    "attach_goals", "attach_policy", "current_goal", "install", "parse_when",
]  # fmt: skip


def install(
    agent: Any,
    *,
    goals: GoalManager | None = None,
    scheduler: Scheduler | None = None,
    policy: AutonomousPolicy | None = None,
    clock: Clock | None = None,
) -> None:
    if goals is not None:
        attach_goals(agent, goals)
    if scheduler is not None:
        for method in SCHEDULE_METHODS:
            agent.handlers[method] = lambda p, m=method: scheduler.handle(m, p)
    if policy is not None:
        attach_policy(agent, policy, clock)
