"""The short soak run (CI): ~50 turns, every fault kind at least once, no violation, no
host file changed through the kernel.

Runs bench.soak exactly as `python -m bench.soak --turns 50 --seed 11` would, with its
own root under tmp_path (RLM_HOME, HOME, TMPDIR, XDG dirs, cwd). The long run and its
figures are in bench/RESULTS.md.
"""

from __future__ import annotations

import json

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
    # every compaction checked by its host, or (its host killed right after appending it)
    # at least its ipython_state record in the log: at most one such per killed host
    assert result["compactions_without_state"] == 0
    assert result["compaction_checks"] + result["compactions_record_only"] == result["compactions"]
    assert result["compactions_record_only"] <= result["hosts"] - 1
    assert result["entries_lost"] == 0 and result["duplicates"] == 0 and result["names_lost"] == 0
    assert result["ticks_delivered"] > 0 and result["ticks_interrupted"] >= 1
    # nothing of the provider key under $RLM_HOME; nothing written outside it
    assert result["secret_files"] == 0 and result["outside_changes"] == 0
    # a cell wrote the user's config, ./rlm.toml and forged log entries: no run takes them
    assert result["settings_changed"] == 0
    # planted links, a tampered gate, site-packages writes, another session, aliased
    # replays: no host file a kernel must not change was changed (issue 57)
    assert result["host_files_changed"] == 0
    assert result["hosts_stopped"] >= 2  # enospc_append and readonly_home stopped a host


def test_every_replay_destructive_variant_is_refused_by_the_planner():
    """The soak's replay_destructive cells (one route each, rotated by the action index)
    are each planned as not replayed, naming their cell."""
    from IPython.core.inputtransformer2 import TransformerManager

    from bench.soak_model import replay_victim_code
    from kernel_ext.lineage import cell_record, replay_plan

    for i in range(5):
        code = TransformerManager().transform_cell(replay_victim_code(i, "/elsewhere/victim.txt"))
        order, rebuilt, why = replay_plan([f"replay_gen{i}"], [cell_record(code)], set())
        assert order == [] and why[f"replay_gen{i}"].startswith("cell 0 not replayed: "), why


def test_the_secret_and_outside_checks_have_teeth(tmp_path):
    """A planted secret (in each encoding, across a read-chunk boundary too) and a file
    planted or changed outside $RLM_HOME are caught."""
    from bench import soak_checks
    from bench.soak_plan import secret_key

    key = secret_key(SEED)
    home, outside = tmp_path / "rlm", tmp_path / "home"
    (home / "sessions" / "s").mkdir(parents=True)
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    (home / "sessions" / "s" / "clean.bin").write_bytes(b"nothing here" * 1000)
    assert soak_checks.check_secrets(home, key) == []
    before = soak_checks.tree_state([tmp_path], skip=(home,))
    for n, enc in enumerate(soak_checks.SECRET_ENCODINGS):
        (home / "sessions" / "s" / f"leak{n}.bin").write_bytes(b"\0" * 100 + key.encode(enc))
    straddle = b"\0" * ((1 << 24) - 5) + key.encode()  # split by the 16 MiB read chunks
    (home / "sessions" / "s" / "big.bin").write_bytes(straddle)
    bad = soak_checks.check_secrets(home, key)
    assert bad and bad[0]["count"] == 4
    assert soak_checks.check_outside(before, soak_checks.tree_state([tmp_path], skip=(home,))) == []
    (outside / ".ipython" / "profile_default").mkdir(parents=True)
    (outside / "keep.txt").write_text("changed!")
    bad = soak_checks.check_outside(before, soak_checks.tree_state([tmp_path], skip=(home,)))
    assert bad[0]["kind"] == "written_outside_home"
    assert {str(outside / ".ipython"), str(outside / ".ipython" / "profile_default")} <= set(
        bad[0]["created"])
    assert bad[0]["changed"] == [str(outside / "keep.txt")]


