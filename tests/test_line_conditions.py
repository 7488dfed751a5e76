"""A text's lines described by their few-valued words, and the conditions a question
states over them: a goal never completes on a file written without one.

Issue 60's logs run (stop 65): "Count the ERROR lines per service" over a log read as one
string; the 1.5B model counted every `word:` of every line, was shown the wrong file,
finished again, and the goal completed. The log's description now names the values of
each few-valued word position (kernel_ext.line_fields), the question's 'ERROR' is found
among them as a condition (rlm.agent.policy.conditions), and the goal's judge refuses
every completion while no cell spelled it."""

from __future__ import annotations

import json
import random
from functools import partial
from pathlib import Path

import pytest

from kernel_ext.describe import describe_value
from kernel_ext.line_fields import field_lines
from rlm.agent.context_files import format_description
from rlm.agent.policy.conditions import conditions, dropped, how_to_use
from tests import rlmcli
from tests.test_stuck import block, entries, fenced

rlm = partial(rlmcli.rlm, timeout=220)

PATHS = ["/cart", "/home", "/login", "/search"]


def access_log(n: int = 400, seed: int = 7) -> str:
    """An access log unlike the bench's: ip, method, path, status, time."""
    r = random.Random(seed)
    return "".join(
        f"10.0.{r.randint(0, 9)}.{r.randint(1, 250)} {r.choice(['GET', 'GET', 'POST', 'PUT'])} "
        f"{r.choice(PATHS)} {r.choice([200, 200, 200, 404, 500])} {r.randint(2, 900)}ms\n"
        for _ in range(n))


def describe(name: str, text: str) -> str:
    return format_description([describe_value(name, text)], origin="test")


def test_a_logs_few_valued_words_are_described_by_position():
    lines = field_lines(access_log())
    assert [ln.split(" (")[0].strip() for ln in lines] == ["split()[1]", "split()[2]",
                                                          "split()[3]"], lines
    assert "'POST'" in lines[0] and "3 values" in lines[0]
    assert all(f"'{p}'" in lines[1] for p in PATHS)
    assert "'500'" in lines[2]
    text = describe("access", access_log())
    assert "words that take few values, by position in each line:" in text


def test_prose_short_texts_and_garbage_get_no_positions():
    prose = (Path(__file__).parents[1] / "README.md").read_text() * 20
    assert field_lines(prose) == []
    assert field_lines("".join(access_log(19))) == []  # too few lines to call levels
    noise = random.Random(3).randbytes(400_000).decode("latin-1")
    assert field_lines(noise) == []
    assert field_lines(bytes(range(256)).decode("latin-1") * 5000) == []  # control bytes
    assert "fields" not in describe_value("s", "a short string")


def test_a_needles_words_are_not_levels():
    """One line in 3,001 is a needle, not a level: its words are not listed, so a
    question naming them states no condition (the stream-rule test's audit log)."""
    log = ("".join(f"2025-01-01 INFO line {i}\n" for i in range(3000))
           + "2025-01-02 INFO badge R-4623 issued to Ilse Tanaka\n")
    assert field_lines(log) == []
    assert conditions("In the audit log, what badge did Ilse Tanaka get?",
                      [describe("audit", log)]) == []
    mixed = access_log() + "10.0.0.1 PATCH /cart 200 3ms\n"
    line = field_lines(mixed)[0]
    assert "'POST'" in line and "PATCH" not in line and line.endswith("+1 rarer")


def test_a_long_text_is_read_on_a_sample_and_says_so():
    big = access_log(150_000)
    assert len(big) > 4_000_000
    lines = field_lines(big)
    assert lines and all("in the sample" in ln for ln in lines)
    assert "'POST'" in lines[0]


def test_a_question_naming_a_line_word_states_a_condition_and_the_lines_it_means():
    log = access_log()
    desc = describe("access", log)
    question = ("access.log is an access log. Count the POST requests per path and write "
                "counts.txt with one line per path like '/cart: 3'.")
    assert conditions(question, [desc]) == ["POST"]
    # the example's words are the format's, not a condition; without it they would be
    assert "/cart" in conditions(question.replace("like '/cart: 3'", "for /cart"), [desc])
    code = how_to_use("POST", [desc])
    picked = eval(code, {"access": log})  # noqa: S307 - the host's own suggestion, run as shown
    assert picked == [ln for ln in log.splitlines() if ln.split()[1] == "POST"]


