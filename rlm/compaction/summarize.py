"""The one place compaction calls a model. Prompts are package data (rlm/prompts/*.md).

Every prompt path carries the user's instructions (when given) and the kernel note; a
split turn with no complete turn since the last compaction carries the previous summary
unchanged instead of replacing it (Prime loses it: "No prior history.").
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib.resources import files
from typing import Any

from rlm.compaction.plan import CompactionSettings, Preparation
from rlm.llm.types import LLM

SPLIT_HEADING = "**Turn context (split turn):**"


@cache
def load_prompt(name: str) -> str:
    """rlm/prompts/compaction_<name>.md, without trailing whitespace."""
    return (files("rlm") / "prompts" / f"compaction_{name}.md").read_text("utf-8").rstrip()


def _tail(instructions: str | None) -> str:
    out = ""
    if instructions:
        out += "\n\n" + load_prompt("instructions").replace("{instructions}", instructions.strip())
    return out + "\n\n" + load_prompt("kernel_note") + "\n\n" + load_prompt("memory_note")


def history_prompt(
    conversation: str, previous_summary: str | None, instructions: str | None
) -> str:
    """The user message for the history summary (initial or update variant)."""
    text = f"<conversation>\n{conversation}\n</conversation>\n\n"
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
        text += load_prompt("update")
    else:
        text += load_prompt("initial")
    return text + _tail(instructions)


def prefix_prompt(conversation: str, instructions: str | None) -> str:
    """The user message for a split turn's prefix: instructions and kernel note included."""
    text = f"<conversation>\n{conversation}\n</conversation>\n\n" + load_prompt("turn_prefix")
    return text + _tail(instructions)


def call_summarizer(llm: LLM, prompt: str, max_tokens: int) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": load_prompt("system")},
        {"role": "user", "content": prompt},
    ]
    return llm.complete(messages, tools=[], max_tokens=max_tokens).content.strip()


def summarize(
    prep: Preparation,
    llm: LLM,
    settings: CompactionSettings,
    instructions: str | None = None,
) -> str:
    """The summary text for `prep` (without the file lists). Raises the model's errors."""
    history_budget = int(0.8 * settings.reserve_tokens)
    prefix_budget = int(0.5 * settings.reserve_tokens)

    def history() -> str | None:
        if prep.history:
            prompt = history_prompt(prep.history_text, prep.previous_summary, instructions)
            return call_summarizer(llm, prompt, history_budget)
        return prep.previous_summary  # nothing new before the split turn: carry it as is

    if not (prep.is_split_turn and prep.turn_prefix):
        result = history()
        return result or ""
    prompt = prefix_prompt(prep.prefix_text, instructions)
    if prep.history:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlm-compact") as pool:
            hist_f = pool.submit(history)
            prefix_f = pool.submit(call_summarizer, llm, prompt, prefix_budget)
            hist, prefix = hist_f.result(), prefix_f.result()
    else:
        hist, prefix = history(), call_summarizer(llm, prompt, prefix_budget)
    if not hist:
        return f"{SPLIT_HEADING}\n\n{prefix}"
    return f"{hist}\n\n---\n\n{SPLIT_HEADING}\n\n{prefix}"
