"""Rule files: Markdown with YAML front matter, read when an agent is built.

Where (first wins on a name clash): `$RLM_HOME/rules/*.md` (the user's), the project's
`.rlm/rules/*.md`, then, read-only so existing rules work, the project's Cursor
`.cursor/rules/**/*.mdc` and legacy `.cursorrules` (always in the context), Windsurf
`.windsurf/rules/*.md` / `.windsurfrules` and Cline `.clinerules` (a file, or a directory of
.md files). The project is the working directory.

Front matter of our own files:

    condition: read_csv\\(          # one regex or a list; a file glob (*.py) becomes a file
                                   # scope with a catch-all condition
    scope: code                    # text | code | code(*.py) (cells writing such files;
                                   # several globs: code(*.py,*.ipynb))
    interrupt: always              # never | prose-only | code-only | always
    repeat: once                   # once per session, or {gap: N} turns; default: each time
    in_strings: false              # code scopes: count matches inside strings and comments
    always: true                   # the body goes into every context (within a budget)
    description: ...               # alone: listed for the model to read on demand

The body is the reminder. A file with a problem (bad YAML, a regex that does not compile,
an unknown scope) is skipped with a line saying which file and how to fix it; the others
load. Project files are text for the model and never run anything on the host (rlm.trust:
like a working-directory rlm.toml's harmless settings they need no consent); they are read
as regular files only (no symlink, no FIFO), at most RULE_FILE_LIMIT bytes each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex
import yaml

from rlm import safeio
from rlm.agent.steer.match import CATCH_ALL, INTERRUPTS, SCOPES, StreamRule, compile_condition

RULE_FILE_LIMIT = 64_000
_GLOB = re.compile(r"[\w./*{},\-\[\]]+")
_FRONT = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)


@dataclass(frozen=True)
class Listed:
    """A rule in the context (`always`) or listed by its description for reading."""

    name: str
    text: str
    source: str


@dataclass
class RuleSet:
    stream: list[StreamRule] = field(default_factory=list)
    always: list[Listed] = field(default_factory=list)
    listed: list[Listed] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.stream or self.always or self.listed)

    def names(self) -> set[str]:
        return {r.name for r in self.stream} | {x.name for x in self.always + self.listed}


class RuleError(ValueError):
    pass


def load_rules(project: Path, home: Path) -> RuleSet:
    """Every rule file found for `project` (a directory) and the user's `home`."""
    out = RuleSet()
    for path, kind in _rule_files(project, home):
        data = _read(path, project, trusted=kind == "home")
        if data is None:
            out.problems.append(f"rule file {path} skipped: not a regular readable file "
                                "(a symlink, FIFO or unreadable); replace it with a plain file")
            continue
        try:
            _add(out, parse_rule(data, name=_name(path), source=str(path), kind=kind))
        except RuleError as e:
            out.problems.append(f"rule file {path} skipped: {e}")
    return out


def _rule_files(project: Path, home: Path) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []

    def add(folder: Path, pattern: str, kind: str) -> None:
        if folder.is_dir():
            found.extend((p, kind) for p in sorted(folder.glob(pattern)))

    add(home / "rules", "*.md", "home")
    add(project / ".rlm" / "rules", "*.md", "rlm")
    add(project / ".cursor" / "rules", "**/*.mdc", "cursor")  # nested folders too
    add(project / ".windsurf" / "rules", "*.md", "windsurf")
    for single, kind in ((project / ".cursorrules", "cursor"),
                         (project / ".windsurfrules", "windsurf"),
                         (project / ".clinerules", "cline")):
        if single.is_file():
            found.append((single, kind))
    add(project / ".clinerules", "*.md", "cline")
    return found


def _read(path: Path, project: Path, *, trusted: bool) -> str | None:
    if trusted:  # the user's own dir: a dotfile manager's symlink is fine
        try:
            raw: bytes | None = path.read_bytes()[:RULE_FILE_LIMIT]
        except OSError:
            raw = None
    else:  # the project's: nothing below it is followed (rlm.safeio)
        try:
            raw = safeio.read_bytes(project, path, RULE_FILE_LIMIT)
        except (OSError, ValueError):
            raw = None
    return None if raw is None else raw.decode("utf-8", "replace")


def _name(path: Path) -> str:
    return path.name[1:] if path.name in (".cursorrules", ".windsurfrules", ".clinerules") \
        else path.stem


def _add(out: RuleSet, parsed: tuple[StreamRule | None, Listed | None, Listed | None]) -> None:
    rule, always, listed = parsed
    taken = out.names()
    name = (rule or always or listed).name  # type: ignore[union-attr]
    if name in taken:
        return  # the user's own rule of that name wins over a project's
    if rule is not None:
        out.stream.append(rule)
    if always is not None:
        out.always.append(always)
    if listed is not None:
        out.listed.append(listed)


