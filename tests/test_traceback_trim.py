"""Tracebacks the user and the model read are cut to the user's own frames plus the error
line; the full traceback stays on disk (issue 14, item 3)."""

from __future__ import annotations

import pytest

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.shaping import strip_ansi, trim_traceback

pytestmark = pytest.mark.timeout(120)

CELL = """import pandas as pd
orders = pd.DataFrame({'region': ['east'], 'total': [1]})
def by_region(df):
    return df['revenue'].sum()
by_region(orders)
"""


def test_a_real_pandas_key_error_is_short_names_the_error_and_the_users_line(tmp_path):
    with Kernel(tmp_path, Config(output_budget_chars=20_000)) as k:
        res = k.execute(CELL, timeout=60)
    assert res.status == "error"
    full = next(o for o in res.outputs if o.kind == "error").traceback or []
    text = res.shaped
    assert len(text.splitlines()) <= 15, text
    assert text.rstrip().splitlines()[-2] == "KeyError: 'revenue'", text  # the error line
    assert "----> 4     return df['revenue'].sum()" in text  # the user's own line
    assert "----> 5 by_region(orders)" in text
    assert "site-packages" not in text and "index.pyx" not in text
    assert "library frames inside pandas hidden" in text
    # the full traceback (pandas internals included) is kept in the log and on disk
    assert sum("site-packages/pandas" in b for b in full) >= 2
    path = text.rstrip().rsplit("full traceback: ", 1)[1].rstrip("]")
    on_disk = (tmp_path / path).read_text()
    assert "pandas/core/frame.py" in on_disk and "index.pyx" in on_disk


def test_a_traceback_with_only_user_frames_is_unchanged():
    blocks = ["\x1b[0;31m----------\x1b[0m", "ZeroDivisionError   Traceback (most recent call last)",
              "Cell In[1], line 1\n----> 1 1/0\n", "ZeroDivisionError: division by zero"]
    text, hidden = trim_traceback(blocks)
    assert hidden == 0
    assert text == "\n".join(b.replace("\x1b[0;31m", "").replace("\x1b[0m", "") for b in blocks)


def test_a_merge_error_in_ipythons_legacy_frame_format_is_trimmed_too(tmp_path):
    """A frame past line 10,000 (pandas' frame.py: `merge`) makes IPython format the whole
    traceback the legacy way (`path in ?(args)`); the local model read all of pandas'
    merge internals, 40 lines, and missed the KeyError at the end (issue 33's flights)."""
    cell = ("import pandas as pd\nleft = pd.DataFrame({'origin': ['EWR'], 'n': [1]})\n"
            "right = pd.DataFrame({'origin': ['EWR'], 'delay': [2.0]})\n"
            "both = left.merge(right, on=['origin', 'month'])\n")
    with Kernel(tmp_path, Config(output_budget_chars=20_000)) as k:
        res = k.execute(cell, timeout=60)
    full = next(o for o in res.outputs if o.kind == "error").traceback or []
    assert any(" in ?(" in strip_ansi(b) for b in full), full  # the legacy format
    text = res.shaped
    assert len(text.splitlines()) <= 12, text
    assert text.rstrip().splitlines()[-2] == "KeyError: 'month'", text
    assert "both = left.merge(right, on=['origin', 'month'])" in text
    assert "site-packages" not in text and "library frames inside pandas hidden" in text
