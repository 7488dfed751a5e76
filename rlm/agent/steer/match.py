"""Stream-rule matching: pure, kernel-free, fixture-tested (tests/test_stream_rules.py).

A `ReplyScanner` is fed a model's reply as it streams. It keeps one buffer per scope: the
prose, and each fenced code block of its own (a fence opened by a line starting with three
backticks). After each delta it checks the buffers that grew against the rules that may
still fire and returns the first `Match`, which the caller turns into an abort. A native
tool call's code streams as JSON argument text: `CallArguments` decodes its `code` string
as it grows and `cell` checks it at each new line, so a hosted model's reply is stopped
mid-call too. `finish` checks every cell once the reply is whole, before any cell runs.

Code scopes are aware of code structure: a match inside a string literal or a comment does
not count (the tsforge lesson: one false positive in a string silenced every rule), unless
the rule sets `in_strings: true`. A string still open at the end of a partial buffer masks
what follows it, so a half-streamed literal never matches. File scopes (`code(*.py)`)
check cells that write a file matching the glob; their condition reads the whole cell,
strings included, since a written file's text usually is a string literal.

A rule's conditions come from files a cell can write (`.rlm/rules/`), so they are hostile
input: they run on the `regex` engine with a time bound (`RULE_TIMEOUT_S` a search). A
search that runs out of time counts as no match, and the scanner turns the rule off for
the session with one notice naming it (`ReplyScanner.take_notices`): a catastrophic
pattern costs the host a bounded time, once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from rlm.llm.types import clean_text

SCOPES = ("text", "code")
CATCH_ALL = r"[\s\S]"  # a file scope's condition when the rule is about the file alone
RULE_TIMEOUT_S = 0.05  # one search of one condition; past it the rule is off (see above)
INTERRUPTS = ("never", "prose-only", "code-only", "always")
FENCE = re.compile(r"^[ \t]*```")
# where a cell writes a file: open(NAME, 'w'/'a'/'x'), Path(NAME).write_text/bytes,
# %%writefile NAME, df.to_csv(NAME) and friends
_WRITES = (
    re.compile(r"""open\(\s*[rbuf]*(['"])(?P<name>[^'"\n]+)\1\s*,\s*[rbuf]*(['"])[^'"]*[wax]"""),
    re.compile(r"""Path\(\s*[rbuf]*(['"])(?P<name>[^'"\n]+)\1\s*\)\s*\.write_(?:text|bytes)"""),
    re.compile(r"""^%%writefile(?:\s+-a)?\s+(?P<name>\S+)""", re.M),
    re.compile(r"""\.to_\w+\(\s*[rbuf]*(['"])(?P<name>[^'"\n]+)\1"""),
)


@dataclass(frozen=True)
class StreamRule:
    """One rule as matching sees it (rlm.agent.steer.files builds them from rule files).

    `scope`: "text" (prose), "code" (every cell), or file globs, comma-separated (cells
    writing a matching file). `interrupt`: whether a match aborts the stream: never,
    prose-only, code-only, always. `repeat`: None (every time), "once" (once per session) or a gap in turns."""

    name: str
    conditions: tuple[str, ...]
    reminder: str
    scope: str = "code"
    interrupt: str = "always"
    repeat: str | int | None = None
    in_strings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_patterns", tuple(compile_condition(c) for c in self.conditions))

    @property
    def patterns(self) -> tuple[Any, ...]:
        """The conditions compiled on the `regex` engine (searched with a time bound)."""
        return self._patterns  # type: ignore[attr-defined,no-any-return]

    @property
    def file_glob(self) -> str | None:
        return None if self.scope in SCOPES else self.scope

    def interrupts_in(self, where: str) -> bool:
        """Whether a match in `where` (text | code) aborts the stream."""
        if self.interrupt == "always":
            return True
        return (self.interrupt == "prose-only" and where == "text") or \
            (self.interrupt == "code-only" and where == "code")

    def reads(self, where: str) -> bool:
        return (self.scope == "text") == (where == "text")


def compile_condition(condition: str) -> Any:
    """A rule condition on the engine that bounds its time (raises `regex.error` for a
    pattern it cannot compile)."""
    return regex.compile(condition, regex.M)


class RuleTooSlow(Exception):
    """A rule's condition ran out of time on a text (treated as no match)."""

    def __init__(self, rule: StreamRule):
        super().__init__(rule.name)
        self.rule = rule


def slow_notice(rule: StreamRule) -> str:
    where = f" ({rule.source})" if rule.source else ""
    return (f"rule {rule.name!r}{where}: its condition ran longer than {RULE_TIMEOUT_S:g} s "
            "on the reply and was stopped; the rule is off for the rest of this session "
            "(simplify the regex: nested repeats such as (a|a)+ backtrack exponentially)")


@dataclass(frozen=True)
class Match:
    rule: StreamRule
    where: str  # text | code
    found: str  # the matched text
    interrupts: bool  # the rule aborts here (else a note after the reply)


def mask_code(code: str, *, keep_strings: bool = False) -> str:
    """`code` with the insides of Python string literals and comments blanked (same length,
    newlines kept). An unterminated string or comment blanks to the end. `keep_strings`
    blanks comments only."""
    out = list(code)
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "#":
            j = code.find("\n", i)
            j = n if j < 0 else j
            _blank(out, i, j)
            i = j
        elif c in "'\"":
            quote = code[i:i + 3] if code[i:i + 3] in ("'''", '"""') else c
            j, k = i + len(quote), None
            while j < n:
                if code[j] == "\\":
                    j += 2
                    continue
                if code.startswith(quote, j):
                    k = j
                    break
                if len(quote) == 1 and code[j] == "\n":
                    k = j - 1  # an unclosed one-line string ends at the line
                    break
                j += 1
            end = n if k is None else k
            if not keep_strings:
                _blank(out, i + len(quote), end)
            i = n if k is None else k + len(quote)
        else:
            i += 1
    return "".join(out)


def _blank(out: list[str], start: int, end: int) -> None:
    for p in range(start, min(end, len(out))):
        if out[p] != "\n":
            out[p] = " "


def written_files(code: str) -> set[str]:
    """The file names a cell writes, as far as its literals say."""
    return {m.group("name") for pat in _WRITES for m in pat.finditer(code)}


def match_code(rule: StreamRule, code: str) -> str | None:
    """The first text of `code` that `rule` matches, or None (structure-aware)."""
    glob = rule.file_glob
    if glob is not None:
        globs = [g.strip() for g in glob.split(",") if g.strip()]
        written = sorted(n for n in written_files(code) for g in globs
                         if fnmatch.fnmatch(n, g) or fnmatch.fnmatch(n.rsplit("/", 1)[-1], g))
        if not written:
            return None
        found = _search(rule, mask_code(code, keep_strings=True), code)
        # what the rule is about is the file: its name is what matched (a catch-all's one
        # character, shown as "matched 'o'", said nothing)
        return None if found is None else written[0] if rule.conditions == (CATCH_ALL,) \
            else found
    return _search(rule, code if rule.in_strings else mask_code(code), code)


def match_text(rule: StreamRule, text: str) -> str | None:
    return _search(rule, text, text)


def _search(rule: StreamRule, seen: str, original: str) -> str | None:
    """The first match of a condition; raises RuleTooSlow when one runs out of time."""
    for pat in rule.patterns:
        try:
            m = pat.search(seen, timeout=RULE_TIMEOUT_S)
        except TimeoutError as e:
            raise RuleTooSlow(rule) from e
        if m is not None:
            return original[m.start():m.end()]
    return None


@dataclass
class ReplyScanner:
    """Feed a streaming reply; `feed` returns the first Match (stop feeding after it)."""

    rules: Sequence[StreamRule]
    prose: str = ""
    blocks: list[str] = field(default_factory=list)
    _line: str = ""  # the current line, not yet ended
    _in_code: bool = False
    _noted: set[str] = field(default_factory=set)  # rules whose non-interrupting match is kept
    notes: list[Match] = field(default_factory=list)  # matches that do not interrupt
    # rules whose condition ran out of time: skipped (StreamRules shares its set, so they
    # stay off for the session); their notices wait in `_said` for `take_notices`
    slow: set[str] = field(default_factory=set)
    _said: list[str] = field(default_factory=list)

    def feed(self, delta: str) -> Match | None:
        grew: set[str] = set()
        for ch in delta:  # split into lines: a fence is a whole-line marker
            self._line += ch
            if ch == "\n":
                grew.add(self._take_line())
        if self._line and not FENCE.match(self._line):
            grew.add("code" if self._in_code else "text")
        return self._check(grew)

    def cell(self, code: str) -> Match | None:
        """A native tool call's code so far (it streams as JSON arguments: CallArguments)."""
        return self._first(self._code_rules(), lambda r: match_code(r, code), "code")

    def finish(self, cells: Iterable[str] = ()) -> Match | None:
        """The reply is whole: check the tail, then `cells` that came as tool calls."""
        if self._line:
            self._take_line()
        hit = self._check({"text", "code"})
        if hit is not None:
            return hit
        for code in cells:
            hit = self.cell(code)
            if hit is not None:
                return hit
        return None

    def _take_line(self) -> str:
        line, self._line = self._line, ""
        if FENCE.match(line):
            self._in_code = not self._in_code
            if self._in_code:
                self.blocks.append("")
            return "code"
        if self._in_code:
            self.blocks[-1] += line
            return "code"
        self.prose += line
        return "text"

    def _current(self, where: str) -> str:
        tail = "" if FENCE.match(self._line) else self._line
        if where == "text":
            return self.prose + ("" if self._in_code else tail)
        if not self.blocks:
            return ""
        return self.blocks[-1] + (tail if self._in_code else "")

    def _code_rules(self) -> list[StreamRule]:
        return [r for r in self.rules if r.reads("code")]

    def _check(self, grew: set[str]) -> Match | None:
        if "text" in grew:
            prose = self._current("text")
            hit = self._first([r for r in self.rules if r.reads("text")],
                              lambda r: match_text(r, prose), "text")
            if hit is not None:
                return hit
        if "code" in grew and self.blocks:
            block = self._current("code")
            return self._first(self._code_rules(), lambda r: match_code(r, block), "code")
        return None

    def take_notices(self) -> list[str]:
        """One line per rule turned off since the last call (the caller shows them)."""
        out, self._said = self._said, []
        return out

    def _first(self, rules: list[StreamRule], find: object, where: str) -> Match | None:
        for rule in rules:
            if rule.name in self._noted or rule.name in self.slow:
                continue
            try:
                found = find(rule)  # type: ignore[operator]
            except RuleTooSlow:
                self.slow.add(rule.name)
                self._said.append(slow_notice(rule))
                continue
            if found is None:
                continue
            match = Match(rule, where, found, rule.interrupts_in(where))
            if match.interrupts:
                return match
            self._noted.add(rule.name)
            self.notes.append(match)
        return None


_CODE_KEY = re.compile(r'"code"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}


LINE_BY_LINE = 16_384  # a cell this long is given at every line's end; past it, less often


@dataclass
class CallArguments:
    """One native tool call's arguments as they stream (`{"code": "..."}` in pieces): `feed`
    returns the `code` value decoded so far when a new line of it is complete (or the string
    closed), else None, so a scanner checks a growing cell once per line, not per token
    (past LINE_BY_LINE characters, once it has grown by a quarter: linear in all).
    Each piece is decoded once (a long cell in small pieces stays linear); an escape cut by
    the end of a piece waits for the next one."""

    _tail: str = ""  # what is not decoded yet: before the key, or an escape cut in two
    _found: bool = False  # the `code` key came
    _out: list[str] = field(default_factory=list)
    _closed: bool = False
    _size: int = 0  # characters decoded
    _given: int = 0  # characters in what `feed` returned last

    def feed(self, fragment: str) -> str | None:
        if self._closed:
            return None
        self._tail += fragment
        if not self._found:
            m = _CODE_KEY.search(self._tail)
            if m is None:
                return None
            self._found, self._tail = True, self._tail[m.end():]
        before = len(self._out)
        stop, self._closed = _decode(self._tail, 0, self._out)
        self._tail = self._tail[stop:]
        self._size += sum(len(piece) for piece in self._out[before:])
        if self._closed or (before == 0 and self._out) or (
                any("\n" in piece for piece in self._out[before:]) and self._due()):
            self._given = self._size
            # a `\\udXXX` escape decodes to a surrogate: a pair is joined, a lone one is
            # U+FFFD (the code is shown and matched before the seam's cleaned reply exists)
            return clean_text("".join(self._out))
        return None

    def _due(self) -> bool:
        """A line ended: give the code again, on a long cell only once it has grown by a
        quarter since (each give joins the whole cell: per line, 300 KB took seconds)."""
        return self._size <= LINE_BY_LINE or self._size >= self._given * 5 // 4

    @property
    def closed(self) -> bool:
        """The `code` string has ended: what `feed` returned last is the whole cell."""
        return self._closed


def _decode(raw: str, i: int, out: list[str]) -> tuple[int, bool]:
    """Decode the JSON string body in `raw` from `i` into `out`: (where it stopped, whether
    the closing quote came). Stops before an escape `raw` cuts off."""
    n = len(raw)
    while i < n:
        ch = raw[i]
        if ch == '"':
            return i + 1, True
        if ch != "\\":
            j = i
            while j < n and raw[j] not in '"\\':
                j += 1
            out.append(raw[i:j])
            i = j
            continue
        if i + 1 >= n:
            break
        esc = raw[i + 1]
        if esc == "u":
            if i + 6 > n:
                break
            try:
                out.append(chr(int(raw[i + 2:i + 6], 16)))
            except ValueError:
                out.append("?")
            i += 6
            continue
        out.append(_ESCAPES.get(esc, esc))
        i += 2
    return i, False
