"""The answer policy on its own (rlm.agent.policy): each decision from fixture facts, no
kernel, no model. The loop's use of it is covered by test_scaffold_answers / test_agent_loop;
the verified rule end to end by test_verified.py."""

from __future__ import annotations

from rlm.agent.nudge import NUDGE_ERROR_TEXT, NUDGE_FAILED, NUDGE_LOOK, NUDGE_NO_CELL
from rlm.agent.policy import (
    LOOP_BREAK_TEMPERATURE,
    RESAMPLE_TEMPERATURE,
    RESAMPLES,
    Accept,
    Answer,
    AnswerPolicy,
    Refuse,
    Resample,
    Rule,
    Run,
)
from rlm.agent.policy.rules import REPEATED, ran_again
from rlm.agent.policy.verify import Shown, claims, verify
from rlm.kernel.types import CellResult
from rlm.session.entries import MessageEntry


def _policy(native: bool = False, max_turns: int | None = 6, has_data: bool = False) -> AnswerPolicy:
    """A policy whose run was given one input, `orders` (the task's data)."""
    p = AnswerPolicy()
    p.start_run(native_tools=native, max_turns=max_turns, has_data=has_data, inputs={"orders"})
    p.turn_note(1)
    return p


def _ok(text: str) -> CellResult:
    return CellResult(status="ok", shaped=text)


def _err(text: str = "KeyError: 'x'") -> CellResult:
    return CellResult(status="error", shaped=text)


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


def _branch(prompt: str, *tools: CellResult) -> list:
    out = [MessageEntry(message={"role": "user", "content": prompt})]
    for r in tools:
        out.append(MessageEntry(message={"role": "tool", "content": r.shaped}, cell=r.to_dict()))
    out.append(MessageEntry(message={"role": "assistant", "content": "answer"}))
    return out


# ------------------------------------------------------------------------------ replies
def test_a_reply_repeating_the_failed_cell_is_resampled_up_to_the_limit():
    p = _policy()
    p.cell("print(x)", _err(), "e1")
    reply = _fence("print(x)")
    decisions = [p.reply(reply, False) for _ in range(RESAMPLES + 1)]
    assert all(isinstance(d, Resample) for d in decisions[:RESAMPLES])
    assert decisions[0].temperature == RESAMPLE_TEMPERATURE
    assert "repeats the cell that just failed" in decisions[0].why
    assert isinstance(decisions[-1], Run)  # the repeat that outlasted the resamples runs
    p.turn_note(2)
    assert isinstance(p.reply(reply, False), Resample)  # a new turn: resamples again
    assert isinstance(p.reply(_fence("print(y)"), False), Run)


def test_a_successful_cell_resampled_only_after_two_runs_and_never_for_tool_calls():
    p = _policy()
    reply = _fence("print(1)")
    p.cell("print(1)", _ok("1"), "e1")
    assert isinstance(p.reply(reply, False), Run)  # a first repeat runs
    p.cell("print(1)", _ok("1"), "e2")
    assert isinstance(p.reply(reply, False), Resample)
    assert isinstance(p.reply(reply, True), Run)  # native tool calls are never resampled
    native = _policy(native=True)
    native.cell("print(1)", _err(), "e1")
    assert isinstance(native.reply(_fence("print(1)"), False), Run)


def test_a_repeated_cell_whose_output_changed_is_polling_it_runs_without_a_note():
    """Issue 58: the third run of a cell whose output moved on (10% -> 20%) is not
    resampled, gets no "its output is the same" note and is not sampled hotter; once its
    output stops changing (or changes only in a counter) it is a repeat again."""
    p = _policy()
    reply = _fence("print(job.poll())")
    for i, out in enumerate(["running 10%", "running 20%", "running 30%"]):
        assert isinstance(p.reply(reply, False), Run)
        v = p.cell("print(job.poll())", _ok(out), f"e{i}")
        assert v.note == "" and not v.looping
        assert p.temperature(0.0) == 0.0
    stalled = p.cell("print(job.poll())", _ok("running 30%"), "e9")
    assert "printed the same output again" in stalled.note and stalled.looping
    assert isinstance(p.reply(reply, False), Resample)
    q = _policy()
    for i in range(4):
        v = q.cell("n += 1; print(n)", _ok(f"iteration {i}"), f"e{i}")
    assert "only a counter, timestamp or id changed" in v.note and v.looping