def parse_rule(text: str, *, name: str, source: str, kind: str = "rlm"
               ) -> tuple[StreamRule | None, Listed | None, Listed | None]:
    """(the stream rule, the always-in-context text, the on-demand listing) of one file;
    raises RuleError naming what to fix."""
    meta, body = split_front_matter(text, lenient=kind in ("cursor", "windsurf", "cline"))
    body = body.strip()
    name = str(meta.get("name") or name)
    if kind in ("cursor", "windsurf", "cline"):
        meta = _foreign(meta, kind)
    if not body:
        raise RuleError("the body (the reminder) is empty: write it below the front matter")
    conditions, scope = _conditions(meta), _scope(meta)
    if conditions and _looks_like_glob(conditions):
        scope, conditions = conditions[0], [CATCH_ALL]
    rule = None
    if conditions:
        rule = StreamRule(name=name, conditions=tuple(conditions), reminder=body, scope=scope,
                          interrupt=_interrupt(meta), repeat=_repeat(meta),
                          in_strings=bool(meta.get("in_strings", False)), source=source)
    always = Listed(name, body, source) if meta.get("always") is True else None
    desc = meta.get("description")
    listed = None
    if rule is None and always is None:
        if not isinstance(desc, str) or not desc.strip():
            raise RuleError("it has no condition, no `always: true` and no description: "
                            "give it one of them")
        listed = Listed(name, " ".join(desc.split()), source)
    return rule, always, listed


def split_front_matter(text: str, *, lenient: bool = False) -> tuple[dict[str, Any], str]:
    """(front matter, body). `lenient`: another tool's file, whose front matter is
    `key: value` lines rather than YAML (Cursor writes `globs: *.py`, which YAML reads as
    an alias and refuses): read line by line when YAML refuses it."""
    m = _FRONT.match(text.replace("\r\n", "\n"))
    if m is None:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        if lenient:
            return _key_value_lines(m.group(1)), text[m.end():]
        raise RuleError(f"its front matter is not valid YAML ({' '.join(str(e).split())[:160]})"
                        ) from e
    if not isinstance(meta, dict):
        raise RuleError("its front matter must be `key: value` lines")
    return meta, text[m.end():]


def _key_value_lines(block: str) -> dict[str, Any]:
    """`key: value` lines as Cursor and Windsurf write them: the value as text (a
    `[...]` list or true/false read as YAML when it parses so), lines without a key
    skipped."""
    meta: dict[str, Any] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key[:1].isspace():
            continue
        value = value.strip()
        if value.lower() in ("true", "false") or value.startswith("["):
            try:
                meta[key.strip()] = yaml.safe_load(value)
                continue
            except yaml.YAMLError:
                pass
        meta[key.strip()] = value.strip("\"'") or None
    return meta


def _foreign(meta: dict[str, Any], kind: str) -> dict[str, Any]:
    """Cursor / Windsurf / Cline front matter in our terms (read-only: never written)."""
    globs = meta.get("globs") or meta.get("paths")
    if isinstance(globs, str):
        globs = [g.strip() for g in globs.split(",") if g.strip()]
    trigger = meta.get("trigger")
    out: dict[str, Any] = {"description": meta.get("description")}
    plain = trigger is None and not globs and not meta.get("description")
    if meta.get("alwaysApply") is True or trigger == "always_on" or \
            (kind == "cline" and not globs) or (kind in ("windsurf", "cursor") and plain
                                               and (kind == "windsurf" or not meta)):
        out["always"] = True  # a cursor file with no front matter: legacy .cursorrules
    elif globs and trigger in (None, "glob"):
        # Cursor's "auto attached": the rule comes into the context once a session, when a
        # cell first writes such a file; it never stops a reply (nothing in the reply broke
        # it: stopping the first reply that wrote a .py file was not what the file asked)
        out.update(condition=CATCH_ALL, scope=f"code({','.join(map(str, globs))})",
                   repeat="once", interrupt="never")
    return out


def _conditions(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("condition")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(c, str) and c for c in items):
        raise RuleError("`condition` must be a regex or a list of regexes")
    if _looks_like_glob(items):
        return items
    for c in items:
        try:
            compile_condition(c)  # the engine the rule runs on (rlm.agent.steer.match)
        except regex.error as e:
            raise RuleError(f"condition {c!r} is not a valid regex ({e}); escape special "
                            "characters such as ( with a backslash") from e
    return items


def _looks_like_glob(items: list[str]) -> bool:
    """One condition that reads as a file glob (`*.py`, `src/**/*.ts`), not a regex."""
    if len(items) != 1 or "*" not in items[0] or not _GLOB.fullmatch(items[0]):
        return False
    try:
        compile_condition(items[0])
    except regex.error:
        return True
    return items[0].startswith("*") or "/*" in items[0]


def _scope(meta: dict[str, Any]) -> str:
    scope = str(meta.get("scope", "code")).strip()
    if scope in SCOPES:
        return scope
    m = re.fullmatch(r"code\((.+)\)", scope)
    if m:
        return m.group(1).strip()
    raise RuleError(f"scope {scope!r} is not one of text, code or code(GLOB) such as "
                    "code(*.py)")


def _interrupt(meta: dict[str, Any]) -> str:
    value = str(meta.get("interrupt", "always"))
    if value not in INTERRUPTS:
        raise RuleError(f"interrupt {value!r} is not one of {', '.join(INTERRUPTS)}")
    return value


def _repeat(meta: dict[str, Any]) -> str | int | None:
    value = meta.get("repeat")
    if value is None or value == "once":
        return value
    gap = value.get("gap") if isinstance(value, dict) else None
    if gap is None and isinstance(value, str):
        m = re.fullmatch(r"gap\s*:?\s*(\d+)", value.strip())
        gap = int(m.group(1)) if m else None
    if isinstance(gap, int) and not isinstance(gap, bool) and gap > 0:
        return gap
    raise RuleError(f"repeat {value!r} is not `once` or `gap: N` (N a positive number of turns)")
