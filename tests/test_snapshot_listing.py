"""One describer for every listing: per-name summaries the model can reuse without a cell
(shape, columns and dtypes, lengths and element types, signatures, classes), largest and
most recently used first, and a count of what does not fit the budget."""

from __future__ import annotations

import json

import pytest

from kernel_ext import snapshot
from kernel_ext.describe import listing_lines, summary
from rlm.kernel.state import snapshot_names
from tests.snapshot_shell import run  # the `shell` fixture comes from conftest


def test_summaries_carry_what_reuse_needs():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"region": [3], "amount": [1.5]})
    assert summary(df) == "DataFrame 1 rows x 2 cols: region int64, amount float64"
    assert summary(np.zeros((3, 4), dtype=np.float32)) == "ndarray shape (3, 4) float32"
    assert summary([1, "a"]) == "list of 2 int|str"
    assert summary({"a": [1]}) == "dict of 1: str -> list; keys 'a'"

    def fit(x, *, alpha=0.1):
        return x

    assert summary(fit) == "function test_summaries_carry_what_reuse_needs.<locals>.fit(x, *, alpha=0.1)"

    class Model:
        def __init__(self):
            self.coef = 1

    Model.__module__, Model.__qualname__ = "__main__", "Model"  # as if defined in the kernel
    assert summary(Model()) == "Model instance; attributes coef"


def test_namespace_listing_orders_and_counts(shell):
    run(shell, "import numpy as np\nbig = np.zeros(1_000_000)\n"
               + "\n".join(f"small{i} = [{i}]" for i in range(50)))
    run(shell, "small7 = [70]\nalias = small7")
    names = json.loads(snapshot.namespace_json(shell))["names"]
    assert names[0]["name"] == "big" and names[0]["summary"] == "ndarray shape (1000000,) float64"
    small = [n["name"] for n in names if n["name"].startswith(("small", "alias"))]
    assert small[:2] == ["alias", "small7"]  # most recently used first among equals
    by = {n["name"]: n for n in names}
    assert by["small7"]["shares"] == ["alias"]
    lines = listing_lines(names, budget_tokens=60)
    assert lines[0].startswith("- big: ndarray shape (1000000,) float64, 7.6 MB")
    shown = len(lines) - 1
    assert lines[-1] == f"- ... and {len(names) - shown} more names (print(dir()) to see all)"


def test_rlm_state_from_snapshot_has_summaries(shell, tmp_path):
    run(shell, "rows = list(range(10))\nview = {'r': rows}")
    names = {n["name"]: n for n in snapshot_names(tmp_path / "session")}
    assert names["rows"]["summary"] == "list of 10 int" and names["rows"]["shares"] == ["view"]
    assert names["view"]["summary"] == "dict of 1: str -> list; keys 'r'"


def test_host_notices_print_the_kernel_summaries_within_budget():
    from rlm.agent.notices import restore_lines
    from rlm.compaction.notes import format_ipython_state
    from rlm.kernel.types import RestoreReport

    frame = "DataFrame 1,000,000 rows x 3 cols: id int64, amount float64, region category"
    names = [{"name": f"v{i}", "type": "list", "bytes": 100, "restorable": True, "reason": None,
              "summary": "list of 3 int", "last_used": i} for i in range(400)]
    names.append({"name": "sales", "type": "DataFrame", "bytes": 24_000_000, "restorable": True,
                  "reason": None, "summary": frame, "last_used": 1})
    lines = format_ipython_state(names, []).splitlines()
    assert lines[2] == "Defined names (401):"
    assert lines[3] == f"- sales: {frame}, 22.9 MB"
    assert lines[4] == "- v399: list of 3 int, 100 B"  # then the most recently used
    shown = sum(line.startswith("- v") for line in lines)
    assert 10 < shown < 400
    assert f"- ... and {400 - shown} more names (print(dir()) to see all)" in lines

    rep = RestoreReport(restored=["sales", "v1"], snapshot_found=True,
                        summaries={"sales": frame, "v1": "list of 3 int"})
    assert restore_lines(rep)[:3] == [
        "Restored from the last snapshot (2 names; names that shared objects still do):",
        f"- sales: {frame}", "- v1: list of 3 int"]
    assert RestoreReport.from_dict(rep.to_dict()) == rep


def test_ipython_state_shows_a_frames_values_within_its_cap(shell):
    """Issue 60: after a compaction the model still filters with the data's own spelling:
    a DataFrame's line ends with the values of its few-valued text columns, whole ones only,
    within the summary's levels budget."""
    from kernel_ext.columns import BRIEF_CHARS
    from kernel_ext.describe import LEVELS_MARK, SUMMARY_CHARS
    from rlm.compaction.notes import format_ipython_state

    run(shell, "import pandas as pd\npenguins = pd.DataFrame({'species': ['Adelie'] * 5 + "
               "['Gentoo'] * 3, 'mass': range(8), 'id': [f'p{i}' for i in range(8)]})\n"
               "wide = pd.DataFrame({f'c{i}': ['yes', 'no'] * 4 for i in range(80)})")
    names = json.loads(snapshot.namespace_json(shell))["names"]
    text = format_ipython_state(names, [])
    assert ("- penguins: DataFrame 8 rows x 3 cols: species str, mass int64, id str; "
            "values: species 'Adelie'|'Gentoo', ") in text
    [wide] = [line for line in text.splitlines() if line.startswith("- wide: ")]
    levels = wide.split(LEVELS_MARK)[1].rsplit(", ", 1)[0]  # before the size
    assert levels.startswith("c0 'yes'|'no', c1 'yes'|'no'") and len(levels) <= BRIEF_CHARS
    assert len(wide) <= len("- wide: ") + SUMMARY_CHARS + len(LEVELS_MARK) + BRIEF_CHARS + 12
