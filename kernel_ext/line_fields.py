"""What a line-structured text holds, before the first cell: the words at each position of
its lines that take few values (a log's level, its service), as a table's columns do.

A log read as one string was described by its size and first 160 characters; the 1.5B
model then counted every `word:` of every line as a service and never filtered on the
level the question named (bench/longrun.py, task logs: `'ERROR'` in no cell, the goal
completed with 100 wrong lines). One line per such position names its values, so the
model can filter with them, and the host can tell which of them a question states as a
condition (rlm.agent.policy.conditions reads these lines like column lines).

Words are split on whitespace; position k is `line.split()[k]`, listed as such (Python's
own spelling, 0-based) with its values exactly as the lines spell them (`'[ERROR]'`,
`'billing:'`). A position is described when at least COVER of the non-blank lines have
it takes at most `MAX_LEVELS` values, each on four lines or more on average, and at
least 2 of them are each on MIN_SHARE of its lines (only those are listed, the rest
counted), printable, with a letter or digit;
prose (many first words) and ids (many values) get no line. Bounded: a text past SAMPLE_CHARS is read on SAMPLE_CHUNKS evenly spaced chunks
(the same on every run) and says "in the sample"; never raises.
"""

from __future__ import annotations

from collections import Counter

from kernel_ext.columns import MAX_LEVELS, _join, _literal

MIN_LINES = 20  # fewer non-blank lines: not described by position
MAX_POSITIONS = 12  # positions looked at, from the first word
COVER = 0.9  # share of the non-blank lines that must have the position
# a value on fewer of the lines is not listed (a needle's one line is not a level: "what
# badge did Ilse get" named 'badge', a word of one line in 3,001, as a condition)
MIN_SHARE = 0.005
SAMPLE_CHARS = 4_000_000  # a longer text is read on chunks
SAMPLE_CHUNKS = 8
KIND = "line word"  # the dtype column-line readers know a line position by


def _sample(text: str) -> tuple[list[str], bool]:
    """The lines read, and whether they are all of them."""
    if len(text) <= SAMPLE_CHARS:
        return text.splitlines(), True
    size = SAMPLE_CHARS // SAMPLE_CHUNKS
    step = (len(text) - size) // (SAMPLE_CHUNKS - 1)
    lines: list[str] = []
    for i in range(SAMPLE_CHUNKS):
        chunk = text[i * step:i * step + size].splitlines()
        lines.extend(chunk[1:-1])  # the first and last are cut
    return lines, False


def _wordlike(word: str) -> bool:
    """A value to filter with: printable, with a letter or digit (not binary noise)."""
    return word.isprintable() and any(c.isalnum() for c in word)


def field_lines(text: str) -> list[str]:
    """`  split()[1] (line word): 4 values: '[INFO]', '[DEBUG]', '[WARN]', '[ERROR]'`, one
    per position with few values, in position order; [] for a text without them."""
    try:
        return _field_lines(text)
    except Exception:  # noqa: BLE001 - a description never fails the listing
        return []


def _field_lines(text: str) -> list[str]:
    lines, exact = _sample(text)
    rows = [ln.split() for ln in lines if ln.strip()]
    if len(rows) < MIN_LINES:
        return []
    out = []
    for pos in range(MAX_POSITIONS):
        words = [r[pos] for r in rows if len(r) > pos]
        if len(words) < COVER * len(rows):
            break
        counts = Counter(words)
        if len(counts) > MAX_LEVELS or len(counts) > len(words) // 4:
            continue  # many values (an id, a time), or too few repeats to call levels
        levels = [w for w, n in counts.most_common() if n >= MIN_SHARE * len(words)]
        if len(levels) < 2 or not all(_wordlike(w) for w in levels):
            continue
        where = "" if exact else " in the sample"
        rare = len(counts) - len(levels)
        more = f", +{rare} rarer" if rare else ""
        out.append(_join(f"  split()[{pos}] ({KIND}): {len(levels)} values{where}: ",
                         [_literal(w) for w in levels], 0) + more)
    return out
