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


def test_a_real_merge_error_is_short_whatever_format_ipython_uses(tmp_path):
    """issue 33's flights: a KeyError from inside pandas' `merge`. IPython 8 prints it in
    its legacy format (next test), IPython 9 in the usual one; either way the model reads
    its own line and the error, not pandas' merge internals."""
    cell = ("import pandas as pd\nleft = pd.DataFrame({'origin': ['EWR'], 'n': [1]})\n"
            "right = pd.DataFrame({'origin': ['EWR'], 'delay': [2.0]})\n"
            "both = left.merge(right, on=['origin', 'month'])\n")
    with Kernel(tmp_path, Config(output_budget_chars=20_000)) as k:
        res = k.execute(cell, timeout=60)
    text = res.shaped
    assert len(text.splitlines()) <= 12, text
    assert text.rstrip().splitlines()[-2] == "KeyError: 'month'", text
    assert "both = left.merge(right, on=['origin', 'month'])" in text
    assert "site-packages" not in text and "library frames inside pandas hidden" in text


# IPython 8's legacy format, as 8.12 printed issue 33's merge (colors kept on two blocks):
# once any frame's line number passes 10,000 every frame is `path in ?(args)`
_SITE = "~/.pyenv/versions/3.11.7/lib/python3.11/site-packages/pandas"
LEGACY = [
    "\x1b[0;31m" + "-" * 75 + "\x1b[0m",
    "\x1b[0;31mKeyError\x1b[0m                                  Traceback (most recent call last)",
    "\x1b[0;32m/tmp/ipykernel_1/1012886539.py\x1b[0m in \x1b[0;36m?\x1b[0;34m()\x1b[0m\n"
    "     14 # Merge\n---> 15 both = left.merge(right, on=['origin', 'month'])\n     16 \n",
    f"{_SITE}/core/frame.py in ?(self, right, how, on)\n  16190 \n> 16192         return merge(\n",
    f"{_SITE}/core/reshape/merge.py in ?(left, right, how, on)\n--> 391         op = _MergeOp(\n",
    f"{_SITE}/core/reshape/merge.py in ?(self)\n   1629  # Then we're either Hashable\n",
    f"{_SITE}/core/generic.py in ?(self, key, axis)\n-> 1708             raise KeyError(key)\n",
    "\x1b[0;31mKeyError\x1b[0m: 'month'",
]


def test_ipython_8s_legacy_frame_format_is_trimmed_too():
    """The trimmer knew only `File`/`Cell`/`Input` frames: with IPython 8 the local model
    read all of pandas' merge internals, 40 lines, and missed the KeyError at the end."""
    text, hidden = trim_traceback(LEGACY)
    assert hidden == 4
    lines = text.splitlines()
    assert lines[-1] == "KeyError: 'month'", text
    assert lines[-2] == "[... 4 library frames inside pandas hidden]", text
    assert "---> 15 both = left.merge(right, on=['origin', 'month'])" in text
    assert "site-packages" not in text and "16192" not in text
