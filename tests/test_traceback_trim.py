"""Tracebacks the user and the model read are cut to the user's own frames plus the error
line; the full traceback stays on disk (issue 14, item 3)."""

from __future__ import annotations

import pytest

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.shaping import trim_traceback

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
