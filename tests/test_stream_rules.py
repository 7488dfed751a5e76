"""Stream rules, the pure half: rule files parsed, replies matched while they stream (per
scope, aware of code structure), and the per-rule limits decided from the branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.agent.policy.stream import DEMOTE_AFTER, RULE_INJECTION, StreamRules
from rlm.agent.steer.files import CATCH_ALL, RuleError, load_rules, parse_rule
from rlm.agent.steer.match import ReplyScanner, StreamRule, mask_code, match_code, written_files
from rlm.session.entries import CustomEntry, MessageEntry

FIX = Path(__file__).parent / "fixtures" / "rules"


def _rule(**kw) -> StreamRule:
    base = {"name": "r", "conditions": (r"read_csv\(",), "reminder": "use parquet"}
    return StreamRule(**{**base, **kw})


def _stream(scanner: ReplyScanner, text: str, size: int = 7):
    """Feed `text` in pieces of `size` characters, as a model streams it."""
    for i in range(0, len(text), size):
        hit = scanner.feed(text[i:i + size])
        if hit is not None:
            return hit, i + size
    return scanner.finish(), len(text)


def test_a_rule_file_parses_into_a_code_rule():
    rule, always, listed = parse_rule((FIX / "no_read_csv.md").read_text(), name="no_read_csv",
                                      source="x")
    assert rule is not None and always is None and listed is None
    assert rule.scope == "code" and rule.interrupt == "always" and rule.repeat is None
    assert rule.reminder.startswith("Do not use pandas.read_csv")


def test_the_match_stops_the_stream_in_the_code_block_before_its_end():
    text = (FIX / "reply.txt").read_text()
    scanner = ReplyScanner([_rule()])
    hit, at = _stream(scanner, text)
    assert hit is not None and hit.where == "code" and hit.found == "read_csv(" and hit.interrupts
    assert at < len(text)  # stopped mid-stream: the rest of the reply was never read


def test_a_match_inside_a_string_literal_or_a_comment_does_not_count():
    text = (FIX / "reply_in_string.txt").read_text()
    assert _stream(ReplyScanner([_rule()]), text)[0] is None
    # unless the rule says so
    assert _stream(ReplyScanner([_rule(in_strings=True)]), text)[0] is not None
    # prose is not code: a code rule ignores it, a text rule reads it
    prose = "I will not call read_csv( here.\n"
    assert _stream(ReplyScanner([_rule()]), prose)[0] is None
    assert _stream(ReplyScanner([_rule(scope="text")]), prose)[0].where == "text"


def test_masking_keeps_length_and_blanks_open_strings_to_the_end():
    code = 'x = "a#b" # c\ny = \'\'\'read_csv(\nz\'\'\'\nread_csv(1)'
    masked = mask_code(code)
    assert len(masked) == len(code) and masked.count("\n") == code.count("\n")
    assert "read_csv(" in masked and masked.count("read_csv(") == 1  # only the real call
    assert "#b" not in masked and "c" not in masked.split("\n")[0][8:]
    assert "read_csv(" not in mask_code('s = "unterminated read_csv(')


def test_file_scopes_read_cells_that_write_a_matching_file():
    rule = _rule(name="py", conditions=(CATCH_ALL,), scope="*.py")
    assert written_files("open('fix.py', 'w').write(src)") == {"fix.py"}
    assert match_code(rule, "open('fix.py', 'w').write('x = 1')") is not None
    assert match_code(rule, "Path('out/a.py').write_text(src)") is not None
    assert match_code(rule, "open('data.csv', 'w').write('x')") is None
    assert match_code(rule, "print(open('fix.py').read())") is None  # reading is not writing


def test_a_glob_condition_becomes_a_file_scope_and_front_matter_is_checked():
    rule, _, _ = parse_rule("---\ncondition: '*.py'\nrepeat: once\n---\nRun ruff.", name="g",
                            source="x")
    assert rule.scope == "*.py" and rule.conditions == (CATCH_ALL,) and rule.repeat == "once"
    rule, _, _ = parse_rule("---\ncondition: x\nrepeat: {gap: 3}\nscope: code(*.sql)\n---\nb",
                            name="g", source="x")
    assert rule.repeat == 3 and rule.scope == "*.sql"
    for bad, why in [("condition: 'read_csv('", "not a valid regex"),
                     ("condition: x\nscope: prose", "scope 'prose'"),
                     ("condition: x\ninterrupt: sometimes", "interrupt 'sometimes'"),
                     ("condition: x\nrepeat: twice", "repeat 'twice'"),
                     ("title: only", "no condition"),
                     ("condition: [x", "not valid YAML")]:
        with pytest.raises(RuleError, match=why):
            parse_rule(f"---\n{bad}\n---\nbody", name="b", source="x")


def test_rule_files_from_home_project_and_other_tools(tmp_path):
    home, project = tmp_path / "home", tmp_path / "proj"
    (home / "rules").mkdir(parents=True)
    (project / ".rlm" / "rules").mkdir(parents=True)
    (project / ".cursor" / "rules").mkdir(parents=True)
    (home / "rules" / "style.md").write_text("---\nalways: true\n---\nPrint small outputs.")
    (project / ".rlm" / "rules" / "no_read_csv.md").write_text(
        (FIX / "no_read_csv.md").read_text())
    (project / ".rlm" / "rules" / "broken.md").write_text("---\ncondition: '('\n---\nx")
    (project / ".cursor" / "rules" / "tests.mdc").write_text(
        "---\ndescription: How tests are written here\nglobs:\nalwaysApply: false\n---\nUse pytest.")
    (project / ".clinerules").write_text("Never push to main.")
    rules = load_rules(project, home)
    assert [r.name for r in rules.stream] == ["no_read_csv"]
    assert [x.name for x in rules.always] == ["style", "clinerules"]
    assert [(x.name, x.text) for x in rules.listed] == [("tests", "How tests are written here")]
    assert len(rules.problems) == 1 and "broken.md skipped" in rules.problems[0]
    note = StreamRules(rules).context_note([])
    assert "Print small outputs." in note and "Never push to main." in note
    assert "- tests: How tests are written here" in note


def test_cursor_nested_and_legacy_rules_windsurf_rules_and_every_glob_are_read(tmp_path):
    from rlm.agent.steer.match import match_code

    home, project = tmp_path / "home", tmp_path / "proj"
    (project / ".cursor" / "rules" / "frontend").mkdir(parents=True)
    (project / ".windsurf" / "rules").mkdir(parents=True)
    (project / ".cursor" / "rules" / "frontend" / "notebooks.mdc").write_text(
        "---\nglobs: '*.ipynb, reports/*.md'\nalwaysApply: false\n---\nClear outputs first.")
    (project / ".cursorrules").write_text("Answer in British English.")
    (project / ".windsurf" / "rules" / "units.md").write_text(
        "---\ntrigger: always_on\n---\nAmounts are in cents.")
    rules = load_rules(project, home)
    (nb,) = rules.stream
    assert nb.name == "notebooks" and nb.repeat == "once"
    assert match_code(nb, "open('out/a.ipynb', 'w').write(s)") is not None
    assert match_code(nb, "Path('reports/q3.md').write_text(s)") is not None  # second glob
    assert match_code(nb, "open('a.csv', 'w').write(s)") is None
    assert {x.name for x in rules.always} == {"cursorrules", "units"}
    note = StreamRules(rules).context_note([])
    assert "Answer in British English." in note and "Amounts are in cents." in note


def _injection(rule: str) -> CustomEntry:
    return CustomEntry(custom_type=RULE_INJECTION, content="x", data={"rule": rule})


def _reply() -> MessageEntry:
    return MessageEntry(message={"role": "assistant", "content": "ok"})


def test_limits_are_per_rule_per_turn_and_per_session():
    from rlm.agent.steer.files import RuleSet

    a, b = _rule(name="a"), _rule(name="b", conditions=("print",))
    policy = StreamRules(RuleSet(stream=[a, b]))
    branch: list = []
    for _ in range(2):  # a fires twice in one turn: silenced for the rest of it
        scanner = policy.watch(branch)
        hit = scanner.feed("```python\ndf = pd.read_csv('x')\n")
        assert hit.rule.name == "a"
        branch.append(policy.hit(hit, branch).entry)
    assert [r.name for r in policy.active(branch)] == ["b"]  # b is not silenced by a
    policy.start_turn()
    assert [r.name for r in policy.active(branch)] == ["a", "b"]
    abort = policy.hit(policy.watch(branch).feed("```python\nread_csv(1)\n"), branch)
    assert abort.demoted and f"fired {DEMOTE_AFTER} times" in abort.demoted
    branch.append(abort.entry)
    policy.start_turn()
    assert [r.name for r in policy.active(branch)] == ["b"]  # demoted: no longer interrupts
    assert "## Rule: a (you broke it 3 times)\nuse parquet" in policy.context_note(branch)


def test_many_rules_stopping_one_turn_end_with_a_reply_let_through():
    """Four rules within their own limits could stop one turn eight times; after TURN_STOPS
    the turn's next reply is let through (a turn always ends; an abort is never an error),
    and the next turn watches again."""
    from rlm.agent.policy.stream import TURN_STOPS
    from rlm.agent.steer.files import RuleSet

    rules = [_rule(name=f"r{i}") for i in range(4)]
    policy = StreamRules(RuleSet(stream=rules))
    branch: list = []
    for _ in range(TURN_STOPS):
        hit = policy.watch(branch).feed("```python\ndf = pd.read_csv('x')\n")
        branch.append(policy.hit(hit, branch).entry)
    assert policy.watch(branch) is None
    policy.start_turn()
    assert policy.watch(branch) is not None


def test_once_and_gap_repeats_are_read_from_the_branch():
    from rlm.agent.steer.files import RuleSet

    once, gap = _rule(name="once", repeat="once"), _rule(name="gap", repeat=2)
    policy = StreamRules(RuleSet(stream=[once, gap]))
    branch = [_reply(), _injection("once"), _injection("gap")]
    assert policy.active(branch) == []
    branch.append(_reply())
    assert policy.active(branch) == []  # one reply since: the gap is 2
    branch.append(_reply())
    assert [r.name for r in policy.active(branch)] == ["gap"]  # once stays spent


def test_a_non_interrupting_match_is_a_note_and_the_reply_goes_on():
    scanner = ReplyScanner([_rule(interrupt="prose-only")])
    assert _stream(scanner, (FIX / "reply.txt").read_text())[0] is None
    assert [m.rule.name for m in scanner.notes] == ["r"] and not scanner.notes[0].interrupts


def test_native_tool_call_cells_are_checked_when_the_reply_is_whole():
    scanner = ReplyScanner([_rule()])
    assert scanner.feed("Loading.") is None
    hit = scanner.finish(["import pandas as pd\npd.read_csv('a')"])
    assert hit is not None and hit.where == "code"


def test_the_readme_rule_file_loads_and_stops_a_read_csv_cell(tmp_path):
    """The README's rule block, run as written: the file it writes loads as a code rule that
    fires once and stops a reply using read_csv."""
    import subprocess

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    start = readme.index("mkdir -p .rlm/rules")
    block = readme[start:readme.index("\nRULE\n", start) + len("\nRULE\n")]
    subprocess.run(["bash", "-c", block], cwd=tmp_path, check=True)
    rules = load_rules(tmp_path, tmp_path / "home")
    assert not rules.problems and [r.name for r in rules.stream] == ["parquet"]
    rule = rules.stream[0]
    assert rule.scope == "code" and rule.repeat == "once" and "read_parquet" in rule.reminder
    hit, _ = _stream(ReplyScanner([rule]), "```python\ndf = pd.read_csv('a.csv')\n```\n")
    assert hit is not None and hit.found == "read_csv("


def test_always_rules_past_their_budget_are_listed_by_their_first_line():
    from rlm.agent.policy.stream import ALWAYS_BUDGET
    from rlm.agent.steer.files import Listed, RuleSet

    big = "x" * (ALWAYS_BUDGET - 100)
    rules = RuleSet(always=[Listed("first", "Keep it short.\n" + big, "a.md"),
                            Listed("second", "Use UTC.\n" + big, "b.md")])
    note = StreamRules(rules).context_note([])
    assert "## Rule: first\nKeep it short." in note and "## Rule: second" not in note
    assert "- second: Use UTC. (b.md)" in note and len(note) < 2 * ALWAYS_BUDGET


def test_call_arguments_decode_a_cell_cut_anywhere_and_give_each_line():
    """A native call's `{"code": ...}` in pieces of any size, escapes cut in two included:
    the code so far comes at each line's end, the whole cell when the string closes."""
    import json

    from rlm.agent.steer.match import CallArguments

    code = 'a = "tab\\there"\nprint("caf\u00e9", \'q"uote\')\nb = a\n'
    raw = json.dumps({"code": code}, ensure_ascii=True)
    for size in (1, 2, 5, 24):
        args, given = CallArguments(), []
        for i in range(0, len(raw), size):
            out = args.feed(raw[i:i + size])
            if out is not None:
                given.append(out)
        assert args.closed and given[-1] == code, size
        assert all(code.startswith(g) for g in given)
        if size <= 5:  # each line, as it ended (a bigger piece may end two at once)
            assert {g.count("\n") for g in given} >= {1, 2, 3}, size


