"""The agent loop and what it needs to run a session."""

from rlm.agent.loop import Agent, run_task
from rlm.agent.session_run import RunResult

__all__ = ["Agent", "RunResult", "run_task"]
