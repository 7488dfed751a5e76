"""The agent loop and what it needs to run a session. Agents are assembled by the
composition root, `rlm.app` (`build_agent`, `run_task`)."""

from rlm.agent.loop import Agent
from rlm.agent.result import RunResult

__all__ = ["Agent", "RunResult"]
