"""One parse and one walk of a cell (kernel_ext.cell_syntax): the same nodes in the same
order as ast.walk and ast.iter_child_nodes, over every construct the standard library
uses, so what reads the nodes (the touched names, the replay record) sees no difference."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import typing
from pathlib import Path

from kernel_ext import cell_syntax
from kernel_ext.lineage import cell_record
from kernel_ext.namespace import cell_names, names_in


def test_walk_and_children_give_what_ast_gives():
    sources = [Path(m.__file__).read_text() for m in (ast, asyncio.tasks, dataclasses, json.decoder, typing)]
    sources.append("match p:\n    case {'k': [x, *rest], **kw} if x: pass\nf = lambda *a, k=1, **b: (yield)\n"
                   "async def g():\n    async with a as b:\n        return [i async for i in b]\n"
                   "print(f'{x!r:>{w}}')\n")
    for src in sources:
        tree = ast.parse(src)
        nodes = cell_syntax.walk(tree)
        assert nodes == list(ast.walk(tree))
        for node in nodes[:2000]:
            assert cell_syntax.children(node) == list(ast.iter_child_nodes(node))


def test_one_parse_serves_the_names_and_the_record():
    code = "import pandas as pd\ndf = pd.read_csv('s.csv')\ng = [r for r in df.region]\ndel old"
    parsed = cell_syntax.parse(code)
    assert parsed is not None
    a, b = names_in(parsed), cell_names(code)
    assert (a.names, a.deleted, a.full) == (b.names, b.deleted, b.full)
    assert cell_record(code, {}, parsed) == cell_record(code, {})
    assert cell_syntax.parse("x = (") is None and names_in(None).full