# -------------------------------------------------------------------------------- cells
def test_cell_notes_and_the_looping_temperature():
    p = _policy()
    first = p.cell("f()", _err(), "e1")
    assert first.note == "" and not first.looping
    assert p.temperature(0.0) == 0.0
    again = p.cell("f()", _err(), "e2")
    assert again.note == REPEATED and again.looping
    assert p.temperature(0.0) == LOOP_BREAK_TEMPERATURE and p.temperature(0.9) == 0.9
    assert p.cell("g()", _ok("1"), "e3").note == ""
    assert p.temperature(0.0) == 0.0  # a new cell ends the loop
    same = ran_again("the same cell printed the same output again")
    assert "printed the same output again: nothing new" in same
    assert p.cell("g()", _ok("1"), "e4") .note == same
    third = p.cell("g()", _ok("1"), "e5")
    assert third.note == same and third.looping
    native = _policy(native=True)
    native.cell("f()", _err(), "e1")
    assert native.cell("f()", _err(), "e2").looping and native.temperature(0.0) == 0.0


def test_the_last_turn_note_only_for_fenced_models_that_ran_cells():
    p = _policy(max_turns=3)
    assert p.turn_note(3) is None  # no cell ran
    p.cell("print(1)", _ok("1"), "e1")
    note = p.turn_note(3)
    assert note is not None and "last turn (3 of 3)" in note.text and note.origin == "nudge"
    assert _policy(native=True, max_turns=3).turn_note(3) is None


# ------------------------------------------------------------------------------ answers
def test_an_answer_before_any_cell_is_refused_once_then_accepted_unverified():
    p = _policy()
    branch = _branch("What is six times seven?")
    first = p.answer(Answer("123", "text"), branch)
    assert isinstance(first, Refuse) and first.text == NUDGE_NO_CELL and first.origin == "nudge"
    second = p.answer(Answer("123", "text"), branch)
    assert isinstance(second, Accept) and not second.verified and "no cell ran" in second.why
    assert second.unverified_claims == ["123"]
    data = _policy(has_data=True)
    assert data.answer(Answer("x", "reply"), branch).text == NUDGE_LOOK


def test_prose_after_a_failed_cell_is_refused_with_the_failed_nudge():
    p = _policy()
    p.cell("f()", _err(), "e1")
    d = p.answer(Answer("It is 7.", "reply"), _branch("what?", _err()))
    assert isinstance(d, Refuse) and d.text == NUDGE_FAILED


def test_an_error_text_answer_is_refused_once_for_every_model():
    for native in (False, True):
        p = _policy(native=native)
        p.cell("print(1)", _ok("1"), "e1")
        d = p.answer(Answer("NameError: name 'x' is not defined", "final"), _branch("q", _ok("1")))
        assert isinstance(d, Refuse) and d.key == NUDGE_ERROR_TEXT and d.origin == "nudge"
        again = p.answer(Answer("NameError: name 'x' is not defined", "final"), [])
        assert isinstance(again, Accept) and "error message" in again.why


def test_a_final_var_is_read_only_when_a_rule_needs_its_value():
    reads: list[str] = []

    def read(name: str) -> str:
        reads.append(name)
        return "42"

    p = _policy()  # no cell ran: the no-cell nudge refuses without reading
    assert isinstance(p.answer(Answer("total", "var", read=read), _branch("q")), Refuse)
    assert reads == []
    p.cell("total = len(orders) * 7\nprint(total)", _ok("42"), "e1")
    d = p.answer(Answer("total", "var", read=read), _branch("q", _ok("42")))
    assert isinstance(d, Accept) and d.verified and d.evidence == {"42": ["e1"]}
    assert reads == ["total"]


def test_ungrounded_text_is_refused_once_and_native_models_are_not_refused():
    p = _policy()
    p.cell("print(3)", _ok("3"), "e1")
    branch = _branch("median?", _ok("3"))
    d = p.answer(Answer("Lyon, with 431 orders", "text"), branch)
    assert isinstance(d, Refuse) and "figures (431)" in d.text
    n = _policy(native=True)
    n.cell("print(3)", _ok("3"), "e1")
    d = n.answer(Answer("Lyon, with 431 orders", "reply"), branch)
    assert isinstance(d, Accept) and not d.verified
    assert set(d.unverified_claims) == {"Lyon", "431"}


