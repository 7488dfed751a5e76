"""Issue 26 item 8: what a model reply cannot do to the run. A call to a tool that does not
exist is answered (the model is told, the run goes on); a runaway reply is cut at
rlm.llm.assemble.MAX_REPLY_CHARS, streamed or not (time and memory: bench/bench_untrusted.py);
a long reply is echoed to the terminal once, not as prose and again as the answer."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from rich.console import Console

from rlm import events as ev
from rlm.agent.policy import AnswerPolicy, Refuse
from rlm.agent.policy.decisions import Answer
from rlm.cli.render import Renderer
from rlm.llm import ScriptedLLM, assemble
from rlm.session.store import SessionStore


def test_a_call_to_a_tool_that_does_not_exist_is_answered_and_the_run_goes_on(tmp_path,
                                                                            _isolated_home):
    model = tmp_path / "m.json"
    model.write_text(json.dumps([
        {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
        {"content": "", "tool_calls": [{"name": "python", "arguments": {
            "code": "x = int(open('six.txt').read()) * 7\nprint(x)\nfinal(str(x))"}}]},
    ]))
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "run", "go", "--model",
                           f"script:{model}", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["final"] == "42" and out["reason"] == "final"
    # what reached the model: after its bash call, the message saying there is no such tool
    log = SessionStore.open(out["session_path"])
    said = [e.message["content"] for e in log.branch()
            if getattr(e, "message", None) and e.message.get("role") == "user"]
    assert any("no tool named 'bash'" in m and "`python`" in m and "!command" in m for m in said)
    assert "called a tool that does not exist ('bash')" in proc.stderr


def test_the_unknown_tool_rule_on_fixtures():
    policy = AnswerPolicy()
    policy.start_run(native_tools=True, max_turns=6, has_data=False)
    for _ in range(2):  # every time: the turn limit bounds it
        d = policy.answer(Answer("", "reply", unknown_tools=("bash", "bash")), [])
        assert isinstance(d, Refuse) and "no tool named 'bash':" in d.text
    assert not isinstance(policy.answer(Answer("Done.", "text", unknown_tools=("bash",)), []),
                          Refuse)  # an answer given with it stands (FINAL(...) text)


def test_a_runaway_reply_is_cut_at_the_bound_streamed_or_not():
    block = " ".join(f"w{i}" for i in range(200)) + "\n"
    text = block * (3 * 2**19 // len(block))  # 1.5 MB (20 MB: bench/bench_untrusted.py)
    for stream in (True, False):
        shown: list[str] = []
        got = ScriptedLLM([text], stream=stream).complete(
            [{"role": "user", "content": "go"}], on_text=shown.append)
        assert got.finish_reason == "length", stream
        assert got.content.startswith(text[:1000])
        assert len(got.content) < assemble.MAX_REPLY_CHARS + 200
        assert got.content.endswith(assemble.CUT_NOTE.format(cap=assemble.MAX_REPLY_CHARS))
        assert got.usage.output_tokens > 0  # counted even though the usage chunk was never read
        assert sum(map(len, shown)) == len(got.content)


def test_a_long_reply_is_echoed_once():
    """A 2 MB prose reply that becomes the answer: streamed text is echoed up to ECHO_CAP,
    then the answer panel shows it whole, once."""
    block = " ".join(f"w{i}" for i in range(200)) + "\n"
    text = (block * (2 * 2**20 // len(block))).replace("w150 ", "MARK-1 ", 1) \
        .replace("w151 ", "MARK-2 ", 1000)
    at = len(text) // 2
    text = text[:at] + " MIDDLE-MARK " + text[at:]
    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=300, color_system=None), animate=False)
    r(ev.ModelCallStarted("script:x"))
    for i in range(0, len(text), 4096):
        r(ev.ModelText(text[i:i + 4096]))
    r(ev.ModelReply(text, [], {}))
    r(ev.FinalAnswer(text, "reply"))
    out = buf.getvalue()
    assert out.count("MARK-1 ") == 2  # near the start: in the echo and in the answer
    assert out.count("MIDDLE-MARK") == 1  # past the echo's cap: in the answer only
    assert "more characters of this reply not echoed" in out
