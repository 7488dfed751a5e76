"""Start a session from an existing notebook: run its code cells, record them as the opening.

`import_notebook(path, executor, session)` executes every code cell (in order, in the
session's kernel or the in-process executor) and appends ONE `notebook_import` custom
entry: `data` holds the cells ({index, code, cell: CellResult.to_dict()}) so `rlm export`
shows them as code cells with their real outputs; `content` is what the model reads (as a
user message, before the task): the cells with their shaped outputs, bounded by the output
budget, and the namespace that resulted. No synthetic tool calls: the model did not write
this code, and the transcript should not say it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

from rlm.config import DEFAULT_OUTPUT_BUDGET_CHARS
from rlm.errors import RlmError
from rlm.kernel.types import CellResult
from rlm.protocols import Executor, SessionLog
from rlm.session.entries import CustomEntry

_SKIP_PREFIXES = ("%%rlm", "%load_ext rlm")  # the magic belongs to the notebook's own kernel


class NotebookCellFailed(RlmError):
    """A cell of an imported notebook failed and `strict` was asked for."""


def import_notebook(path: str | Path, executor: Executor, session: SessionLog, *,
                    strict: bool = False, timeout: float | None = None) -> list[CellResult]:
    """Run the notebook's code cells into `executor`; record them in `session`.

    Failing cells are reported (and recorded), not fatal, unless `strict`: then the import
    stops at the first failure, records what ran, and raises NotebookCellFailed.
    """
    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as e:
        raise RlmError(f"cannot read notebook {path}: {e}") from e
    cells: list[dict[str, Any]] = []
    results: list[CellResult] = []
    failed: CellResult | None = None
    for index, cell in enumerate(nb.cells):
        code = cell.source if cell.cell_type == "code" else ""
        if not code.strip() or code.lstrip().startswith(_SKIP_PREFIXES):
            continue
        res = executor.execute(code, timeout=timeout)
        results.append(res)
        cells.append({"index": index, "code": code, "cell": res.to_dict()})
        if not res.ok and strict:
            failed = res
            break
    content = describe_import(path, cells, _namespace(executor), _budget(executor))
    session.append(CustomEntry(custom_type="notebook_import", display=True, content=content,
                               data={"path": str(path), "cells": cells}))
    if failed is not None:
        raise NotebookCellFailed(
            f"{path}: cell {cells[-1]['index'] + 1} failed ({failed.status}): "
            f"{failed.shaped.strip().splitlines()[-1] if failed.shaped.strip() else ''}; "
            "fix the notebook or run without --strict")
    return results


def describe_import(path: Path, cells: list[dict[str, Any]], names: list[dict[str, Any]],
                    budget: int) -> str:
    """The text the model reads for an import: cells, shaped outputs, resulting namespace."""
    from rlm.kernel.shaping import shape

    bad = sum(1 for c in cells if c["cell"].get("status") != "ok")
    head = (f"Before this task, the user's notebook `{path.name}` was run in the kernel: "
            f"{len(cells)} code cell(s), {bad} failed. Its variables are in the namespace; "
            "reuse them instead of recomputing.\n")
    body = []
    for c in cells:
        res = c["cell"]
        status = "" if res.get("status") == "ok" else f" ({res.get('status')})"
        out = (res.get("shaped") or "").strip() or "(no output)"
        body.append(f"\nNotebook cell [{c['index'] + 1}]{status}:\n```python\n"
                    f"{c['code'].rstrip()}\n```\nOutput:\n{out}\n")
    listing = "".join(f"\n- {n.get('name')}: {n.get('type', '')}" for n in names)
    tail = f"\nNamespace after the notebook:{listing or ' (no user variables)'}\n"
    shaped, _ = shape("".join(body), max(budget - len(head) - len(tail), 1000))
    return head + shaped + tail


def _namespace(executor: Executor) -> list[dict[str, Any]]:
    try:
        return list(executor.list_namespace(timeout=5.0).get("names", []))
    except Exception:  # noqa: BLE001 - the listing is a courtesy; the import itself worked
        return []


def _budget(executor: Executor) -> int:
    config = getattr(executor, "config", None)
    return config.output_budget() if config is not None else DEFAULT_OUTPUT_BUDGET_CHARS
