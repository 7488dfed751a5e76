"""A fenced-code reply stops where the rest could never run (issue 33 / 32: the stop-44
long-run transcripts spent 41% of their generated tokens after the first closed fence).

The cut: after the first code block that surely shows something, or before a block that
repeats an earlier one of the same reply. Scripted fenced-code model (like the local one)
streamed in 16-character chunks, real kernels; assertions on the log, on what reached the
model and on what the user saw.
"""

from __future__ import annotations

import json

from rlm.agent.codeparse import reply_end, surely_shows
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import ModelReply, ModelText, RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore


class _Fenced(ScriptedLLM):
    native_tools = False  # like the small local model: fenced code, text FINAL


def _cell(code: str) -> str:
    return f"```python\n{code}\n```"


def _run(home, replies: list[str], question: str = "q?"):
    llm = _Fenced(replies)
    config = Config(home=home, model="script:small", cell_timeout=60)
    session = SessionStore.create(home, model="script:small", task="t")
    agent = build_agent(session, config, llm=llm)
    with agent:
        events = list(agent.run(question))
    log = [json.loads(x) for x in (session.dir / "session.jsonl").read_text().splitlines()[1:]]
    return events, log, llm


def _streamed(events) -> list[str]:
    """The text streamed to the user before each reply."""
    out, now = [], []
    for e in events:
        if isinstance(e, ModelText):
            now.append(e.delta)
        elif isinstance(e, ModelReply):
            out, now = [*out, "".join(now)], []
    return out


def test_what_surely_shows_output():
    assert surely_shows("x = 1\nprint(x)")
    assert surely_shows("df = load()\ndf.shape")  # a value on the last line
    assert surely_shows("display(df)")
    assert surely_shows("x = (")  # a syntax error shows
    assert not surely_shows("x = 1")
    assert not surely_shows("df.to_csv('out.csv')")  # a call may return None
    assert not surely_shows("if x:\n    print(x)")  # printed only on one branch
    assert not surely_shows("for r in rows:\n    print(r)")  # rows may be empty


def test_where_a_reply_ends():
    shows = "Let me look.\n" + _cell("print(1)")
    assert reply_end(shows + "\nThen\n" + _cell("print(2)")) == len(shows)
    assert reply_end(shows) == len(shows)
    silent = _cell("x = 1")
    assert reply_end(silent + "\nand\n" + _cell("print(x)")) == len(silent + "\nand\n" + _cell("print(x)"))
    # the same code again (layout and comments aside) is cut before it starts
    again = silent + "\nOnce more:\n"
    assert reply_end(again + _cell("x  =  1  # same")) == len(again)
    # not known yet: no block closed, an open block, a silent block and nothing after it
    assert reply_end("I will load the file.") is None
    assert reply_end("```python\nprint(1)\n``") is None
    assert reply_end(silent) is None
    # a fence that is not code, or only a FINAL, is passed over
    assert reply_end("```text\nprint(1)\n```\n" + silent) is None
    assert reply_end("```python\nFINAL(3)\n```") is None
    # an invented next turn is not the reply's own text
    assert reply_end(silent + "\nUser: go on\n" + _cell("print(2)")) is None


def test_a_reply_stops_after_a_block_that_shows_output(_isolated_home):
    """The rest of the reply (a guess for when the first block fails, and a FINAL written
    before any output was seen) is never generated past its first character: not in the
    log, not shown to the user, not in the model's next context."""
    tail = ("\nIf that fails, try this:\n" + _cell("print(total.index('north'))")
            + "\nFINAL(north)\n" + "The answer is north. " * 400)
    first = "I will add them up.\n" + _cell("total = 2 + 3\nprint(total)")
    events, log, llm = _run(_isolated_home, [first + tail, "FINAL(5)"], "2 + 3?")
    replies = [e for e in events if isinstance(e, ModelReply)]
    assert replies[0].content == first and replies[0].code_cells == ["total = 2 + 3\nprint(total)\n"]
    assert _streamed(events)[0] == first  # what the user saw is the reply, to its end
    said = [e["message"] for e in log if e.get("type") == "message"
            and e["message"]["role"] == "assistant"]
    assert said[0]["content"] == first and len(said[0]["tool_calls"]) == 1
    tools = [e["message"]["content"] for e in log if e.get("type") == "message"
             and e["message"]["role"] == "tool"]
    assert [t.strip() for t in tools] == ["5"]  # one cell ran; no "Not run" record for blocks never written
    seen = json.dumps(llm.calls[1])
    assert "If that fails" not in seen and "FINAL(north)" not in seen
    # the usage of a stopped stream is the host's estimate of the text kept
    assert 0 < replies[0].usage["output_tokens"] < 40
    ended = events[-1]
    assert isinstance(ended, RunEnded) and ended.final == "5"


def test_a_repeated_block_is_cut_and_silent_setup_blocks_still_chain(_isolated_home):
    """The 1.5B model wrote a silent block (it wrote a file and printed nothing) and then
    the same block again, two or three times in one reply: each copy ran again. A silent
    setup block followed by a different one still runs both."""
    write = "with open('out.txt', 'w') as f:\n    f.write('a')"
    first = _cell(write) + "\n\nAgain, to be sure:\n"
    chained = _cell("y = 20") + "\n" + _cell("print(y + 1)") + "\n\n"  # then it ends
    events, log, _ = _run(_isolated_home, [first + _cell(write) + "\n" + _cell(write),
                                           chained, "FINAL(21)"])
    replies = [e for e in events if isinstance(e, ModelReply)]
    assert replies[0].content == first and len(replies[0].code_cells) == 1
    assert replies[1].content == chained and len(replies[1].code_cells) == 2
    assert _streamed(events)[:2] == [first, chained]
    tools = [e["message"]["content"] for e in log if e.get("type") == "message"
             and e["message"]["role"] == "tool"]
    assert tools[-1].strip() == "21"
    assert isinstance(events[-1], RunEnded) and events[-1].final == "21"
