"""Manual compaction of a stored session: `rlm compact SESSION` (no kernel runs). `/compact`
in chat, with the live kernel, is `rlm.app.compact_now`."""

from __future__ import annotations

from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import effective_settings
from rlm.config import Config
from rlm.errors import ConfigError
from rlm.protocols import SessionLog
from rlm.session.entries import CompactionEntry


def compact_session(
    session: SessionLog, config: Config, *, instructions: str | None = None
) -> CompactionEntry | None:
    """Compact a stored session between runs. No kernel runs, so no `<ipython_state>`:
    the next run's restore notice says what came back."""
    from rlm.llm import get_llm

    spec = config.compaction_model or config.model or session.header.model
    if not spec:
        raise ConfigError("No model to write the summary: pass --model or set RLM_COMPACTION_MODEL")
    llm = get_llm(spec, config)
    return perform_compaction(
        session,
        llm,
        effective_settings(config, config.context_window or llm.context_window()).settings,
        trigger="manual",
        instructions=instructions,
    )
