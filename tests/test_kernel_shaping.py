"""Output shaping is pure: head + tail within the budget, an explicit marker, no ANSI."""

from __future__ import annotations

from rlm.kernel.shaping import HeadTail, shape, split_budget, strip_ansi


def test_strip_ansi_removes_colors_and_keeps_text():
    assert strip_ansi("\x1b[0;31mZeroDivisionError\x1b[0m: x") == "ZeroDivisionError: x"
    assert strip_ansi("plain") == "plain"


def test_short_text_is_unchanged():
    text, elided = shape("hello\n", 1000)
    assert (text, elided) == ("hello\n", 0)


def test_long_text_keeps_head_and_tail_and_says_what_was_elided():
    body = "".join(f"line {i}\n" for i in range(10_000))
    text, elided = shape(body, 2000, "artifacts/x.txt")
    assert text.startswith("line 0\n")
    assert text.endswith("line 9999\n")
    assert len(text) <= 2000
    assert elided == len(body) - sum(split_budget(2000))
    assert f"[... {elided} characters elided; full output: artifacts/x.txt]" in text


def test_headtail_streaming_equals_one_shot():
    chunks = [f"{i:05d}" * (i % 7 + 1) for i in range(3000)]
    acc = HeadTail(*split_budget(1000))
    for c in chunks:
        acc.add(c)
    one, elided = shape("".join(chunks), 1000)
    assert acc.text() == one
    assert acc.elided == elided
    assert acc.total == sum(map(len, chunks))


def test_headtail_single_huge_chunk():
    acc = HeadTail(10, 10)
    acc.add("a" * 5 + "b" * 1000 + "c" * 10)
    assert acc.text().startswith("aaaaabbbbb")
    assert acc.text().endswith("c" * 10)
    assert acc.elided == 1015 - 20
