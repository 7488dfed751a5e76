"""Conventions a user states in a prompt ("always use UTC", "revenue excludes refunds"):
pure detection, sentence by sentence. Conservative on purpose: a missed rule costs one
line the model can still write; a false one ("Never mind, just plot sales by month.")
sits in every future session's context until someone removes it.

A sentence is a standing rule when, after its discourse openers ("ok,", "never mind,")
are set aside, it

- says it lasts: "from now on", "going forward", "henceforth", "in (the) future", "by
  default", "by convention", "as a rule" — anywhere in it;
- or opens with a rule's word: "always ...", "never ..." (not "never mind"), "don't
  ever ...", "make sure to always ...", "we/you (should|must) always|never ...";
- or defines a term: "<term> excludes|includes|is defined as|always means <...>" (not a
  description of the data: "the columns include region");

and it is not scoped to now: "this time", "for now", "just this once", "today", "right
now", "for this report|run|chart|...", "instead", or an opening "just"/"now"/"then"
without a phrase that says it lasts.
"""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")  # a parenthetical describes; it sets no rule
# openers that carry no meaning of their own: "ok, ", "so ", "never mind the chart, "
_OPENER = re.compile(r"^(?:(?:ok(?:ay)?|so|also|and|but|oh|actually|well|alright)\b[,:]?\s*)+",
                     re.I)
_NEVER_MIND = re.compile(r"^(?:never\s*mind|nvm|forget (?:it|that))\b[^,;:]*(?:[,;:]\s*|$)", re.I)
# "columns include region", "the file includes 2024": a description of the data, not a rule
_DESCRIBES = re.compile(
    r"^(?:the\s+|its\s+|each\s+|every\s+)?(?:columns?|rows?|fields?|data|dataset|dataframe|"
    r"file|files|table|sheet|csv|it|this|that|there|which)\b", re.I)
_LASTS = re.compile(r"\b(?:from now on|going forward|henceforth|in (?:the )?future|by default|"
                    r"by convention|as a rule|from here on)\b", re.I)
_RULE_OPENING = re.compile(
    r"^(?:please\s+)?(?:(?:always|never)\s+\w"
    r"|(?:do not|don't) ever\s+\w"
    r"|(?:make sure|be sure|remember) to (?:always|never)\s+\w"
    r"|(?:we|you)\s+(?:(?:should|must)\s+)?(?:always|never)\s+\w)", re.I)
# "<term> excludes|includes|means|is defined as <...>"
_DEFINITION = re.compile(
    r"^[\w\s'-]{1,40}?\b(?:excludes?|includes?|always means|is defined as|should always be|"
    r"must always be|must never be|should never be)\b\s+\S", re.I)
_NOW = re.compile(r"\b(?:this time|for now|(?:just )?this once|today|tonight|right now|"
                  r"instead|for this (?:one|run|report|task|chart|plot|table|question|"
                  r"analysis|session|file|query))\b", re.I)
_ONE_OFF_OPENING = re.compile(r"^(?:just|now|then|next|first|again)\b", re.I)
MAX_RULE = 200


def _rest(sentence: str) -> str:
    """`sentence` without its openers ("ok, ", "never mind the chart, "), trimmed."""
    s = sentence.strip().strip("\"'` ").rstrip(".!;").strip()
    while True:
        t = _NEVER_MIND.sub("", _OPENER.sub("", s), count=1).strip()
        if t == s:
            return s
        s = t


def is_standing_rule(sentence: str) -> bool:
    """Does one sentence state a rule meant to last beyond this request? Pure."""
    s = _rest(sentence)
    if not s or len(s) > MAX_RULE or s.endswith("?") or _unbalanced(s):
        return False
    if _NOW.search(s):
        return False
    if _LASTS.search(s):
        return True
    if _ONE_OFF_OPENING.match(s):
        return False
    return bool(_RULE_OPENING.match(s) or (_DEFINITION.match(s) and not _DESCRIBES.match(s)))


def stated_conventions(text: str) -> list[str]:
    """The sentences of `text` that state a standing rule, as written (trimmed, openers
    such as "never mind," left out)."""
    out: list[str] = []
    for raw in _SENTENCE.split(_ASIDE.sub("", text or "")):
        if is_standing_rule(raw):
            s = _rest(raw)
            if s not in out:
                out.append(s)
    return out


def _unbalanced(s: str) -> bool:
    """A fragment cut out of a bracket (a sentence split inside one) is not a rule."""
    return s.count("(") != s.count(")") or s.count("[") != s.count("]")
