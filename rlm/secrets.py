"""Keeping secrets out of what rlm writes.

`secret_values()` are the values of environment variables whose names look secret
(…_KEY, …_TOKEN, …_SECRET, …_PASSWORD): the session store replaces them in every line it
appends, so even a cell that manages to print a key (e.g. from /proc/<ppid>/environ)
does not put it on disk. Exports also replace well-known key *patterns*
(`redact_text(..., patterns=True)`); the log does not, so real data is never mangled by a
false match.
"""

from __future__ import annotations

import os
import re

REDACTED = "[redacted]"
SECRET_ENV_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD", "_APIKEY")
MIN_SECRET_LEN = 8
SECRET_PATTERNS = re.compile(
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"  # OpenAI / Anthropic
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gsk_[A-Za-z0-9]{30,}"  # Groq
)


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of env vars whose names look secret, longest first."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items()
            if k.upper().endswith(SECRET_ENV_SUFFIXES) and len(v) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def redact_text(text: str, secrets: list[str], *, patterns: bool = True) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return SECRET_PATTERNS.sub(REDACTED, text) if patterns else text
