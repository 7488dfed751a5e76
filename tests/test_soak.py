"""The short soak run (CI): ~50 turns, every fault kind at least once, no violation.

Runs bench.soak exactly as `python -m bench.soak --turns 50 --seed 11` would, with its
own RLM_HOME under tmp_path. The long run and its figures are in bench/RESULTS.md.
"""

from __future__ import annotations

import pytest

from bench.soak import Soak, table
from bench.soak_plan import FAULTS, make_plan

TURNS, SEED = 50, 11


def test_plan_has_every_fault_kind_and_is_deterministic():
    plan = make_plan(SEED, TURNS)
    kinds = {a["kind"] for a in plan}
    assert set(FAULTS) <= kinds
    assert plan == make_plan(SEED, TURNS)
    assert sum(a["kind"] != "tick" for a in plan) == TURNS


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_short_soak_has_no_violation(tmp_path):
    result = Soak(TURNS, SEED, tmp_path / "soak-home").run()
    print(table(result))
    assert result["violations"] == []
    for kind in FAULTS:
        counts = result["faults"][kind]
        assert counts.get("injected", 0) >= 1, f"{kind} was never injected"
        assert counts.get("survived", 0) == counts["injected"], f"{kind}: {counts}"
    assert result["compactions"] >= 3
    assert result["compaction_checks"] == result["compactions"]
    assert result["entries_lost"] == 0 and result["duplicates"] == 0 and result["names_lost"] == 0
    assert result["ticks_delivered"] > 0 and result["ticks_interrupted"] >= 1
