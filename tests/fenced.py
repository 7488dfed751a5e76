"""A scripted fenced-code model like the local one (code in ```python blocks, text
FINAL), run by an agent the composition root builds, on input files the host loads and
describes: what the model read after each reply, and how the run ended."""

from __future__ import annotations

from pathlib import Path

from rlm.agent.context_files import load_context_files
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore


class Fenced(ScriptedLLM):
    native_tools = False


def cell(code: str) -> str:
    return f"```python\n{code}\n```"


def run_fenced(home: Path, path: Path | list[Path], question: str, replies: list[str],
               max_turns: int | None = 30) -> tuple[Fenced, RunEnded, SessionStore]:
    """Run `replies` on the input file `path` (or files): the model (its `calls`: every
    message list it was sent), the run's end and its session."""
    llm = Fenced(replies)
    session = SessionStore.create(home, model="script:small", task="t")
    config = Config(home=home, model="script:small", cell_timeout=60, max_turns=max_turns)
    agent = build_agent(session, config, llm=llm)
    with agent:
        load_context_files(agent, path if isinstance(path, list) else [path])
        end = [e for e in agent.run(question) if isinstance(e, RunEnded)][-1]
    return llm, end, session


def run_on_input(home: Path, path: Path | list[Path], question: str, replies: list[str],
                 max_turns: int | None = 30) -> tuple[RunEnded, list[str]]:
    """Run `replies` on the input file `path`: the run's end, and the last message of
    each model call after the first (what the model read after each reply)."""
    llm, end, _ = run_fenced(home, path, question, replies, max_turns)
    return end, [call[-1]["content"] for call in llm.calls[1:]]