def test_words_of_an_earlier_prompt_are_the_questions_not_claims():
    """A right answer was refused because it repeated "December" from an earlier prompt of
    the session (the check looked at the latest prompt only)."""
    p = _policy()
    p.cell("print(len(orders))", _ok("412"), "e1")
    branch = [MessageEntry(message={"role": "user", "content": "Look at December only."}),
              MessageEntry(message={"role": "assistant", "content": "ok"}),
              *_branch("How many orders?", _ok("412"))]
    d = p.answer(Answer("412 orders in December", "text"), branch)
    assert isinstance(d, Accept) and d.verified and d.evidence == {"412": ["e1"]}


# ------------------------------------------------------------------------- the rule seam
def test_a_rule_plugs_in_and_is_consulted_in_order():
    class NoLyon(Rule):
        def on_answer(self, facts, answer, asked, branch):
            if "Lyon" in answer.text and "no-lyon" not in facts.refused:
                return Refuse("Not Lyon.", "refused Lyon", key="no-lyon")
            return None

        def on_cell(self, facts, cell):
            return "\n[checked]" if cell.ok else None

    p = AnswerPolicy()
    p.rules.insert(0, NoLyon())
    p.start_run(native_tools=True, max_turns=None, has_data=False, inputs={"orders"})
    assert p.cell("print(orders[0])", _ok("Lyon"), "e1").note == "\n[checked]"
    assert p.answer(Answer("Lyon", "reply"), []).text == "Not Lyon."
    d = p.answer(Answer("Lyon", "reply"), [])
    assert isinstance(d, Accept) and d.verified  # refused once, then judged as usual


# ------------------------------------------------------------------------ verify (pure)
def _v(answer, outputs, *, source="text", codes=(), prompts=("?",)):
    shown = [Shown(f"e{i}", o) for i, o in enumerate(outputs, 1)]
    return verify(answer, source=source, shown=shown, codes=list(codes) or ["pass"],
                  prompts=list(prompts), cells_run=max(1, len(outputs)), last_cell_ok=True,
                  final_entry=f"e{len(outputs)}" if outputs else "e0")


def test_a_claim_a_refusal_named_stays_a_claim_though_a_prompt_now_holds_it():
    """A goal's refusal is a prompt; a prompt's words are the question's. The claims it named
    (the policy's `dispute`) are still checked after it: otherwise repeating the same invented
    answer would pass the second time, the refusal having quoted it."""
    refusal = ("Your answer is not supported: the answer's figures (1,800 and 12.5%) and names "
               "(Lyon) appear in no output of this run.")
    prompts = ["Which city is busiest?", refusal]
    answer = "Lyon, with 1,800 orders (12.5%)"
    assert [c.text for c in claims(answer, prompts)] == ["orders"]  # the guard off: laundered
    off = verify(answer, source="text", shown=[Shown("e1", "orders by city: Paris 431")],
                 codes=["print(t)"], prompts=prompts, cells_run=1, last_cell_ok=True)
    assert off.verified  # an invented figure and city pass on a word an output holds
    named = frozenset({"lyon", "1,800", "12.5%"})
    assert [c.text for c in claims(answer, prompts, disputed=named)] == ["Lyon", "1,800", "12.5%"]
    shown = [Shown("e1", "orders by city: Paris 431")]
    v = verify(answer, source="text", shown=shown, codes=["print(t)"], prompts=prompts,
               cells_run=1, last_cell_ok=True, disputed=named)
    assert not v.verified and set(v.unverified_claims) == {"Lyon", "1,800", "12.5%"}
    p = AnswerPolicy()
    p.dispute(["Lyon", "1,800"])
    p.start_run(native_tools=False, max_turns=None, has_data=False)  # a continuation's run
    assert p.disputed == {"lyon", "1,800"}  # the session's, not the run's


def test_claims_are_figures_and_names_else_content_words():
    assert [c.text for c in claims("N725MQ, with 1000 flights", ["Which plane flew most?"])] == \
        ["N725MQ", "1000"]
    assert [c.text for c in claims("EV", ["Which carrier?"])] == ["EV"]
    assert [c.text for c in claims("9E had 3.5% delays", ["?"])] == ["9E", "3.5%"]
    assert [c.text for c in claims("bath, with the highest sales in 2025",
                                     ["In 2025, which category had the most sales?"])] == \
        ["bath"]
    # no figure, name or content word: the answer's own words are what it claims
    assert [c.text for c in claims("Based on the output, the answer is yes", ["?"])] == ["yes"]
    assert [c.text for c in claims("Badge not found", ["What badge did Amara get?"])] == \
        ["not", "found"]
    assert [c.text for c in claims("badge", ["What badge did Amara get?"])] == ["badge"]
    assert claims("", ["?"]) == [] and claims("the", ["?"]) == []


