"""Prompts are package data (rlm/prompts/*.md), reviewed like code."""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources

from rlm.config import Config


@cache
def load_prompt(name: str) -> str:
    return resources.files("rlm.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")


def system_prompt(config: Config, *, native_tools: bool, role: str = "") -> str:
    """The system prompt for the session's model; `role` follows it (a child's: who it
    is and how it reports, rlm.agent.children.child_role), so no compaction summarises it.

    Models without native tool calling (small local models) get the fenced-code variant
    with one worked example (rlm/prompts/system_small.md), which they need to behave; with
    project memory on, one rule line says what its message is (a tool-calling model reads
    that in the memory block's own guide, which the small model gets only when something
    is recorded: rlm.memory.head).
    """
    max_turns = config.max_turns if config.max_turns is not None else "unlimited"
    return _render("system" if native_tools else "system_small", config.output_budget(),
                   int(config.cell_timeout), max_turns, role, bool(config.memory))


@lru_cache(maxsize=64)  # asked for each projection, several times a step
def _render(name: str, output_budget: int, cell_timeout: int, max_turns: int | str,
            role: str, memory: bool = False) -> str:
    try:
        text = load_prompt(name)
    except FileNotFoundError:
        text = load_prompt("system")
    note = "\n" + load_prompt("memory_small").strip() if memory else ""
    return text.format_map(
        _Defaults(output_budget=output_budget, cell_timeout=cell_timeout, max_turns=max_turns,
                  memory_note=note)
    ) + (f"\n\n{role}" if role else "")


class _Defaults(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"
