"""Conventions a user states in a prompt ("always use UTC", "revenue excludes refunds"):
pure detection, sentence by sentence. Conservative on purpose: a missed rule costs one
line the model can still write; a false one sits in every context until removed."""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")  # a parenthetical describes; it sets no rule
# "columns include region", "the file includes 2024": a description of the data, not a rule
_DESCRIBES = re.compile(
    r"^(?:the\s+|its\s+|each\s+|every\s+)?(?:columns?|rows?|fields?|data|dataset|dataframe|"
    r"file|files|table|sheet|csv|it|this|that|there|which)\b", re.I)
_RULE = re.compile(
    r"^(?:please\s+)?(?:(?:from now on|going forward|by convention|as a rule)\b[,:]?\s*\S"
    r"|(?:always|never)\s+\w"
    r"|(?:do not|don't) ever\s+\w"
    r"|(?:make sure to|be sure to) always\s+\w)", re.I)
# "<term> excludes|includes|means|is defined as <...>"
_DEFINITION = re.compile(
    r"^[\w\s'-]{1,40}?\b(?:excludes?|includes?|always means|is defined as|should always be|"
    r"must always be|must never be|should never be)\b\s+\S", re.I)
MAX_RULE = 200


def stated_conventions(text: str) -> list[str]:
    """The sentences of `text` that state a standing rule, as written (trimmed)."""
    out: list[str] = []
    for raw in _SENTENCE.split(_ASIDE.sub("", text or "")):
        s = raw.strip().strip("\"'` ").rstrip(".!;").strip()
        if not s or len(s) > MAX_RULE or s.endswith("?") or _unbalanced(s):
            continue
        if _RULE.match(s) or (_DEFINITION.match(s) and not _DESCRIBES.match(s)):
            if s not in out:
                out.append(s)
    return out


def _unbalanced(s: str) -> bool:
    """A fragment cut out of a bracket (a sentence split inside one) is not a rule."""
    return s.count("(") != s.count(")") or s.count("[") != s.count("]")
