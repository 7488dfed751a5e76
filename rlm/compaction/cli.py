"""Manual compaction: `rlm compact SESSION` (no kernel) and `/compact` in chat (live kernel)."""

from __future__ import annotations

from typing import Any

from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import CompactionSettings
from rlm.config import Config
from rlm.errors import ConfigError
from rlm.session.entries import CompactionEntry


def compact_session(
    session: Any, config: Config, *, instructions: str | None = None
) -> CompactionEntry | None:
    """Compact a stored session between runs. No kernel runs, so no `<ipython_state>`:
    the next run's restore notice says what came back."""
    from rlm.llm import get_llm

    spec = config.compaction_model or config.model or getattr(session.header, "model", "")
    if not spec:
        raise ConfigError("No model to write the summary: pass --model or set RLM_COMPACTION_MODEL")
    return perform_compaction(
        session,
        get_llm(spec, config),
        CompactionSettings.from_config(config),
        trigger="manual",
        instructions=instructions,
    )


def compact_now(agent: Any, instructions: str | None = None) -> CompactionEntry | None:
    """`/compact` between turns of a chat: the live kernel is listed, never touched."""
    ctl = getattr(agent, "compaction", None)  # set by rlm.agent.attach (a higher layer)
    return perform_compaction(
        agent.session,
        ctl.llm if ctl is not None else agent.llm,
        CompactionSettings.from_config(agent.config),
        trigger="manual",
        instructions=instructions,
        kernel=agent.executor,
    )
