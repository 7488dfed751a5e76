"""The kernel starts the way a data notebook does: `pd`, `np` and `plt` (kernel_ext.aliases)
are defined before the first cell, imported on first use, never listed or snapshotted as
the user's variables, and a restart binds them again. Seen before: a first cell's
`pd.read_csv(...)` failed with NameError although the input had been loaded as a
DataFrame, and the turn was spent on the import. Real kernels, scripted model."""

from __future__ import annotations

import json

import pytest

from kernel_ext.contract import ALIASES
from rlm.app import RunOptions, build_agent, prepare_inputs
from rlm.config import Config
from rlm.events import RunEnded
from rlm.kernel import Kernel
from rlm.llm import ScriptedLLM
from rlm.session.entries import CustomEntry
from rlm.session.store import SessionStore
from tests.rlmcli import call
from tests.snapshot_shell import read_manifest

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")
pytestmark = pytest.mark.timeout(180)


def test_a_first_cell_uses_pd_np_plt_without_importing_them(tmp_path):
    csv = tmp_path / "sales.csv"
    csv.write_text("region,amount\nEast,10\nWest,32\n")
    with Kernel(tmp_path / "s", Config(home=tmp_path, cell_timeout=60)) as k:
        lazy = k.execute("import sys\nprint(sorted(m for m in ('pandas', 'matplotlib') "
                         "if m in sys.modules))")
        assert lazy.ok and "[]" in lazy.shaped, lazy.shaped  # nothing imported at start
        res = k.execute(f"df = pd.read_csv({str(csv)!r})\nprint(df.shape, np.int64(df.amount.sum()))\n"
                        "lines = plt.plot([1, 2])\nprint(type(plt).__name__, plt.__name__)")
        assert res.ok, res.shaped
        assert "(2, 2) 42" in res.shaped and "module matplotlib.pyplot" in res.shaped
        names = {n["name"] for n in k.list_namespace()["names"]}
        assert {"df", "lines"} <= names and not names & set(ALIASES), names
        manifest = read_manifest(tmp_path / "s" / "snapshot")
        assert "df" in manifest["entries"] and not set(manifest["entries"]) & set(ALIASES)
        described = {d["name"]: d for d in k.describe(["df", *ALIASES])}
        assert described["pd"]["alias"] == "pandas" and described["plt"]["alias"] == "matplotlib.pyplot"

        report = k.restart("test")
        assert "df" in report.restored and not report.failed and not report.skipped, report
        again = k.execute("print(pd.DataFrame({'a': [1]}).shape, df.amount.sum(), np.pi > 3)")
        assert again.ok and "(1, 1) 42 True" in again.shaped, again.shaped


def test_a_users_own_binding_of_an_alias_name_wins_and_is_data(tmp_path):
    with Kernel(tmp_path / "s", Config(home=tmp_path, cell_timeout=60)) as k:
        assert k.execute("import pandas as pd\nnp = [1, 2]").ok  # their own import; their np
        names = {n["name"] for n in k.list_namespace()["names"]}
        assert "np" in names and "pd" not in names  # pd still means pandas: the alias
        k.restart("test")
        assert "[1, 2] DataFrame" in k.execute("print(np, pd.DataFrame.__name__)").shaped


def test_the_input_description_says_the_aliases_are_defined(_isolated_home, tmp_path):
    """A --context run: the model is told pd/np/plt need no import, and its first cell
    reading the file again with pd.read_csv (no import) runs."""
    csv = tmp_path / "sales.csv"
    csv.write_text("region,amount\nEast,10\nWest,32\n")
    llm = ScriptedLLM([call(f"again = pd.read_csv({str(csv)!r})\nfinal(str(again.amount.sum()))")])
    config = Config(home=_isolated_home, model="script:x", cell_timeout=60)
    session = SessionStore.create(_isolated_home, model="script:x", task="total?")
    options = RunOptions(context=[str(csv)])
    with build_agent(session, config, entry="run", options=options, llm=llm) as agent:
        prepare_inputs(agent, options, "total?")
        events = list(agent.run("what is the total amount?"))
    end = events[-1]
    assert isinstance(end, RunEnded) and end.final == "42", end
    (entry,) = [e for e in session.branch()
                if isinstance(e, CustomEntry) and e.custom_type == "context_vars"]
    assert "- sales: pandas.DataFrame" in entry.content
    assert ("Already imported, no import needed: pd (pandas), np (numpy), "
            "plt (matplotlib.pyplot).") in entry.content
    sent = json.dumps(llm.calls[0])
    assert "Already imported, no import needed" in sent