def test_a_condition_is_applied_by_a_literal_not_by_a_comment_or_a_name():
    """The local model's cell `# ... their error counts` / `error_counts = ...` filtered
    nothing; the word in its comment and name counted as applying 'ERROR'."""
    desc = describe("access", access_log())
    q = "Count the POST requests per path."
    said = ["# count the post requests\npost_counts = Counter(l.split()[2] for l in lines)"]
    assert dropped(q, [desc], said) == ["POST"]
    for applied in ["[l for l in access.splitlines() if ' POST ' in l]",
                    "sum(1 for l in lines if l.split()[1] == \"post\".upper())",
                    "m = re.findall(rf'^\\S+ POST (\\S+)', access, re.M)",
                    "print(f'{\"POST\"}')", "!grep POST access.log | wc -l"]:
        assert dropped(q, [desc], [applied]) == [], applied
    assert dropped("the POST requests in 2007", [desc], ["x = 2007  # POST"]) == ["POST"]


# ------------------------------------------------------------- through `rlm run`, a goal
WRONG = ("from collections import Counter\n"
         "c = Counter(line.split()[2] for line in access.splitlines())\n"
         "with open('counts.txt', 'w') as f:\n"
         "    f.writelines(f'{k}: {v}\\n' for k, v in c.most_common())\n"
         "print(open('counts.txt').read())")
RIGHT = WRONG.replace("for line in access.splitlines())",
                      "for line in access.splitlines() if line.split()[1] == 'POST')")


def posts_goal(tmp_path: Path, middle: list[str]) -> tuple[list[str], dict[str, int]]:
    """`rlm run` with a goal over an access log: the WRONG cell and its claim, `middle`
    (replies, `{wrong}` the wrong claim), the RIGHT cell and its claim twice. What the
    model read in order (`<complete>` where the goal completed), and the true counts;
    the run ended with the answer and counts.txt holds them."""
    log = access_log()
    (tmp_path / "access.log").write_text(log)
    posts = {p: sum(1 for ln in log.splitlines() if ln.split()[1:3] == ["POST", p])
             for p in PATHS}
    top = max(posts, key=posts.__getitem__)
    wrong_top = max(PATHS, key=lambda p: log.count(f" {p} "))
    wrong = f"FINAL({wrong_top}: {log.count(f' {wrong_top} ')})"
    right = f"FINAL({top}: {posts[top]})"
    replies = [block(WRONG), wrong, *(r.format(wrong=wrong) for r in middle), block(RIGHT),
               right, right]
    s = fenced(tmp_path / "s.json", replies)
    out = rlm("run", "access.log is an access log. Count the POST requests per path and "
              "write counts.txt with one line per path like '/cart: 3'.", "--model", s,
              "--goal", "counts.txt lists every path's POST count", "--autonomous",
              "--gate", "grep -q '^/' counts.txt", "--max-turns", "12", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    seen = []
    for e in entries(res["session_path"]):
        if e["type"] == "message" and e["message"]["role"] in ("user", "tool"):
            seen.append(str(e["message"].get("content")))
        elif e.get("custom_type") == "thread_goal_state" and e["data"]["goal"] \
                and e["data"]["goal"]["status"] == "complete":
            seen.append("<complete>")
    assert res["reason"] == "final", (res, out.stderr[-2000:])
    got = dict(ln.split(": ") for ln in (tmp_path / "counts.txt").read_text().splitlines())
    assert {k: int(v) for k, v in got.items()} == {p: n for p, n in posts.items() if n}
    return seen, posts


@pytest.mark.timeout(240)
def test_a_goal_is_not_completed_while_a_condition_it_states_was_never_applied(tmp_path):
    seen, posts = posts_goal(tmp_path, [block("print(open('counts.txt').read())"),
                                        "{wrong}", "{wrong}"])
    judged = [i for i, t in enumerate(seen) if "Not complete: the goal states 'POST'" in t]
    assert judged, seen
    assert "[line for line in access.splitlines() if 'POST' in line.split()]" in seen[judged[0]]
    top = max(posts, key=posts.__getitem__)
    ran_right = max(i for i, t in enumerate(seen) if f"{top}: {posts[top]}" in t
                    and "Not complete" not in t)
    assert judged[0] < ran_right < seen.index("<complete>"), seen


@pytest.mark.timeout(240)
def test_a_condition_applied_beside_the_file_does_not_complete_its_goal(tmp_path):
    """The logs run (stop 66), one step on: refused for the dropped 'ERROR', the model
    printed the ERROR lines in a cell of their own and finished, errors.txt still as the
    unfiltered cell wrote it. What counts is the code the file came from (the kernel's
    record of which line wrote it: rlm.agent.policy.written), not any cell of the run."""
    beside = "print([l for l in access.splitlines() if l.split()[1] == 'POST'][:3])"
    seen, _ = posts_goal(tmp_path, [block(beside), "{wrong}", "{wrong}"])
    judged = [i for i, t in enumerate(seen)
              if "the goal states 'POST', but the code that wrote counts.txt never uses it"
              in t]
    assert judged, "\n=====\n".join(t[:300] for t in seen)
    assert judged[0] < seen.index("<complete>"), seen
