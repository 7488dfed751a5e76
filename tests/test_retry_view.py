"""A reply that repeats the cell that just failed is drawn again from a context without
that cell (rlm.agent.policy.retry): what each model call was sent, through the root."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.agent.policy import retry
from rlm.events import RunEnded
from rlm.session.store import SessionStore
from tests.fenced import Fenced, cell, run_fenced

FAILING = "best = sales.groupby('region')['amount'].sum().reset_index()\nprint(best['month'])"
OTHER = "print(sales.groupby('region')['amount'].sum().idxmax())"


def _run(home: Path, tmp: Path, replies: list[str]) -> tuple[Fenced, RunEnded, SessionStore]:
    path = tmp / "sales.csv"
    path.write_text("region,amount\nNorth,10\nSouth,30\nNorth,5\n")
    return run_fenced(home, path, "Which region sold most?", replies, max_turns=10)


def _text(call: list[dict]) -> str:
    return "\n".join(str(m.get("content") or "") for m in call)


def test_the_resample_of_a_repeated_failing_cell_does_not_see_that_cell(_isolated_home,
                                                                        tmp_path):
    llm, end, session = _run(_isolated_home, tmp_path, [
        cell(FAILING), cell(FAILING), cell(OTHER), "FINAL(South)"])
    assert end.final == "South"
    failed_turn, resample, after = llm.calls[1], llm.calls[2], llm.calls[3]
    assert FAILING in _text(failed_turn) and "KeyError" in _text(failed_turn)
    # the resample: no copy of the failed cell, and a note of what failed in its place
    assert FAILING not in _text(resample), _text(resample)[-3000:]
    last = resample[-1]
    assert last["role"] == "user" and last["content"].startswith(
        "A cell you sent failed at `print(best['month'])`:\nKeyError: 'month'")
    assert "Do not send that cell again" in last["content"]
    assert "Which region sold most?" in _text(resample)  # the question stays
    # the next turn sees the whole branch again, and the log keeps every exchange
    assert FAILING in _text(after) and "A cell you sent failed" not in _text(after)
    kinds = [e.to_dict().get("custom_type") for e in session.branch()]
    assert kinds.count("resampled") == 1


def test_a_cell_that_never_failed_is_not_left_out():
    from rlm.session.entries import MessageEntry
    branch = [MessageEntry(message={"role": "user", "content": "q"}),
              MessageEntry(message={"role": "assistant", "content": cell("x = 1")}),
              MessageEntry(message={"role": "tool", "content": "ok"})]
    assert retry.without_cell(branch, "y = 2") is None
    view = retry.without_cell(branch, "x = 1")
    assert view is not None and [m.message["role"] for m in view] == ["user", "user"]


@pytest.mark.parametrize("result, want", [
    ("----> 3 m.group(1)\n\nAttributeError: 'NoneType' object has no attribute 'group'\n\n"
     "[Your search found nothing, but `t` holds 'X' (1 line):\n    a X b]",
     "A cell you sent failed at `m.group(1)`:\nAttributeError: 'NoneType' object has no "
     "attribute 'group'\n\n[Your search found nothing, but `t` holds 'X' (1 line):\n    a X b]"),
    ("Traceback\n  File x\nStopIteration\n", "A cell you sent failed:\nStopIteration"),
    ("the kernel died", "A cell you sent failed:\nthe kernel died"),
])
def test_the_note_keeps_the_error_and_the_hosts_notes_not_the_code(result, want):
    assert retry.note(result).startswith(want)
