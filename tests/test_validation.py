"""Values no run can use are refused at start with one line naming the setting, a non-zero
exit and nothing left behind (issue 15, items 6 and 7)."""

from __future__ import annotations

import json
import time
from functools import partial

import pytest

from rlm.config import Config, load_config
from rlm.errors import ConfigError
from rlm.longrun.clock import iso
from rlm.longrun.schedule import ScheduleError, Scheduler, parse_when
from tests import rlmcli

rlm = partial(rlmcli.rlm, timeout=120)


@pytest.mark.parametrize("flags, words", [
    (["--max-turns", "-1"], "--max-turns"),
    (["--max-turns", "0"], "--max-turns"),
    (["--max-tokens", "abc"], "--max-tokens"),
    (["--cell-timeout", "nan"], "--cell-timeout"),
    (["--cell-timeout", "inf"], "--cell-timeout"),
    (["--cell-timeout", "-5"], "--cell-timeout"),
    (["--memory-cap", "1k"], "--memory-cap"),
    (["--memory-cap", "lots"], "--memory-cap"),
    (["--temperature", "nan"], "--temperature"),
])
def test_bad_run_values_are_one_line_errors_and_create_no_session(tmp_path, _isolated_home,
                                                                 flags, words):
    proc = rlm("run", "hello", "--model", "script:/nonexistent.json", *flags, cwd=tmp_path)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and words in err, err
    assert len(err.splitlines()) <= 3, err  # argparse: usage line + error line
    assert not (_isolated_home / "sessions").exists() or not any(
        (_isolated_home / "sessions").iterdir())


def test_bad_values_in_the_config_file_are_refused(tmp_path, _isolated_home):
    """The user's own config; a project rlm.toml with a bad value is ignored with one
    warning instead (tests/test_trust.py)."""
    own = _isolated_home / "config.toml"
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text("output_budget_chars = -1\n")
    with pytest.raises(ConfigError, match="output_budget_chars"):
        load_config()
    own.write_text("batch_concurrency = 0\n")
    with pytest.raises(ConfigError, match="batch_concurrency"):
        load_config()
    proc = rlm("run", "hello", "--model", "script:/nonexistent.json", cwd=tmp_path)
    assert proc.returncode != 0 and "batch_concurrency" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_good_values_pass_and_unlimited_is_none():
    cfg = Config(max_turns=None, max_tokens=None, cell_timeout=0.5, memory_cap_bytes=2 << 30,
                 temperature=0.0, reserve_tokens=0, keep_recent_tokens=0, max_depth=0)
    assert cfg.max_turns is None and cfg.cell_timeout == 0.5
    for bad in (dict(output_budget_chars=-1), dict(batch_concurrency=0), dict(max_turns=0),
                dict(cell_timeout=float("nan")), dict(interrupt_grace_s=0),
                dict(memory_cap_bytes=1024), dict(reserve_tokens=-1), dict(max_turns=True),
                dict(max_depth=None)):
        with pytest.raises(ConfigError):
            Config(**bad)


@pytest.mark.parametrize("when, words", [
    ("0 0 31 2 *", "never fires"),
    ("0 0 30 2 *", "never fires"),
    ("in 99999999999d", "100 years"),
    ("at 9999-01-01T00:00", "100 years"),
])
def test_schedules_that_can_never_fire_are_refused(when, words):
    with pytest.raises(ScheduleError, match=words):
        parse_when(when, time.time())


def test_schedules_that_fire_are_accepted():
    now = time.time()
    assert parse_when("0 0 29 2 *", now).kind == "cron"  # leap days exist
    assert parse_when("in 10d", now).at == pytest.approx(now + 864000)


def test_a_jobs_file_with_an_unrepresentable_time_still_lists(tmp_path):
    """A jobs file written before schedules were bounded must not crash every listing."""
    sched = Scheduler(tmp_path / "scheduled-jobs.json")
    job = sched.add("in 10m", "hello")
    data = json.loads((tmp_path / "scheduled-jobs.json").read_text())
    for j in data["jobs"]:
        if j.get("id") == job.id:
            for k, v in list(j.items()):
                if isinstance(v, float) and v > 1e9:
                    j[k] = 1e18
    (tmp_path / "scheduled-jobs.json").write_text(json.dumps(data))
    views = [j.view() for j in Scheduler(tmp_path / "scheduled-jobs.json").list()]
    assert [v["id"] for v in views] == [job.id]
    assert "out of range" in iso(1e18)