def test_call_arguments_give_a_long_cell_a_bounded_number_of_times():
    """A 300 KB cell of 10,000 lines in 24-character pieces: given at every line while it
    is short, then each time it grows by a quarter, so the joins stay linear in all."""
    import json

    from rlm.agent.steer.match import LINE_BY_LINE, CallArguments

    code = "".join(f"row_{i:05d} = {i} * 2  # {'x' * 10}\n" for i in range(10_000))
    raw = json.dumps({"code": code})
    args, given = CallArguments(), []
    for i in range(0, len(raw), 24):
        out = args.feed(raw[i:i + 24])
        if out is not None:
            given.append(len(out))
    assert given[-1] == len(code)
    short = sum(1 for n in given if n <= LINE_BY_LINE)
    assert len(given) - short < 30, len(given)  # past the bound: geometric, not per line
    assert sum(given) < 8 * len(code) + LINE_BY_LINE * short


# ------------------------------------------------ issue 57 item 7: a rule's regex is bounded
CATASTROPHIC = r"(a|a)+$"  # 2**n ways to split n a's: unbounded on an engine without a limit


def test_a_catastrophic_condition_is_no_match_one_notice_and_off_for_the_session():
    """A rule file is kernel-writable (`.rlm/rules/`): its regex runs with a time bound,
    a search that runs out of it is no match, and the rule is turned off (one notice
    naming it) while the other rules go on."""
    from rlm.agent.steer.files import RuleSet

    slow = _rule(name="slow", conditions=(CATASTROPHIC,), scope="text", source="slow.md")
    fine = _rule(name="fine", conditions=(r"read_parquet",), scope="text")
    rules = StreamRules(RuleSet(stream=[slow, fine]))
    scanner = rules.watch([])
    assert scanner is not None
    text = "a" * 60 + "!\nthen read_parquet it\n"
    hit, _ = _stream(scanner, text, size=61)
    assert hit is not None and hit.rule.name == "fine"
    (said,) = scanner.take_notices()
    assert "'slow' (slow.md)" in said and "off for the rest of this session" in said
    assert scanner.take_notices() == []
    assert [r.name for r in rules.active([])] == ["fine"]  # the next reply skips it too


