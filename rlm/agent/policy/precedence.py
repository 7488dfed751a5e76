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

from rlm.agent.rewrites import Splice, bare_masks

NOTE = ("\n[In Python `&` and `|` bind tighter than `==`, `<`, `>`: `{code}` means "
        "`{grouped}`. Put each comparison in parentheses: "
        "`(df['a'] == 'x') & (df['b'] > 0)`.]")


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
    sp = Splice(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and (bare := bare_masks(node, sp)):
            text = ast.get_source_segment(code, node) or ast.unparse(node)
            return NOTE.format(code=" ".join(text.split())[:120],
                               grouped=_grouped(node, bare)[:160])
    return None