def test_claimless_answer_verified_only_by_data():
    """An answer with no figure, name or content word ("Badge not found", "ok", "Yes") is
    verified only when an output of code that read the data shows its words: from the
    needle seeds 7 and 8, whose "Badge not found" came from a log typed into the cell."""
    typed = 'audit = "2025-01-01 INFO ok"\nprint("Badge not found")'
    v = verify("Badge not found", source="final", codes=[typed], prompts=["What badge?"],
               shown=[Shown("e1", "Badge not found\n", typed, depends=False)],
               cells_run=1, last_cell_ok=True, final_entry="e1", final_depends=False)
    assert not v.verified and "reads none of the task's data" in (v.why or "")
    assert v.unverified_claims == ["not", "found"]
    read = "hits = [l for l in log if 'Amara' in l]\nprint('not found' if not hits else hits)"
    v = verify("Badge not found", source="text", codes=[read], prompts=["What badge?"],
               shown=[Shown("e1", "not found\n", read)], cells_run=1, last_cell_ok=True)
    assert v.verified  # the question's word "badge" is not the answer's claim
    v = verify("Badge not found", source="text", codes=[read], prompts=["What badge?"],
               shown=[Shown("e1", "['K-2182 granted']\n", read)], cells_run=1, last_cell_ok=True)
    assert not v.verified and v.unverified_claims == ["not", "found"]
    assert verify("Yes", source="text", codes=["print(df.x.any())"], prompts=["Any x?"],
                  shown=[Shown("e1", "True\n", "print(df.x.any())")], cells_run=1,
                  last_cell_ok=True).verified
    assert not verify("ok", source="final", codes=["print(len(df))"], prompts=["How many?"],
                      shown=[Shown("e1", "3\n", "print(len(df))")], cells_run=1,
                      last_cell_ok=True, final_entry=None).verified
    empty = verify("", source="text", codes=["print(len(df))"], prompts=["How many?"],
                   shown=[Shown("e1", "3\n", "print(len(df))")], cells_run=1, last_cell_ok=True)
    assert not empty.verified and "empty" in (empty.why or "")


def test_every_claim_must_be_shown():
    assert not _v("N725MQ, with 1000 flights", ["N725MQ"]).verified
    assert _v("N725MQ, with 1000 flights", ["N725MQ"]).unverified_claims == ["1000"]
    ok = _v("N725MQ, with 575 flights", ["tailnum\nN725MQ    575"])
    assert ok.verified and ok.evidence == {"N725MQ": ["e1"], "575": ["e1"]}
    assert _v("EV", ["EV"]).verified
    assert not _v("EVA", ["EV"]).verified and not _v("EV", ["EVENT"]).verified
    assert _v("about 2253.44 more", ["2253.4400000001"]).verified
    assert _v("23.12%", ["0.2312"]).verified and not _v("1000", ["10"]).verified
    assert _v("1,800 words", ["1800"]).verified


def test_a_figure_printed_from_typed_text_is_not_evidence():
    """The local model copied its prompt's example into a cell, `print("Lyon, with 431
    orders")`: that output held the answer it went on to give. A figure a cell prints from
    its own string literal is not evidence; the same figure computed (here or in another
    cell) is; a format spec is not typed text. (A number literal printed through a name,
    `n = 431; print(n)`, is not caught: not seen on the model.)"""
    def v(answer, *cells):
        shown = [Shown(f"e{i}", out, code) for i, (code, out) in enumerate(cells, 1)]
        return verify(answer, source="text", shown=shown, codes=[c for c, _ in cells],
                      prompts=["Which city has the most orders?"], cells_run=len(cells),
                      last_cell_ok=True)

    copied = v("Lyon, with 431 orders", ('print("Lyon, with 431 orders")', "Lyon, with 431 orders"))
    assert not copied.verified and copied.unverified_claims == ["431"]
    counted = ('print(orders["city"].value_counts().head(1))', "city\nLyon    431")
    assert v("Lyon, with 431 orders", counted, ('print("Lyon, with 431 orders")',
                                                 "Lyon, with 431 orders")).evidence["431"] == ["e1"]
    assert v("Lyon, with 431 orders", ('n = counts.max()\nprint(f"Lyon: {n:>10}")',
                                       "Lyon:        431")).verified  # `>10` is a spec
    assert v("Lyon, 12.5% of orders", ('print(f"Lyon: {share:.1%}")', "Lyon: 12.5%")).verified


