"""Identity across a real kernel crash (the host's restart path) and across a restore in a
new kernel process (what `rlm resume` does): aliases, a dict holding a DataFrame that is
also a name, a DataFrame column, a numpy slice, an object graph with a cycle, and a
mutation made through a container member before the crash."""

from __future__ import annotations

import pytest

from rlm.config import load_config
from rlm.kernel.kernel import Kernel

pytestmark = pytest.mark.timeout(180)

SETUP = """
import numpy as np, pandas as pd
a = [1]
b = a
c = {"x": a}
df = pd.DataFrame({"v": np.arange(6.0), "w": np.arange(6.0) * 10})
df2 = df
box = {"frame": df}
col = df["v"]
col_shared = bool(np.shares_memory(col.values, df["v"].values))
arr = np.arange(10.0)
part = arr[2:8]
class Node:
    def __init__(self, name):
        self.name, self.peer = name, None
n1, n2 = Node("n1"), Node("n2")
n1.peer, n2.peer = n2, n1
lst = [1]
d = {"k": lst}
"""

CHECK = """
assert b is a and c["x"] is a, "alias"
_n = len(a)
a.append(0)
assert len(b) == _n + 1 and c["x"][-1] == 0, "mutation through a shows in b and c"
assert df2 is df and box["frame"] is df, "DataFrame alias / dict"
df.loc[0, "w"] = -1.0
assert df2.loc[0, "w"] == -1.0 and box["frame"].loc[0, "w"] == -1.0
assert bool(np.shares_memory(col.values, df["v"].values)) == col_shared, "column view"
assert np.shares_memory(part, arr), "numpy slice"
arr[3] += 100
assert part[1] == arr[3]
assert n1.peer is n2 and n2.peer is n1 and isinstance(n1, Node), "cycle"
assert d["k"] is lst and lst[:2] == [1, 2], ("mutation through a container", d)
print("IDENTITY-OK")
"""


def test_identity_survives_crash_and_resume(tmp_path):
    session = tmp_path / "session"
    with Kernel(session, load_config()) as k:
        assert k.execute(SETUP).status == "ok"
        assert k.execute("lst.append(2)").status == "ok"  # names lst, not d
        died = k.execute("import os; os._exit(1)")
        assert died.status == "died" and died.restart is not None
        assert died.restart.failed == [] and {"a", "b", "c", "df", "box", "col", "part", "n1", "d"} \
            <= set(died.restart.restored)
        res = k.execute(CHECK)
        assert res.status == "ok" and "IDENTITY-OK" in res.shaped, res.shaped
    # a new kernel process on the same session dir: `rlm resume`
    k2 = Kernel(session, load_config())
    try:
        report = k2.start()
        assert report.snapshot_found and report.failed == [] and "d" in report.restored
        res = k2.execute(CHECK)
        assert res.status == "ok" and "IDENTITY-OK" in res.shaped, res.shaped
        assert k2.execute("print(len(a), arr[3])").shaped.strip() == "3 203.0"
    finally:
        k2.stop()
