"""Issue 58 item 10 through the CLI: what reached the model, what is on disk, what the
user was told. A 50 MB state.md reaches the model as its newest lines, within 10% of the
model's window in tokens, saying it was cut (and the user is told once); a run's outcome
is in the next session's first model call, with no key in it; the small (fenced-code,
`local`-like) model's system prompt says what project memory is, unless --no-memory; a
one-off instruction is not captured as a convention, a rule meant to last is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlmcli import call, rlm, script

from rlm.llm import inproc_models
from rlm.llm.tokens import count_message
from rlm.memory import MEMORY_MARK

SECRET = "tok-Zq81pLx0Vw27Yb5N"  # a value of a *_TOKEN variable: a key the host knows


@pytest.fixture
def models(monkeypatch):
    """Every scripted model `rlm` makes in this process; `.calls` holds what reached each."""
    made: list[inproc_models.ScriptedLLM] = []
    original = inproc_models.ScriptedLLM.from_file.__func__

    def from_file(cls, *args, **kw):
        llm = original(cls, *args, **kw)
        made.append(llm)
        return llm

    monkeypatch.setattr(inproc_models.ScriptedLLM, "from_file", classmethod(from_file))
    return made


def _answered(out) -> None:
    """The run ended with an answer (verified or not: verification is not the subject)."""
    assert out.returncode in (0, 5), out.stderr[-3000:] + out.stdout[-2000:]


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj


def _write_big_state(path: Path, size: int) -> None:
    """`size` bytes of number-heavy lines (about 2 characters a token, where a budget in
    characters at 3 a token overshoots), the oldest and newest lines marked."""
    line = " ".join(str(k * 7919 % 100003) for k in range(40)) + "\n"
    block = line.encode() * (1 << 20 // len(line))
    with open(path, "wb") as f:
        f.write(b"# State\n- OLDEST-LINE-MARK\n")
        while f.tell() + len(block) < size - 64:
            f.write(block)
        f.write(line.encode() * ((size - 64 - f.tell()) // len(line)))
        f.write(b"- NEWEST-LINE-MARK: where the work stands\n")


@pytest.mark.timeout(240)
def test_a_50_mb_state_md_reaches_the_model_newest_first_within_its_share_and_said(
        tmp_path, models):
    proj = _project(tmp_path)
    (proj / ".agent").mkdir()
    state = proj / ".agent" / "state.md"
    _write_big_state(state, 50_000_000)
    size = state.stat().st_size
    window = 32_000
    s = script(tmp_path / "s.json", {"window": window, "replies": [
        call("print(6 * 7)"), call("print(7 * 6)"), "42"]})
    out = rlm("run", "what is 6 times 7?", "--model", s, cwd=proj)
    _answered(out)
    calls = models[0].calls
    assert len(calls) == 3
    for msgs in calls:  # every call: the memory message, within 10% of the window
        memory = msgs[1]
        assert memory["content"].startswith(MEMORY_MARK)
        assert count_message(memory) <= window * 0.10
        assert "NEWEST-LINE-MARK: where the work stands" in memory["content"]
        assert "OLDEST-LINE-MARK" not in memory["content"]
        assert (f" of {size:,} bytes of state.md shown; the rest is in .agent/state.md]"
                in memory["content"])
    # the user is told once, not at every call
    shown = out.stdout + out.stderr
    assert shown.count("memory: .agent/ is over its share of the model's window") == 1
    assert "state.md: the newest" in shown and f"of {size:,} bytes shown" in shown


@pytest.mark.timeout(240)
def test_the_next_session_starts_knowing_what_the_last_run_did_and_no_key(tmp_path, models):
    proj = _project(tmp_path)
    rlm("memory", "init", cwd=proj, check=True)
    first = script(tmp_path / "a.json", [call(
        "open('report.md', 'w').write('North sold 1204')\n"
        "open('notes/draft.txt', 'w') if False else None\n"
        "print('North', 1204)\nfinal('North, with 1204 sales')")])
    env = {"RLM_SERVICE_TOKEN": SECRET}
    done = rlm("run", f"Which region sold most? Write report.md. The API token is {SECRET}",
               "--model", first, "--json", cwd=proj, env=env)
    _answered(done)
    status = json.loads(done.stdout.strip().splitlines()[-1])["status"]
    history = (proj / ".agent" / "history.log").read_text()
    line = json.loads(history.strip().splitlines()[-1])
    assert line["action"] == "run" and line["target"] == "report.md"
    assert "task: Which region sold most?" in line["note"]
    assert f"| {status} |" in line["note"] and "answer: North, with 1204 sales" in line["note"]
    assert SECRET not in history and "[redacted]" in line["note"]

    second = script(tmp_path / "b.json", ["Nothing to do."])
    again = rlm("run", "Go on.", "--model", second, cwd=proj, env=env)
    _answered(again)
    memory = models[-1].calls[0][1]["content"]
    assert memory.startswith(MEMORY_MARK)
    assert '"action": "run", "target": "report.md"' in memory
    assert "answer: North, with 1204 sales" in memory and SECRET not in memory


@pytest.mark.timeout(240)
def test_a_run_in_a_directory_without_memory_leaves_none(tmp_path, models):
    proj = _project(tmp_path)
    s = script(tmp_path / "s.json", ["42"])
    _answered(rlm("run", "what is 6 times 7?", "--model", s, cwd=proj))
    assert not (proj / ".agent").exists()


@pytest.mark.timeout(240)
def test_the_small_models_system_prompt_says_what_memory_is_unless_it_is_off(tmp_path, models):
    proj = _project(tmp_path)
    fenced = script(tmp_path / "f.json", {"fenced": True, "window": 8192, "replies": [
        "```python\nprint(6 * 7)\n```", "FINAL(42)"] * 2})
    _answered(rlm("run", "what is 6 times 7?", "--model", fenced, cwd=proj))
    system = models[-1].calls[0][0]
    assert system["role"] == "system" and 'A message headed "Project memory"' in system["content"]
    # once something is recorded the block comes, without the guide the prompt replaces
    rlm("memory", "init", cwd=proj, check=True)
    (proj / ".agent" / "conventions.md").write_text("# Conventions\n- dates are UTC\n")
    _answered(rlm("run", "what is 6 times 7?", "--model", fenced, cwd=proj))
    block = models[-1].calls[0][1]["content"]
    assert block.startswith(MEMORY_MARK) and "- dates are UTC" in block
    assert "memory.update(" not in block
    _answered(rlm("run", "what is 6 times 7?", "--model", fenced, "--no-memory", cwd=proj))
    assert "Project memory" not in models[-1].calls[0][0]["content"]


@pytest.mark.timeout(240)
def test_a_one_off_instruction_is_not_a_convention_a_lasting_rule_is(tmp_path, models):
    proj = _project(tmp_path)
    rlm("memory", "init", cwd=proj, check=True)
    conventions = proj / ".agent" / "conventions.md"
    before = conventions.read_text()
    for prompt in ("Never mind, just plot sales by month.", "Now just give me the top five.",
                   "Use UTC this time."):
        s = script(tmp_path / "s.json", ["Done."])
        out = rlm("run", prompt, "--model", s, cwd=proj)
        _answered(out)
        assert "recorded in .agent/conventions.md" not in out.stdout + out.stderr
        assert conventions.read_text() == before
    s = script(tmp_path / "s.json", ["Done."])
    out = rlm("run", "Never mind. From now on, label every axis. Plot sales by month.",
              "--model", s, cwd=proj)
    assert "recorded in .agent/conventions.md (stated_by: user): From now on, label every " \
        "axis" in out.stdout + out.stderr
    rules = [ln for ln in conventions.read_text().splitlines() if "stated_by: user" in ln]
    assert len(rules) == 1 and rules[0].startswith("- From now on, label every axis (stated_by")
