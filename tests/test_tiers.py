"""The suite's two tiers and what a run imports (issue 39).

- `pytest` (the fast tier, `slow` deselected by addopts) and `pytest -m slow` together
  collect every test exactly once.
- A one-turn scripted `rlm run` never imports litellm: a real run, in a process of its
  own, through the CLI's entry function, with `sys.modules` read after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# the three collections in one process: the test modules are imported once, not three times
COLLECT = """
import json, sys, pytest

class Grab:
    ids = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]

out = {}
for name, args in (("fast", []), ("slow", ["-m", "slow"]), ("every", ["-m", ""])):
    grab = Grab()
    rc = pytest.main(["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *args],
                     plugins=[grab])
    out[name] = [int(rc), grab.ids]
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
"""


def test_the_fast_and_slow_tiers_together_collect_every_test_exactly_once(tmp_path):
    result = tmp_path / "collected.json"
    out = subprocess.run([sys.executable, "-c", COLLECT, str(result)], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and result.is_file(), out.stdout[-2000:] + out.stderr[-2000:]
    tiers = json.loads(result.read_text())
    assert [rc for rc, _ in tiers.values()] == [0, 0, 0], out.stdout[-3000:]
    fast, slow, every = (tiers[k][1] for k in ("fast", "slow", "every"))
    assert len(set(fast)) == len(fast) and len(set(slow)) == len(slow)
    assert not set(fast) & set(slow)
    assert sorted(fast + slow) == sorted(every)
    assert len(slow) >= 20 and len(fast) > 10 * len(slow)
    # what the tiers are made of: the real model, the soak, the gateway, the object store
    for test in ("tests/test_local_model.py::test_seam_local_spec_completes",
                 "tests/test_soak.py::test_short_soak_has_no_violation",
                 "tests/test_gateway.py::test_scripted_run_through_the_gateway",
                 "tests/test_snapshot_url.py::test_missing_bucket_says_create_it"):
        assert test in slow, test
    assert "tests/test_gateway.py::test_unreachable_gateway_is_one_line" in fast


RUN = """
import json, sys
from rlm.cli.main import main
rc = main(["run", "what is 6*7?", "--model", sys.argv[1], "--json"])
print(json.dumps({"rc": rc, "litellm": sorted(m for m in sys.modules if m.split(".")[0] == "litellm")}),
      file=sys.stderr)
"""


def test_a_scripted_run_does_not_import_litellm(tmp_path):
    script = tmp_path / "replies.json"
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    six = "six = int(open('six.txt').read())\n"
    script.write_text(json.dumps([
        {"content": "", "tool_calls": [{"name": "python",
                                        "arguments": {"code": six + "print(six*7)"}}]},
        {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": "final(six*7)"}}]},
    ]))
    out = subprocess.run([sys.executable, "-c", RUN, f"script:{script}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"rc": 0, "litellm": []}, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["final"] == "42"
