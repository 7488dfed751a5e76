"""`&` and `|` bind tighter than comparisons: a pandas filter written without parentheses.

`df[df['origin'] == 'EWR' & df['precip'] > 0]` is Python's `df['origin'] == ('EWR' &
df['precip']) > 0`: a TypeError (or "the truth value of a Series is ambiguous"), or, with
numbers, a mask that silently selects the wrong rows. The 1.5B default model wrote it on
the everyday suite (bench/everyday.py), read the TypeError as "convert the columns to
bool", and answered 1,749 for 596.

`precedence_note(code)` finds it in the cell's syntax tree, not its spelling: a comparison
one of whose operands is a `&`/`|` operation (the parser already grouped it the wrong
way). The note is appended to the cell's result, failed or not (rule MaskPrecedence).
"""

from __future__ import annotations

import ast

NOTE = ("\n[In Python `&` and `|` bind tighter than `==`, `<`, `>`: `{code}` means "
        "`{grouped}`. Put each comparison in parentheses: "
        "`(df['a'] == 'x') & (df['b'] > 0)`.]")


def _line_starts(code: bytes) -> list[int]:
    """The byte offset of each line (the parser's columns count UTF-8 bytes)."""
    starts, n = [0], 0
    for line in code.splitlines(keepends=True):
        n += len(line)
        starts.append(n)
    return starts


def _bare_masks(node: ast.Compare, code: bytes, starts: list[int]) -> list[ast.BinOp]:
    """The operands of `node` that are `&`/`|` operations the writer did not parenthesise
    (`(a & b) == c` is meant; `a == 'x' & b` is not)."""
    out = []
    for x in (node.left, *node.comparators):
        if not (isinstance(x, ast.BinOp) and isinstance(x.op, (ast.BitAnd, ast.BitOr))):
            continue
        if x.end_lineno is None or x.end_col_offset is None:
            continue
        start = starts[x.lineno - 1] + x.col_offset
        end = starts[x.end_lineno - 1] + x.end_col_offset
        if code[:start].rstrip().endswith(b"(") and code[end:].lstrip().startswith(b")"):
            continue  # parenthesised (or a call's only argument): as written
        out.append(x)
    return out


def _grouped(node: ast.Compare, bare: list[ast.BinOp]) -> str:
    """`node` with the grouping Python gave it spelled out: `a == ('x' & b) > 0`."""
    ops = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
           ast.GtE: ">=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}

    def part(x: ast.expr) -> str:
        text = ast.unparse(x)
        return f"({text})" if x in bare else text

    out = part(node.left)
    for op, right in zip(node.ops, node.comparators, strict=True):
        out += f" {ops.get(type(op), '?')} {part(right)}"
    return out


def precedence_note(code: str) -> str | None:
    """The note for the first comparison grouped around a `&`/`|` in `code`, or None."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    raw = code.encode("utf-8", "surrogatepass")
    starts = _line_starts(raw)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and (bare := _bare_masks(node, raw, starts)):
            text = ast.get_source_segment(code, node) or ast.unparse(node)
            return NOTE.format(code=" ".join(text.split())[:120],
                               grouped=_grouped(node, bare)[:160])
    return None