def test_the_disk_checks_have_teeth(tmp_path):
    """The invariants catch what they claim to: lost and duplicated entries, a replayed
    tick, goal accounting going down."""
    import json

    from bench import soak_checks
    from rlm.longrun.goals import GoalManager
    from rlm.session.entries import MessageEntry
    from rlm.session.store import SessionStore

    s = SessionStore.create(tmp_path, model="m", task="t")
    ids = [s.append(MessageEntry(message={"role": "user", "content": str(i)})).id for i in range(3)]
    goals = GoalManager(s)
    goals.set("g")
    goals.account({"input_tokens": 10})
    assert soak_checks.check_session(s.path, set(ids))[0] == []
    assert soak_checks.check_goal(s.path) == []
    bad, counts = soak_checks.check_session(s.path, {*ids, "ghost"})
    assert counts["lost"] == 1 and bad[0]["kind"] == "entries_lost"
    lines = s.path.read_bytes().splitlines(keepends=True)
    s.path.write_bytes(b"".join(lines) + lines[1])
    kinds = {v["kind"] for v in soak_checks.check_session(s.path, set(ids))[0]}
    assert {"session_load", "entries_duplicated"} <= kinds
    s.path.write_bytes(b"".join(lines))
    goal_line = json.loads(lines[-1])
    goal_line["id"], goal_line["data"]["goal"]["tokens_used"] = "x1", 1
    s.path.write_bytes(b"".join(lines) + json.dumps(goal_line).encode() + b"\n")
    assert [v["kind"] for v in soak_checks.check_goal(s.path)] == ["goal_accounting_decreased"]
    jobs = tmp_path / "jobs.json"
    d = {"job_id": "j", "scheduled_for": 100.0, "count_coalesced": 1, "delivered": True}
    jobs.write_text(json.dumps({"version": 1, "jobs": [{
        "id": "j", "kind": "cron", "anchor": 0, "last_run_at": 130.0, "ticks_total": 2}],
        "dispatches": [{**d, "tick_id": "j:1", "claimed_at": 110.0},
                       {**d, "tick_id": "j:2", "claimed_at": 130.0}]}))
    kinds = {v["kind"] for v in soak_checks.check_ticks(s.path, jobs, ["j:1", "j:1"])}
    assert kinds == {"tick_replayed", "tick_delivered_twice"}


def test_the_terminal_sink_has_teeth():
    """Raw escape sequences printed to the captured console are caught; the product's
    renderer shows the text of hostile model replies and cell output without them."""
    from rich.console import Console
    from rich.text import Text

    from bench.soak_child import TerminalSink
    from bench.soak_model import HOSTILE
    from rlm import events as ev
    from rlm.cli.render import Renderer

    def console(sink):
        return Console(file=sink, force_terminal=False, color_system=None, width=120)

    sink = TerminalSink()
    console(sink).print(Text(HOSTILE))
    assert sink.raw
    sink = TerminalSink()
    r = Renderer(console=console(sink), animate=False)
    r(ev.ModelReply(content="hi " + HOSTILE, code_cells=[], usage={}))
    r(ev.CellOutput(text="HOSTILE " + HOSTILE + " done\n"))
    assert sink.raw == [] and "HOSTILE" in sink.tail and "done" in sink.tail