def test_an_answer_found_whole_in_a_prompt_is_an_echo_not_a_finding():
    given = ("Done means: late_rate.csv exists and holds exactly what the goal asks; the "
             "check `head -1 late_rate.csv` passes.")
    echo = _v("late_rate.csv exists and holds exactly what the goal asks", ["GLS 0.4"],
              prompts=(given,))
    assert not echo.verified and "repeats words it was given" in str(echo.why)
    # a short answer the prompt happens to hold is judged as usual
    assert _v("GLS", ["GLS 0.4"], prompts=("Is it GLS or DPD?",)).verified
    assert _v("GLS has the highest late share of 0.4", ["GLS 0.4"], prompts=(given,)).verified


def test_a_final_value_is_evidence_unless_the_model_typed_it():
    computed = _v("42", [], source="final", codes=["final(6 * 7)"])
    assert computed.verified and computed.evidence == {"42": ["e0"]}
    typed = _v("42", [], source="final", codes=['final("42")'])
    assert not typed.verified and typed.unverified_claims == ["42"]
    mixed = _v("N725MQ, with 1000 flights", [], source="final",
               codes=["top = df.tailnum.value_counts().idxmax()",
                      "final(f'{top}, with 1000 flights')"])
    assert not mixed.verified and mixed.unverified_claims == ["1000"]


def test_numbers_code_computes_with_are_not_typed_answers():
    """`rows.append(3); final(str(rows))` computes [1, 2, 3]: the 3 is an operand, not
    an answer the model typed; `final(42)` and `answer = 1000` are typed."""
    assert _v("[1, 2, 3]", [], source="final", codes=["rows.append(3)\nfinal(str(rows))"]).verified
    assert not _v("42", [], source="final", codes=["final(42)"]).verified
    assert not _v("1000", [], source="final", codes=["answer = 1000", "final(answer)"]).verified
    assert _v("575", [], source="final", codes=["n = df.head(10).x.sum()\nfinal(n)"]).verified


def test_a_whole_table_as_the_answer_is_checked_whole_and_recorded_bounded():
    table = "\n".join(f"row{i} {i * 3}.5" for i in range(2000))
    v = _v(table, [table])
    assert v.verified and len(v.evidence) == 100
    wrong = _v(table + "\nrow9999 1.25", [table])
    assert not wrong.verified and wrong.unverified_claims == ["row9999", "1.25"]


def test_done_is_the_hosts_to_check_only_where_a_goal_is():
    """"Done" claims nothing an output shows: with a goal in force (or completed) the host
    checks its files and gates, so the answer is not refused for it; without one, it is an
    answer that says nothing checked."""
    shown = [Shown("e1", "3\n", "print(len(df))")]
    kw = dict(source="text", codes=["print(len(df))"], prompts=["Write report.md"],
              shown=shown, cells_run=1, last_cell_ok=True)
    assert verify("report.md is written and correct", host_checks=True, **kw).verified
    assert verify("Done.", host_checks=True, **kw).verified
    plain = verify("Done.", **kw)
    assert not plain.verified and plain.unverified_claims == ["done"]
    assert not verify("done, not found", host_checks=True, **kw).verified  # a finding stays one


def test_a_choice_among_the_questions_words_needs_an_output():
    """"Which is larger, A or B?" answered "B": every word is the question's, so it was a
    claimless answer, verified with no output at all. Its word is its claim now."""
    kw = dict(source="text", prompts=["Which carrier is later, GLS or DPD?"], cells_run=1,
              last_cell_ok=True)
    typed = "print('DPD')"
    assert not verify("DPD", codes=[typed], shown=[Shown("e1", "DPD\n", typed, depends=False)],
                      **kw).verified
    read = "late = df.groupby('carrier').late.mean().idxmax()\nprint(late)"
    assert verify("DPD", codes=[read], shown=[Shown("e1", "DPD\n", read)], **kw).verified
