"""Autonomous policy: gates fail then pass, limits end with clear reasons, no idle reruns."""

from __future__ import annotations

from pathlib import Path

from rlm.longrun.autonomous import (
    AutonomousPolicy,
    Continue,
    RunState,
    Stop,
    head_tail,
    workspace_fingerprint,
)


def test_failing_then_passing_gate(tmp_path: Path):
    policy = AutonomousPolicy(gates=["echo checking; test -f done.txt"], cwd=tmp_path)
    first = policy.decide(RunState(turns=1, cells=1))
    assert isinstance(first, Continue)
    assert "`echo checking; test -f done.txt` failed (exit code 1" in first.message
    assert "checking" in first.message
    (tmp_path / "done.txt").write_text("ok")  # the model fixes it
    second = policy.decide(RunState(turns=2, cells=2))
    assert second == Stop("all 1 gates passed", ok=True)
    assert policy.continuations == 1 and policy.gate_runs == 2


def test_not_finished_just_continues(tmp_path: Path):
    policy = AutonomousPolicy(gates=["false"], cwd=tmp_path)
    assert policy.decide(RunState(turns=1, finished=False)) == Continue(None)
    assert policy.gate_runs == 0  # gates run only when the model would finish


def test_same_failed_gate_not_rerun_while_nothing_changed(tmp_path: Path):
    marker = tmp_path / "runs.log"
    gate = f"echo run >> {marker}; exit 3"
    policy = AutonomousPolicy(gates=[gate], cwd=tmp_path, max_stalls=3)
    assert isinstance(policy.decide(RunState(cells=1)), Continue)
    again = policy.decide(RunState(cells=1))  # nothing changed (the gate's own write ignored)
    assert isinstance(again, Continue) and "was not rerun: nothing changed" in again.message
    assert marker.read_text().count("run") == 1
    policy.decide(RunState(cells=2))  # a cell ran: rerun
    assert marker.read_text().count("run") == 2
    (tmp_path / "fix.py").write_text("x = 1")  # a file changed: rerun
    policy.decide(RunState(cells=2))
    assert marker.read_text().count("run") == 3


def test_stall_ends_the_run(tmp_path: Path):
    policy = AutonomousPolicy(gates=["false"], cwd=tmp_path)
    assert isinstance(policy.decide(RunState(cells=1)), Continue)
    assert isinstance(policy.decide(RunState(cells=1)), Continue)
    stop = policy.decide(RunState(cells=1))
    assert stop.limit == "stalled" and "gate 'false' is failing and nothing changed" in stop.reason


def test_limits_end_with_clear_reasons(tmp_path: Path):
    assert AutonomousPolicy(max_turns=40).decide(RunState(turns=40, finished=False)) == Stop(
        "max_turns (40) reached", limit="max_turns"
    )
    stop = AutonomousPolicy(max_tokens=1000).decide(RunState(tokens=1200, finished=False))
    assert stop.reason == "max_tokens (1000) reached (1200 tokens used)"
    stop = AutonomousPolicy(max_wall_s=60).decide(RunState(elapsed_s=61, finished=False))
    assert stop.reason == "max_wall_s (60) reached (61 s elapsed)"
    policy = AutonomousPolicy(max_continuations=2, gates=["false"], cwd=tmp_path, max_stalls=9)
    for cells in (1, 2):
        assert isinstance(policy.decide(RunState(cells=cells)), Continue)
    stop = policy.decide(RunState(cells=3))
    assert stop.reason == "max_continuations (2) reached; gate 'false' still failing"
    unlimited = AutonomousPolicy()
    assert unlimited.decide(RunState(turns=10**6, tokens=10**9, elapsed_s=1e9)).ok


def test_an_answer_in_the_last_turn_is_still_judged_by_the_gates(tmp_path: Path):
    """At the limit, a finished run's gates still run: passing, it is a success; failing,
    the run stops on the limit, not as a success (the loop ends it `limit:turns`)."""
    failing = AutonomousPolicy(max_turns=2, gates=["false"], cwd=tmp_path)
    stop = failing.decide(RunState(turns=2, cells=1))
    assert stop == Stop("max_turns (2) reached; gate 'false' still failing", limit="max_turns")
    assert failing.gate_runs == 1
    passing = AutonomousPolicy(max_turns=2, gates=["true"], cwd=tmp_path)
    assert passing.decide(RunState(turns=2, cells=1)) == Stop("all 1 gates passed", ok=True)
    assert AutonomousPolicy(max_turns=2).decide(RunState(turns=2)).ok  # no gates: finished


def test_gate_output_bounded_and_timeout(tmp_path: Path):
    policy = AutonomousPolicy(
        gates=["python3 -c \"print('x' * 50000); raise SystemExit(1)\""], cwd=tmp_path
    )
    msg = policy.decide(RunState(cells=1)).message
    assert len(msg) < 4500 and "characters elided" in msg
    slow = AutonomousPolicy(gates=["sleep 5; echo never"], cwd=tmp_path, gate_timeout_s=0.2)
    assert "timed out" in slow.decide(RunState(cells=1)).message
    assert head_tail("abc", 10) == "abc"


def test_fingerprint_ignores_caches(tmp_path: Path):
    before = workspace_fingerprint(tmp_path, 1)
    (tmp_path / ".pytest_cache").mkdir()
    (tmp_path / ".pytest_cache" / "x").write_text("1")
    assert workspace_fingerprint(tmp_path, 1) == before
    assert workspace_fingerprint(tmp_path, 2) != before


def test_fingerprint_leaves_rlms_own_home_out(tmp_path: Path):
    """A run from a folder that holds $RLM_HOME: its session log grows every turn, which
    made every failing gate look changed, so an autonomous run never stalled."""
    home = tmp_path / "rlm-home"
    (home / "sessions").mkdir(parents=True)
    before = workspace_fingerprint(tmp_path, 1, skip=(home,))
    (home / "sessions" / "session.jsonl").write_text("{}\n")
    assert workspace_fingerprint(tmp_path, 1, skip=(home,)) == before
    assert workspace_fingerprint(tmp_path, 1) != workspace_fingerprint(tmp_path, 1, skip=(home,))
    (tmp_path / "fix.py").write_text("x = 1")
    assert workspace_fingerprint(tmp_path, 1, skip=(home,)) != before