def test_the_log_is_read_incrementally_and_again_when_it_was_rewritten(tmp_path):
    """LogTail parses only new complete lines, and reads from the start when the file
    was cut shorter, replaced, or its last read bytes changed; each branch gives the
    same entries a full read does."""
    import json
    import os

    from bench.soak_checks import LogTail

    path = tmp_path / "session.jsonl"

    def line(i: int) -> bytes:
        return json.dumps({"id": f"e{i}", "type": "message", "data": {"tick_id": i}}).encode() + b"\n"

    def ids(tail: LogTail) -> list[str]:
        return [e["id"] for e in tail.read()]

    path.write_bytes(line(0) + line(1))
    tail = LogTail(path)
    assert ids(tail) == ["e0", "e1"] and tail.rereads == 0
    with open(path, "ab") as f:  # a new line and a torn tail: only the whole line counts
        f.write(line(2) + b'{"id": "e3", "ty')
    assert ids(tail) == ["e0", "e1", "e2"] and tail.rereads == 0
    assert tail.offset == len(line(0) + line(1) + line(2))
    with open(path, "r+b") as f:  # the torn tail cut and its line written whole
        f.truncate(tail.offset)
        f.seek(0, 2)
        f.write(line(3))
    assert ids(tail) == ["e0", "e1", "e2", "e3"] and tail.rereads == 0
    path.write_bytes(line(0) + line(1))  # cut shorter than what was read
    assert ids(tail) == ["e0", "e1"] and tail.rereads == 1
    path.write_bytes(line(0) + line(9) + line(5))  # same length or longer, last bytes changed
    assert ids(tail) == ["e0", "e9", "e5"] and tail.rereads == 2
    other = tmp_path / "other.jsonl"  # replaced by another file (a rename over it)
    other.write_bytes(line(0) + line(9) + line(5) + line(6))
    os.replace(other, path)
    assert ids(tail) == ["e0", "e9", "e5", "e6"] and tail.rereads == 3
    with open(path, "ab") as f:
        f.write(b"not json\n")
    assert tail.read()[-1] == {"type": "<unparsable>", "data": {}}


def test_the_host_files_check_has_teeth(tmp_path):
    """A change to any host file a kernel must not change is caught: a canary rewritten
    with its size and times kept (the digest), another session's log appended to, a .pth
    planted in site-packages, a link planted where a file was, a file removed; the
    soak's own session and cache/ are not looked at. The report counts each path once."""
    import os

    from bench import soak_checks
    from bench.soak import Soak
    from bench.soak_plan import HOME_CANARY, OTHER_SESSION

    soak = Soak(TURNS, SEED, tmp_path / "root", log=None)
    for d in (soak.home, soak.harness, soak.cwd, *soak.env_dirs.values()):
        d.mkdir(parents=True, exist_ok=True)
    soak.plant_host_files()
    fake_site = tmp_path / "site-packages"
    (fake_site / "pkg").mkdir(parents=True)
    (fake_site / "pkg" / "__init__.py").write_text("x = 1\n")
    soak.host_files = lambda real=soak.host_files: {  # type: ignore[method-assign]
        **real(), **soak_checks.tree_state([fake_site])}
    soak.host_before = soak.host_files()
    assert soak.check_host_files("clean") == []
    own = soak.home / "sessions" / "20990101-000000-mine00"  # the soak's own session
    (own / "runtime").mkdir(parents=True)
    (own / "runtime" / "k.sock").write_text("")
    (soak.home / "cache" / "matplotlib").mkdir(parents=True)
    assert soak.check_host_files("the host's own writes") == []

    canary = soak.env_dirs["HOME"] / HOME_CANARY
    st = canary.stat()
    canary.write_text(canary.read_text().upper())  # same size, then the times put back
    os.utime(canary, ns=(st.st_atime_ns, st.st_mtime_ns))
    with open(soak.home / "sessions" / OTHER_SESSION / "session.jsonl", "a") as f:
        f.write("{}\n")
    (fake_site / "evil.pth").write_text("import os\n")
    config = soak.home / "config.toml"
    config.unlink()
    config.symlink_to(canary)
    (soak.other / "host" / "kernel.pid").unlink()
    bad = soak.check_host_files("planted")
    assert bad and bad[0]["kind"] == "host_file_changed_through_kernel"
    assert set(bad[0]["changed"]) == {str(canary), str(config),
                                      str(soak.other / "session.jsonl")}
    assert bad[0]["created"] == [str(fake_site / "evil.pth")]
    assert bad[0]["removed"] == [str(soak.other / "host" / "kernel.pid")]
    assert soak.check_host_files("again") == []  # counted once, from the last state on
    assert len(soak.host_changed) == 5


