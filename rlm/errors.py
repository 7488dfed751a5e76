"""Errors that say what happened and how to fix it.

Library code raises these; only the CLI turns them into exit codes. Messages name the
file, the setting or the command that fixes the problem.
"""

from __future__ import annotations

import shlex


class RlmError(Exception):
    """Base class. `str(err)` is one line a user can act on."""

    exit_code = 1


class ConfigError(RlmError):
    """Bad or missing configuration (model, flags, config file)."""

    exit_code = 2


class SessionError(RlmError):
    """A session cannot be found, loaded or written."""


class SessionCorrupt(SessionError):
    """A session file has a malformed line that is not a torn last line."""

    def __init__(self, path: str, line: int, reason: str):
        self.path, self.line, self.reason = path, line, reason
        super().__init__(
            f"{path}:{line}: malformed session entry ({reason}). Nothing was rewritten; "
            f"{_corrupt_fix(path, line)}"
        )


def _corrupt_fix(path: str, line: int) -> str:
    """What works on a corrupt log: keep the lines before the bad one (a copy first)."""
    if line <= 1:
        return "the header is unreadable, so this session cannot be opened: start a new one with `rlm run`."
    q = shlex.quote(path)
    return (f"fix that line, or keep the {line - 1} lines before it (the whole log is kept "
            f"in .bak): cp {q} {q}.bak && head -n {line - 1} {q}.bak > {q}")


class SessionGone(SessionError):
    """The session's directory (or its log) was removed while the session was open: what
    would be written next has nowhere to go."""

    def __init__(self, directory: object):
        self.directory = directory
        super().__init__(
            f"the session directory {directory} was removed while the session ran (by a cell "
            "or another process); nothing after that could be recorded. Start a new session "
            "with `rlm run`, and keep cells away from $RLM_SESSION_DIR"
        )


class KernelError(RlmError):
    """The kernel could not be started, or died in a way the caller must handle."""


class KernelDied(KernelError):
    """The kernel process exited while it was needed."""

    def __init__(self, cause: str):
        self.cause = cause
        super().__init__(f"the kernel died: {cause}")


class KernelBusy(KernelError):
    """The kernel did not answer within the timeout because a cell is still running."""


class ModelError(RlmError):
    """The model provider failed in a way that is not retried."""


class ContextOverflow(ModelError):
    """The prompt did not fit the model's context window."""


class RateLimited(ModelError):
    """Transient provider failure (rate limit, overload, timeout) after the retries ran out."""


class AuthError(ModelError):
    """The provider rejected the credentials."""

    exit_code = 2


class ScriptExhausted(ModelError):
    """A `script:` model was asked for more replies than the script holds."""


class Cancelled(RlmError):
    """The user stopped the step that was running (Ctrl-C during a gate or a compaction)."""


class LimitReached(RlmError):
    """A run limit (turns, tokens, wall clock) ended the run. Carries the partial result."""

    def __init__(self, limit: str, detail: str, partial: str | None = None):
        self.limit, self.detail, self.partial = limit, detail, partial
        super().__init__(f"{limit} limit reached: {detail}")