def test_a_rule_file_a_cell_writes_cannot_stall_the_host(tmp_path):
    """Through the CLI: a cell writes a rule with a catastrophic condition; the next run's
    reply would cost the host exponential time on it. The run ends normally and says once
    which rule it turned off."""
    import json

    from tests.rlmcli import call, rlm, script

    rule = f"---\ncondition: '{CATASTROPHIC}'\nscope: text\n---\nNever say a lot of a."
    write = ("import os\nos.makedirs('.rlm/rules', exist_ok=True)\n"
             f"open('.rlm/rules/slow.md', 'w').write({rule!r})")
    first = script(tmp_path / "one.json", [call(write), call("final('written')")])
    rlm("run", "write it", "--model", first, "--json", cwd=tmp_path, check=True)
    assert (tmp_path / ".rlm" / "rules" / "slow.md").is_file()
    reply = {"content": "a" * 60 + "!\n", "tool_calls": [
        {"name": "python", "arguments": {"code": "print(int(open('six.txt').read()) * 7)\n"
                                                 "final('42')"}}]}
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    proc = rlm("run", "go", "--model", script(tmp_path / "two.json", [reply]), "--json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["final"] == "42"
    said = [line for line in proc.stderr.splitlines() if "rule 'slow'" in line]
    assert len(said) == 1 and "off for the rest of this session" in said[0], proc.stderr
