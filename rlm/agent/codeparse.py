"""Turn a model reply into python tool calls.

Models with native tool calling send `python(code)` calls. Others (small local models)
write fenced code blocks; this module turns those into the same `ToolCall`s, and finds a
text `FINAL(...)` answer for models that cannot call `final()` from the kernel.

Forgiving by design: ```python, ```py, ```ipython and bare ``` fences all count when their
body looks like code; an unterminated last fence still runs (small models get cut off by
max_tokens); a FINAL(...) written in the same reply as code is ignored, because the model
has not seen that code's output yet. A fence holding nothing but FINAL(...) is an answer
written in the wrong place, not a cell (the 1.5B model does this).

Only the reply's own turn counts: a model that writes fenced code may go on to invent the
next turn (a fake "User:" message, made-up "Output of cell [k]:"), and providers that ignore
the stop strings send it; `own_turn` cuts it off before any code or FINAL is read.

`reply_end` is where a fenced-code reply stops being worth generating: after the first
block that surely shows something (a top-level print, or a last line that is a value), or
before a block that repeats an earlier one. A later block would only run had the earlier
printed nothing (rlm.agent.cells), and a FINAL next to code is ignored, so the rest is
dead text: the model call stops there (rlm.agent.modelcall), which saves its seconds.

`overwritten_inputs` finds cells that replace an input variable with a literal: small
models retype a preview of the data instead of using the variable they were given.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Mapping

from rlm.llm.types import TURN_STOPS, ToolCall

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_CODE_LANGS = {"python", "py", "python3", "ipython", "repl", ""}
# FINAL, or Final as small models also write it (lower-case final() is the kernel's API)
_FINAL = re.compile(r"(?:FINAL|Final)\((.*)\)\s*$", re.S)
_FINAL_VAR = re.compile(r"(?:FINAL_VAR|Final_var|Final_Var)\(\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*\)")
_FINAL_ONLY = re.compile(r"\s*(?:FINAL|Final)(_VAR|_var|_Var)?\(.*\)\s*$", re.S)
_FINAL_OPEN = re.compile(r"(?:FINAL|Final)\(")


def _looks_like_code(body: str) -> bool:
    stripped = body.strip()
    if not stripped:
        return False
    try:
        compile(stripped, "<fence>", "exec")
        return True
    except SyntaxError:
        # IPython magics and shell escapes are not Python but are still cells.
        return stripped.startswith(("%", "!"))


def own_turn(text: str) -> str:
    """`text` up to where the model starts writing an invented next turn (TURN_STOPS)."""
    cut = min((i for i in (text.find(s) for s in TURN_STOPS) if i >= 0), default=len(text))
    return text[:cut]


def fenced_blocks(text: str) -> list[str]:
    """Code bodies of the fenced blocks in the reply's own turn, in order."""
    return [m.group(2).rstrip() + "\n" for m in _FENCE.finditer(own_turn(text)) if _is_cell(m)]


def _is_cell(m: re.Match[str]) -> bool:
    """A fence match is a cell: a code language (or a bare fence whose body is code), a
    body, and not only a FINAL(...)."""
    lang, body = m.group(1).lower(), m.group(2)
    return (lang in _CODE_LANGS and bool(lang or _looks_like_code(body)) and bool(body.strip())
            and not _FINAL_ONLY.match(body))


def code_tool_calls(text: str) -> list[ToolCall]:
    """Synthetic python tool calls for the fenced blocks in a reply."""
    return [
        ToolCall(id=f"fenced_{uuid.uuid4().hex[:10]}", name="python", arguments={"code": b},
                 synthetic=True)
        for b in fenced_blocks(text)
    ]


_SHOWS = {"print", "display"}


