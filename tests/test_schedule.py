"""Schedules with a FakeClock: on time, coalesced with a count, no drift, at most once."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from datetime import datetime

import pytest

from rlm.longrun.clock import FakeClock
from rlm.longrun.schedule import (
    INTERRUPTED,
    ScheduleError,
    Scheduler,
    parse_when,
)


@pytest.fixture(autouse=True)
def _utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def local(*args) -> float:
    return datetime(*args).timestamp()


@pytest.fixture
def clock():
    return FakeClock(local(2026, 3, 2, 8, 0, 0))  # a Monday


@pytest.fixture
def sched(tmp_path, clock):
    return Scheduler(tmp_path / "scheduled-jobs.json", clock)


def deliver_all(sched, now=None):
    out = []
    for tick in sched.due(now):
        claimed = sched.claim(tick)
        assert claimed is not None
        out.append(claimed)
        sched.mark_delivered(claimed.tick_id)
    return out


def test_parse_forms(clock):
    now = clock.now()
    assert parse_when("every 10m", now).interval_s == 600
    assert parse_when("10m", now, bare_interval=True).interval_s == 600
    assert parse_when("in 30m", now).at == now + 1800
    assert parse_when("at 2026-03-02T09:30", now).at == local(2026, 3, 2, 9, 30)
    assert parse_when("0 9 * * 1-5", now).cron == "0 9 * * 1-5"
    assert parse_when("@daily", now).kind == "cron"
    for bad, msg in [
        ("every 5s", "minimum"),
        ("10m", "ambiguous"),
        ("at 2020-01-01T00:00", "past"),
        ("61 * * * *", "invalid cron"),
        ("sometimes", "cannot read"),
    ]:
        with pytest.raises(ScheduleError, match=msg):
            parse_when(bad, now)


def test_heartbeat_fires_on_time_without_drift(sched, clock):
    job = sched.set_user_heartbeat("10m", "check the logs")
    assert job.delivery == "steer" and job.kind == "user_heartbeat"
    assert sched.due() == []
    clock.advance(599)
    assert sched.due() == []
    fired = []
    for _ in range(3):
        clock.advance(600)  # late by 599 s each time: the grid must not drift
        ticks = deliver_all(sched)
        assert [t.count for t in ticks] == [1]
        fired.append(ticks[0].scheduled_for)
    start = local(2026, 3, 2, 8, 0, 0)
    assert fired == [start + 600, start + 1200, start + 1800]
    assert sched.get(job.id).next_run == start + 2400
    assert ticks[0].message() == "[heartbeat " + job.id + "] check the logs"


def test_busy_heartbeat_coalesces_with_count(sched, clock):
    job = sched.add("every 10m", "status?", owner="agent", label="hb", heartbeat=True)
    clock.advance(35 * 60)  # busy for 35 minutes: instants at 10, 20, 30 are owed
    (tick,) = sched.due()
    assert tick.count == 3
    claimed = sched.claim(tick)
    assert "(3 heartbeat ticks coalesced while you were busy)" in claimed.message()
    assert sched.claim(tick) is None  # the same tick cannot be claimed twice
    sched.mark_delivered(claimed.tick_id)
    j = sched.get(job.id)
    assert j.next_run == local(2026, 3, 2, 8, 40) and j.ticks_total == 3 and j.run_count == 1


def test_pause_resume_skips_paused_instants(sched, clock):
    job = sched.add("every 10m", "hi", heartbeat=True)
    sched.pause(job.id)
    clock.advance(3600)
    assert sched.due() == []
    sched.resume(job.id)
    assert sched.due() == []  # paused ticks are not owed
    assert sched.get(job.id).next_run == local(2026, 3, 2, 9, 10)
    clock.advance(600)
    assert [t.count for t in deliver_all(sched)] == [1]


def test_cron_fires_at_the_right_instants(sched, clock):
    sched.add("0 9 * * 1-5", "standup")  # weekdays 09:00 local
    fires = []
    for _ in range(7 * 24 * 6 + 6):  # one week and an hour, in 10 minute steps
        clock.advance(600)
        fires += [datetime.fromtimestamp(t.scheduled_for) for t in deliver_all(sched)]
    assert fires == [datetime(2026, 3, d, 9, 0) for d in (2, 3, 4, 5, 6, 9)]


def test_cron_standard_dom_or_dow(sched, clock):
    # Vixie cron: day-of-month 1 OR Sunday (Prime requires both: W4)
    job = sched.add("0 0 1 * 0", "either")
    assert datetime.fromtimestamp(sched.get(job.id).next_run) == datetime(2026, 3, 8)


def test_one_time_jobs(sched, clock):
    a = sched.add("in 30m", "thirty")
    b = sched.add("at 2026-03-02T08:15", "iso")
    clock.advance(15 * 60 - 1)
    assert deliver_all(sched) == []
    clock.advance(1)
    assert [t.job_id for t in deliver_all(sched)] == [b.id]
    clock.advance(15 * 60)
    assert [t.job_id for t in deliver_all(sched)] == [a.id]
    clock.advance(86400)
    assert deliver_all(sched) == []
    assert {j.status for j in sched.list(include_completed=True)} == {"completed"}
    assert sched.list() == []


def test_downtime_coalesces_into_one_delivery(tmp_path, sched, clock):
    hb = sched.add("every 1h", "hourly", heartbeat=True)
    cr = sched.add("*/15 * * * *", "quarter")
    clock.advance(10 * 3600 + 60)  # the worker was down for ten hours
    restarted = Scheduler(tmp_path / "scheduled-jobs.json", clock)
    assert restarted.recover() == []
    ticks = {t.job_id: t for t in deliver_all(restarted)}
    assert ticks[hb.id].count == 10 and ticks[cr.id].count == 40
    assert "(10 heartbeat ticks coalesced while the worker was down)" in ticks[hb.id].message()
    assert "(40 scheduled runs coalesced while the worker was down)" in ticks[cr.id].message()
    assert deliver_all(restarted) == []  # never a backlog


def test_recover_does_not_replay_unconfirmed_claims(tmp_path, sched, clock):
    once = sched.add("in 1m", "once")
    hb = sched.add("every 1m", "beat", heartbeat=True)
    clock.advance(60)
    for tick in sched.due():
        sched.claim(tick)  # ... and the process dies before delivery
    assert sched.due() == []  # in flight: not offered again
    again = Scheduler(tmp_path / "scheduled-jobs.json", clock)
    interrupted = again.recover()
    assert {d["job_id"] for d in interrupted} == {once.id, hb.id}
    assert again.get(once.id).status == "completed"
    assert again.get(hb.id).last_error == INTERRUPTED
    assert again.due() == []
    clock.advance(60)
    assert [t.job_id for t in deliver_all(again)] == [hb.id]


def test_file_format_and_permissions(sched, clock, tmp_path):
    sched.add("every 10m", "x", heartbeat=True)
    clock.advance(600)
    deliver_all(sched)
    path = tmp_path / "scheduled-jobs.json"
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["jobs"]) == 1
    (d,) = data["dispatches"]
    assert d["delivered"] is True and d["count_coalesced"] == 1 and d["claimed_at"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text("{broken")
    with pytest.raises(ScheduleError, match="scheduled-jobs.json: not valid JSON"):
        sched.list()


def test_job_cap(tmp_path, clock):
    s = Scheduler(tmp_path / "j.json", clock, max_jobs=3)
    for i in range(3):
        s.add("in 1h", f"p{i}")
    with pytest.raises(ScheduleError, match="cap is 3"):
        s.add("in 1h", "one too many")


def test_kernel_handlers_cannot_touch_user_heartbeat(sched, clock):
    user = sched.set_user_heartbeat("every 10m", "user beat")
    made = sched.handle("heartbeat.create", {"prompt": "p", "interval": 30, "label": "mine"})
    assert made["owner"] == "agent" and made["interval_s"] == 30
    assert {j["id"] for j in sched.handle("heartbeat.list")} == {user.id, made["id"]}
    assert sched.handle("heartbeat.pause", {"id": made["id"]})["status"] == "paused"
    assert sched.handle("heartbeat.resume", {"id": made["id"]})["status"] == "active"
    for verb in ("pause", "resume", "delete"):
        with pytest.raises(ScheduleError, match="only the user"):
            sched.handle(f"heartbeat.{verb}", {"id": user.id})
    with pytest.raises(ScheduleError, match="minimum"):
        sched.handle("heartbeat.create", {"prompt": "p", "interval": "every 2s"})
    with pytest.raises(ScheduleError, match="unexpected owner"):
        sched.handle("heartbeat.create", {"prompt": "p", "interval": 60, "owner": "user"})
    # what a method requires is declared in kernel_ext.contract (Method.required)
    with pytest.raises(ScheduleError, match="missing interval"):
        sched.handle("heartbeat.create", {"prompt": "p"})
    with pytest.raises(ScheduleError, match="missing prompt, when"):
        sched.handle("cron.add", {})
    sched.handle("heartbeat.delete", {"id": made["id"]})
    assert [j.id for j in sched.list()] == [user.id]


def test_kernel_cron_handlers(sched, clock):
    job = sched.handle("cron.add", {"when": "0 * * * *", "prompt": "hourly"})
    assert job["kind"] == "cron" and job["delivery"] == "follow_up"
    once = sched.handle("cron.add", {"when": "in 5m", "prompt": "soon"})
    assert [j["id"] for j in sched.handle("cron.list")] == [job["id"], once["id"]]
    with pytest.raises(ScheduleError, match="heartbeat.create"):
        sched.handle("cron.add", {"when": "every 5m", "prompt": "x"})
    user_job = sched.add("in 1h", "the user's")
    with pytest.raises(ScheduleError, match="only the user"):
        sched.handle("cron.cancel", {"id": user_job.id})
    sched.handle("cron.cancel", {"id": job["id"]})
    with pytest.raises(ScheduleError, match="unknown method"):
        sched.handle("heartbeat.update", {})


def test_what_is_due_follows_every_change_another_process_makes(tmp_path, clock):
    """`due`/`next_due` read the file without its lock and keep what they parsed until it
    changes: a job another Scheduler (the CLI, the kernel bridge) adds, claims or cancels
    is seen at the next look; a file broken later is said, not served from memory."""
    from rlm.errors import SessionGone

    path = tmp_path / "s" / "scheduled-jobs.json"
    path.parent.mkdir()
    here, there = Scheduler(path, clock), Scheduler(path, clock)
    assert here.due() == [] and here.next_due() is None  # no file: no jobs
    job = there.add("every 1m", "look")
    assert here.next_due() == job.next_run
    clock.advance(60)
    [tick] = here.due()
    assert there.claim(tick) is not None
    assert here.due() == []  # in flight elsewhere
    there.mark_delivered(tick.tick_id)
    clock.advance(60)
    assert [t.job_id for t in here.due()] == [job.id]
    there.cancel(job.id)
    assert here.due() == [] and here.next_due() is None
    path.write_text("{broken")
    with pytest.raises(ScheduleError, match="not valid JSON"):
        here.due()
    shutil.rmtree(path.parent)
    with pytest.raises(SessionGone):
        here.due()
