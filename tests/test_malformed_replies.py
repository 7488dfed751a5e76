"""Issue 57 item 7: no model reply, however malformed, crashes the host. A lone surrogate
("\\ud800": no encoder takes it) in a reply's prose, its code block or a tool call's
arguments crashed the host when the reply reached the terminal, the log or the kernel. A
reply is cleaned once, where it enters the host (rlm.llm.types.clean_completion, the
seam's stream callbacks)."""

from __future__ import annotations

import json
from pathlib import Path

from rlm.llm import ScriptedLLM
from tests.rlmcli import ANSWERED, call, rlm, script

LONE = "\ud800"


def _valid_unicode(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_lone_surrogates_in_prose_code_and_tool_calls_end_the_run_normally(tmp_path):
    replies = [
        f"prose {LONE} here\n```python\nx = '\udfff'\nprint(len(x))\n```",
        {"content": f"a call {LONE}", "tool_calls": [
            {"name": "python", "arguments": {"code": f"y = '{LONE}'\nprint(len(y))",
                                             f"odd{LONE}": 1}}]},
        call(f"final('done {LONE}')"),
    ]
    # a real process: its stdout is a pipe with a strict encoder, as a terminal's is
    proc = rlm("run", "go", "--model", script(tmp_path / "s.json", replies), "--json",
               cwd=tmp_path, process=True, timeout=120)
    assert proc.returncode in ANSWERED, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["reason"] == "final" and out["final"] == "done \ufffd", out
    raw = Path(out["session_path"]).read_bytes()
    entries = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert all(_valid_unicode(e) for e in entries)
    shown = [e["message"]["content"] for e in entries
             if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert [s.strip() for s in shown[:2]] == ["1", "1"], shown  # the cells ran, cleaned


def test_the_seam_hands_on_only_valid_unicode():
    from rlm.llm.types import clean_text

    seen: list[str] = []
    llm = ScriptedLLM([f"a {LONE} b", {"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": f"s = '{LONE}'"}}]}])
    done = llm.complete([{"role": "user", "content": "hi"}], on_text=seen.append)
    assert done.content == "a \ufffd b" and all(_valid_unicode(s) for s in seen)
    done = llm.complete([{"role": "user", "content": "hi"}])
    assert done.tool_calls[0].arguments == {"code": "s = '\ufffd'"}
    assert clean_text("\ud83d\ude00") == "\U0001f600"  # a pair in two code units is kept