def surely_shows(code: str) -> bool:
    """Whether running `code` shows something whatever the data: it fails to parse (the
    error shows), a top-level statement prints, or its last line is a value that is not a
    call (a call may return None: `df.to_csv(...)`)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return True
    for stmt in body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                and call.func.id in _SHOWS:
            return True
    return bool(body) and isinstance(body[-1], ast.Expr) \
        and not isinstance(body[-1].value, ast.Call)


def _shape(code: str) -> str:
    """The code without its layout and comments, for comparing blocks."""
    try:
        return ast.dump(ast.parse(code))
    except SyntaxError:
        return " ".join(code.split())


def reply_end(text: str) -> int | None:
    """Where a fenced-code reply's useful part ends (an index into `text`), or None while
    it may still matter: the end of the first closed code block that surely shows output,
    or the start of a closed block whose code an earlier block of the reply already had."""
    seen: set[str] = set()
    for m in _FENCE.finditer(own_turn(text)):
        if not m.group(0).endswith("```"):
            return None  # still open: its end is not written yet
        if not _is_cell(m):
            continue
        body = m.group(2)
        same = _shape(body)
        if same in seen:
            return m.start()
        seen.add(same)
        if surely_shows(body):
            return m.end()
    return None


def text_final(text: str) -> tuple[str, str] | None:
    """A FINAL(answer) or FINAL_VAR(name) written as text, outside code fences.

    Returns ("answer", text) or ("var", name), or None.
    """
    text = own_turn(text)
    outside = _FENCE.sub(lambda m: m.group(2) if _FINAL_ONLY.match(m.group(2)) else "", text)
    m = _FINAL_VAR.search(outside)
    if m:
        return ("var", m.group(1))
    opens = list(_FINAL_OPEN.finditer(outside))
    if not opens:
        return None
    idx = opens[-1].start()
    m = _FINAL.match(outside[idx:].strip())
    if not m:
        # FINAL( without a closing paren at the end: take the rest of the line.
        rest = outside[opens[-1].end():].split("\n", 1)[0]
        return ("answer", rest.rstrip(") ").strip())
    answer = m.group(1).strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'":
        answer = answer[1:-1]
    return ("answer", answer)


def _is_literal(node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.JoinedStr)):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is None or _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values)
    return False


# a top-level line that starts binding a name to a text literal (`audit = "2025-01-01 ...`)
_TEXT_START = re.compile(r"""^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[ \t]*[rRbBuU]{0,2}['"]""", re.M)


def overwritten_inputs(code: str, inputs: set[str],
                       previews: Mapping[str, str] | None = None) -> list[str]:
    """Input variable names that a top-level statement of `code` binds to a literal value,
    except a literal whose repr is the whole preview the model was shown (`previews`: a
    short input retyped in full is the same value; a cut preview never matches). A cell
    that does not parse counts a top-level line binding an input to a text literal: the
    task suite's 1.5B model retyped an audit log into `audit = "...` until its token limit
    cut the string, and read the SyntaxError that echoed it back."""
    if not inputs:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a retyped text cut off by the token limit does not parse
        return list(dict.fromkeys(m.group(1) for m in _TEXT_START.finditer(code)
                                  if m.group(1) in inputs))
    hit: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        if _is_literal(value):
            same = _literal_repr(value)
            hit += [t.id for t in targets if isinstance(t, ast.Name) and t.id in inputs
                    and (same is None or (previews or {}).get(t.id) != same)]
    return list(dict.fromkeys(hit))


def _literal_repr(node: ast.expr) -> str | None:
    try:
        return repr(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


_CELL_LINE = re.compile(r"^(?:Cell In\[\d+\]|Input In \[\d+\]|File \"<ipython-input-[^>]*>\"), line (\d+)", re.M)


def failed_line(shaped: str) -> int | None:
    """The line of the cell its traceback points at (the cell's own frame, IPython's
    `Cell In[n], line k`); None when it names none."""
    m = _CELL_LINE.search(shaped or "")
    return int(m.group(1)) if m else None


def ran_before_error(code: str, shaped: str) -> str:
    """The top-level statements of a failed cell that ended before the line its
    traceback points at (`failed_line`): the part that ran. "" when the cell does not
    parse or the traceback names no line."""
    line = failed_line(shaped)
    if line is None:
        return ""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    lines = code.splitlines(keepends=True)
    ran = [s for s in tree.body if (s.end_lineno or s.lineno) < line]
    return "".join(lines[:ran[-1].end_lineno]) if ran else ""