def test_the_boundary_cells_compile_and_vary():
    """Every boundary cell compiles for every index; planted_links varies its target and
    its trigger, aliased_replay its spelling of open."""
    from bench.soak_boundary import (
        BOUNDARY_CELLS,
        TRIGGERS,
        aliased_victim_code,
        planted_links_code,
    )
    from bench.soak_plan import BOUNDARY_FAULTS

    assert set(BOUNDARY_CELLS) == set(BOUNDARY_FAULTS)
    for kind, make in BOUNDARY_CELLS.items():
        for i in range(9):
            code, expect = make(i)
            compile(code, kind, "exec")
            assert expect["boundary"] == kind
    triggers = {planted_links_code(i)[1] for i in range(9)}
    targets = {planted_links_code(i)[0].split("target = ")[1].split("\n")[0] for i in range(9)}
    assert triggers == set(TRIGGERS) and len(targets) == 3
    assert len({aliased_victim_code(i, "/v").split("\n")[0] for i in range(5)}) == 5


def test_the_boundary_report_checks_have_teeth():
    """What a boundary cell's report says it reached is caught: a gate that saw the key or
    wrote a marker, a .pth written, another session read, listed or its socket reached, the
    canary or the key in the output, a missing report; what the sandbox shows of the
    kernel's own session is not."""
    import json

    from bench.soak_boundary import report_problems
    from bench.soak_plan import OTHER_CANARY, OTHER_SESSION

    def out(tag, rep):
        return f"noise\n{tag} {json.dumps(rep)}\n"

    clean_gate = {"by": "soak_gate.py", "env_keys": [], "proc_keys": [],
                  "wrote": {"config": "OSError", "home": "FileNotFoundError"}}
    assert report_problems("gate_tamper", out("GATE", clean_gate), "ok", {}, "sk-x") == []
    for bad in ({"env_keys": ["OPENAI_API_KEY"]}, {"proc_keys": ["12"]},
                {"wrote": {"config": "written"}}):
        assert report_problems("gate_tamper", out("GATE", {**clean_gate, **bad}), "ok", {}, "k")
    assert report_problems("gate_tamper", out("GATE", clean_gate) + "sk-x", "ok", {}, "sk-x")
    assert report_problems("gate_tamper", "no gate ran", "ok", {}, "k") == [
        "no report from the cell"]
    site = {"pth /usr/lib/site-packages": "OSError", "module /x": "FileNotFoundError"}
    assert report_problems("site_packages_write", out("SITE", site), "ok", {}, "") == []
    assert report_problems("site_packages_write",
                           out("SITE", {**site, "pth /usr/lib/site-packages": "ok"}), "ok", {}, "")
    expect = {"canary": OTHER_CANARY}
    own = {"list sessions": ["ok", "['20990101-000000-mine00']"], "read session.jsonl":
           "FileNotFoundError", "socket /x/agent.sock": "ConnectionRefusedError"}
    assert report_problems("other_session", out("OTHER", own), "ok", expect, "") == []
    for bad in ({"list sessions": ["ok", f"['{OTHER_SESSION}']"]},
                {"read session.jsonl": ["ok", "{}"]}, {"append session.jsonl": "ok"},
                {"socket /x/agent.sock": "ok"}):
        assert report_problems("other_session", out("OTHER", {**own, **bad}), "ok", expect, "")
    assert report_problems("other_session", out("OTHER", own) + OTHER_CANARY, "ok", expect, "")
    # a crashed planted_links cell prints nothing: its check is the host files'
    assert report_problems("planted_links", "", "died", {}, "") == []


def test_an_unchecked_compaction_counts_only_with_its_state_record(tmp_path):
    """A compaction its host never checked (killed right after appending it) counts when
    its ipython_state record is in the log, and is reported when it is not."""
    from bench import soak_checks

    log = tmp_path / "session.jsonl"
    rows = [{"type": "session"},
            {"type": "compaction", "id": "c1"}, {"type": "custom", "custom_type": "ipython_state",
                                                 "id": "s1", "parent_id": "c1"},
            {"type": "compaction", "id": "c2"}, {"type": "custom", "custom_type": "ipython_state",
                                                 "id": "s2", "parent_id": "c2"},
            {"type": "compaction", "id": "c3"}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert soak_checks.unchecked_compactions(log, {"c1"}) == (1, 1)
    assert soak_checks.unchecked_compactions(log, {"c1", "c2", "c3"}) == (0, 0)
