"""The agent loop end to end: scripted model, real kernel, real files.

Assertions are on what reached the model (ScriptedLLM.calls), what is on disk (the session
log) and what the kernel holds.
"""

from __future__ import annotations

import json
import threading

import pytest

from rlm.agent import Agent
from rlm.app import attach_all
from rlm.app.build import kernel_factory
from rlm.config import Config
from rlm.events import CellFinished, FinalAnswer, KernelRestarted, Notice, RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.rlmcli import call


def agent_for(session, config, **kw) -> Agent:
    """The loop alone (these are its own unit tests): the session's kernel, no feature
    attached unless a test attaches it (rlm.app.attach_all)."""
    return Agent(session, config, kernel_factory=kernel_factory(session), **kw)


def make_agent(home, replies, **cfg) -> tuple[Agent, SessionStore, ScriptedLLM]:
    config = Config(home=home, model="script:inline", cell_timeout=cfg.pop("cell_timeout", 60), **cfg)
    llm = ScriptedLLM(list(replies))
    session = SessionStore.create(home, model="script:inline", task="t")
    return agent_for(session, config, llm=llm), session, llm


def run(agent: Agent, prompt: str) -> list:
    return list(agent.run(prompt))


def tool_texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_load_error_recover_answer(_isolated_home, tmp_path):
    csv = tmp_path / "sales.csv"
    csv.write_text("region,revenue\neast,10\nwest,25\neast,7\n")
    agent, session, llm = make_agent(_isolated_home, [
        call(f"import pandas as pd\ndf = pd.read_csv({str(csv)!r})\nprint(df.shape)"),
        call("df.groupby('regon').revenue.sum()"),  # typo -> KeyError
        call("totals = df.groupby('region').revenue.sum()\nprint(totals.to_dict())"),
        call("final(totals.idxmax())"),
    ])
    with agent:
        events = run(agent, "Which region has the largest revenue?")
        assert agent.executor.execute("print(sorted(totals.to_dict().items()))").shaped.strip() \
            == "[('east', 17), ('west', 25)]"
    end = events[-1]
    assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "west"
    statuses = [e.status for e in events if isinstance(e, CellFinished)]
    assert statuses == ["ok", "error", "ok", "ok"]
    assert [type(e).__name__ for e in events].count("CellStarted") == 4  # one per cell
    # the model saw the KeyError traceback in the tool result of its second call
    third_call = llm.calls[2]
    texts = tool_texts(third_call)
    assert "(4, 2)" in texts[0] or "(3, 2)" in texts[0]
    assert "KeyError" in texts[1]
    # on disk: user, 4 x (assistant, tool), final
    on_disk = SessionStore.open(session.path)
    roles = [e.role for e in on_disk.branch() if isinstance(e, MessageEntry)]
    assert roles == ["user"] + ["assistant", "tool"] * 4
    assert any(isinstance(e, CustomEntry) and e.custom_type == "final" for e in on_disk.branch())


def test_fenced_code_and_text_final_for_small_models(_isolated_home):
    agent, session, llm = make_agent(_isolated_home, [
        "Let me count.\n```python\nnums = [1, 2, 3, 4, 6]\nevens = sum(1 for n in nums if n % 2 == 0)\nprint(evens)\n```",
        "The count is FINAL(3)",
    ])
    with agent:
        events = run(agent, "How many even numbers?")
    final = [e for e in events if isinstance(e, FinalAnswer)]
    assert final and final[-1].answer == "3" and final[-1].source == "text"
    assert "3" in tool_texts(llm.calls[1])[0]


def test_reply_without_code_ends_the_run(_isolated_home):
    agent, _, _ = make_agent(_isolated_home, ["Hello! Nothing to compute."])
    with agent:
        events = run(agent, "hi")
    assert events[-1].reason == "no_code" and events[-1].final == "Hello! Nothing to compute."


def test_kernel_crash_notice_reaches_the_model(_isolated_home):
    agent, session, llm = make_agent(_isolated_home, [
        call("keep = {'a': 1, 'b': [1, 2]}\nsock = (v for v in keep['b'])\nprint('ok')"),
        call("import os\nos._exit(1)"),
        call("print(keep)"),
        call("final('done')"),
    ])
    with agent:
        pid_before = agent.executor.pid
        events = run(agent, "crash test")
        assert agent.executor.pid != pid_before
    restarts = [e for e in events if isinstance(e, KernelRestarted)]
    assert len(restarts) == 1 and "keep" in restarts[0].restored and "sock" not in restarts[0].restored
    crash_text = tool_texts(llm.calls[2])[1]
    assert "<kernel_restarted>" in crash_text and "exit code 1" in crash_text
    assert "keep" in crash_text and "Rebuilt by re-running recorded cells" in crash_text
    assert "sock (cells" in crash_text  # a generator cannot be pickled: its cell was replayed
    assert "{'a': 1, 'b': [1, 2]}" in tool_texts(llm.calls[3])[2]


def test_context_files_reach_the_kernel_not_the_prompt(_isolated_home, tmp_path):
    from rlm.agent.context_files import load_context_files

    secret_line = "needle-7f3a9 is the key"
    big = tmp_path / "haystack.txt"
    big.write_text(("filler line\n" * 20000) + secret_line + "\n")
    agent, _, llm = make_agent(_isolated_home, [
        call("i = haystack.find('needle-')\nprint(haystack[i:i+40])"),
        call("final(haystack[i:i+12])"),
    ])
    with agent:
        load_context_files(agent, [big])
        events = run(agent, "find the needle")
    assert events[-1].final == "needle-7f3a9"
    first_prompt = json.dumps(llm.calls[0])
    assert "haystack" in first_prompt and "characters" in first_prompt
    # the description comes right before the task: the question is read last
    texts = [m.get("content") or "" for m in llm.calls[0]]
    task_at = texts.index("find the needle")
    description = texts[task_at - 1]
    # no tag that reads like a variable (`<context_variables>` became
    # `context_variables['context']` in the 1.5B model's code)
    assert description.startswith("Input:") and "<" not in description.split("\n")[0]
    # a long text comes with how to read it (the 1.5B model guesses a regex without this),
    # the example built from the question's own words
    assert "i = haystack.find('needle')" in description
    assert secret_line not in first_prompt  # the file contents stay in the kernel


def test_a_json_lines_file_is_a_table_and_a_broken_one_stays_text(_isolated_home, tmp_path):
    """The task suite's 1.5B model got `orders.jsonl` as one long str and spent all its
    turns on json.loads(orders) ("Extra data"). JSON Lines loads as a DataFrame, like a CSV;
    a file whose lines are not JSON is still readable, as text."""
    from rlm.agent.context_files import load_context_files

    (tmp_path / "orders.jsonl").write_text(
        "".join(f'{{"order": {i}, "city": "{c}", "status": "returned"}}\n'
                for i, c in enumerate(["Lyon", "Nice", "Lyon"])))
    (tmp_path / "notes.ndjson").write_text('{"a": 1}\nnot json at all\n')
    agent, _, llm = make_agent(_isolated_home, [
        call("print(type(orders).__name__, (orders.city == 'Lyon').sum(), type(notes).__name__)"),
        call("final('ok')")])
    with agent:
        load_context_files(agent, [tmp_path / "orders.jsonl", tmp_path / "notes.ndjson"])
        run(agent, "count")
    assert tool_texts(llm.calls[1])[-1].strip() == "DataFrame 2 str"
    assert "DataFrame" in json.dumps(llm.calls[0])  # described as a table to the model


def test_a_cell_retyping_an_input_variable_is_not_run(_isolated_home, tmp_path):
    from rlm.agent.context_files import load_context_files

    (tmp_path / "notes.txt").write_text("filler\n" * 1000 + "code for X is 4711\n")
    retype = "```python\nnotes = \"\"\"filler\nfiller\n\"\"\"\nprint(notes.find('X'))\n```"
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced([retype, retype, retype, "```python\nprint(len(notes))\n```", "FINAL(ok)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        load_context_files(agent, [tmp_path / "notes.txt"])
        run(agent, "What is the code for X?")
        # two layers: the built-in stream rule stops the reply at its first quote (twice a
        # turn at most, rlm.agent.policy.stream); past it, the cell is not run
        for call in llm.calls[1:3]:
            assert "`notes` already holds your input" in call[-1]["content"]
        assert "Not run: this cell assigns a literal to `notes`" in llm.calls[3][-1]["content"]
        assert "7019" in llm.calls[4][-1]["content"]  # len(notes) of the untouched input
    # the guard survives a resume: the input names come from the session log
    resumed = SessionStore.open(session.path)
    llm2 = _Fenced([retype, "FINAL(ok)"])
    with agent_for(resumed, config, llm=llm2) as agent:
        run(agent, "again")
    assert "`notes` already holds your input" in llm2.calls[1][-1]["content"]


def test_a_refused_retyping_cell_sent_again_is_sampled_again(_isolated_home, tmp_path):
    """The local model copied an input's preview into a literal, was refused, and sent the
    same cell five more times to the turn limit: a refused cell counts as the cell that
    just failed, so its exact repeat is resampled (hidden), never refused again."""
    from rlm.agent.context_files import load_context_files

    (tmp_path / "nums.json").write_text(json.dumps(list(range(3, 600))))  # preview cut
    retype = "```python\nnums = [3, 4, 5, 6]\nprint(sum(n % 2 == 0 for n in nums))\n```"
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced([retype, retype, "```python\nprint(sum(n % 2 == 0 for n in nums))\n```",
                   "FINAL(298)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        load_context_files(agent, [tmp_path / "nums.json"])
        run(agent, "How many even numbers?")
    branch = SessionStore.open(session.path).branch()
    refused = [e for e in branch if getattr(e, "role", None) == "tool"
               and "Not run: this cell assigns a literal" in str(e.message.get("content"))]
    resampled = [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "resampled"]
    assert len(refused) == 1 and len(resampled) == 1
    # the rejected reply is not in the context, and the resample is drawn without the
    # failed exchange: a note of what failed in its place (rlm.agent.policy.retry)
    assert llm.calls[2][:-1] == llm.calls[1][:-2]
    assert llm.calls[2][-1]['content'].startswith('A cell you sent failed')
    assert "298" in llm.calls[3][-1]["content"]


def test_an_input_retyped_as_its_whole_preview_runs(_isolated_home, tmp_path):
    """A short input shown whole in its preview and retyped exactly is the same value:
    the cell runs (the local model's count_even e2e task retyped its 15 numbers, was
    refused six times and never answered)."""
    from rlm.agent.context_files import load_context_files

    (tmp_path / "nums.json").write_text("[3, 8, 15, 22]")
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced(["```python\nnums = [3, 8, 15, 22]\nprint(sum(n % 2 == 0 for n in nums))\n```",
                   "FINAL(2)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        load_context_files(agent, [tmp_path / "nums.json"])
        run(agent, "How many even numbers?")
    assert llm.calls[1][-1]["content"].strip().endswith("\n2")  # it ran: its output


class _Concurrency:
    """Wraps a sub-model to observe how many calls are in flight at once: the first two
    calls wait for each other at a barrier, which only opens if they overlap."""

    def __init__(self, inner):
        self.inner, self.native_tools, self.spec = inner, True, "script:sub"
        self.lock, self.now, self.peak = threading.Lock(), 0, 0
        self.barrier, self.started = threading.Barrier(2, timeout=60), 0

    def complete(self, messages, **kw):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.started += 1
            first_two = self.started <= 2
        try:
            if first_two:
                self.barrier.wait()  # BrokenBarrierError (a failed test) if run one at a time
            return self.inner.complete(messages, **kw)
        finally:
            with self.lock:
                self.now -= 1

    def context_window(self):
        return None


def test_llm_query_batched_reaches_the_sub_model_concurrently(_isolated_home):
    sub = _Concurrency(ScriptedLLM([f"summary {i}" for i in range(8)]))
    config = Config(home=_isolated_home, model="script:main", sub_model="script:sub", cell_timeout=60)
    main = ScriptedLLM([
        call("chunks = [f'chunk {i}' for i in range(8)]\n"
             "answers = llm_query_batched([f'Summarise: {c}' for c in chunks])\nprint(len(answers), sorted(answers)[0])"),
        call("final(str(len(answers)))"),
    ])
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    agent = agent_for(session, config, llm=main, llm_factory=lambda spec: sub)
    with agent:
        events = run(agent, "summarise")
    assert events[-1].final == "8"
    assert sub.peak > 1, "llm_query_batched ran its calls one at a time"
    prompts = sorted(c[0]["content"] for c in sub.inner.calls)
    assert prompts == sorted(f"Summarise: chunk {i}" for i in range(8))
    assert agent.tokens_used > 0


def test_rlm_query_runs_a_child_and_respects_the_depth_limit(_isolated_home):
    child_llm = ScriptedLLM([call("final(str(sum(context)))")])
    config = Config(home=_isolated_home, model="script:main", sub_model="script:child",
                    cell_timeout=60, max_depth=1)
    main = ScriptedLLM([
        call("r = rlm_query('add these numbers', context=[1, 2, 3])\nprint(r)"),
        call("final(r)"),
    ])
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    agent = agent_for(session, config, llm=main, llm_factory=lambda spec: child_llm)
    attach_all(agent)  # assembled as rlm.app does it: rlm_query gets the app's child runner
    with agent:
        events = run(agent, "delegate")
    assert events[-1].final == "6"
    children = list((session.dir / "children").iterdir())
    assert len(children) == 1
    child = SessionStore.open(children[0] / "session.jsonl")
    assert child.header.parent_session == session.id
    # the child is at depth 1 == max_depth: its own rlm_query is refused
    config2 = Config(home=_isolated_home, model="script:x", cell_timeout=60, max_depth=0)
    agent2, _, _ = make_agent(_isolated_home, [])
    agent2.config = config2
    with pytest.raises(Exception, match="depth limit"):
        agent2.recursion.rlm_query({"task": "nested"})


def test_token_budget_bounds_the_tree(_isolated_home):
    config = Config(home=_isolated_home, model="script:main", cell_timeout=60, token_budget=1)
    main = ScriptedLLM([call("print(1)"), call("print(2)")])
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    agent = agent_for(session, config, llm=main)
    with agent:
        events = run(agent, "spend")
    assert events[-1].reason == "limit:token_budget"


def test_compact_run_from_a_cell_is_deferred_to_turn_end(_isolated_home):
    agent, session, llm = make_agent(_isolated_home, [
        call("x = 41\nprint(compact.run('keep x'))"),
        "## Goal\nx holds 41",  # the summarizer's reply, at the end of the turn
        call("final(str(x + 1))"),
    ], context_window=100_000, keep_recent_tokens=20)
    attach_all(agent)
    with agent:
        # a long prompt: a summary that would not shrink the context is rejected (issue 27)
        events = run(agent, "compact please. " + "background " * 300)
        pid = agent.executor.pid
        assert agent.executor.execute("print(x)").shaped.strip() == "41"
        assert agent.executor.pid == pid  # compaction never touches the kernel
    assert events[-1].final == "42"
    # the cell was told the request was scheduled, not run on the spot
    assert "'scheduled': True" in tool_texts(llm.calls[2])[0]
    branch = SessionStore.open(session.path).branch()
    kinds = [(e.type, getattr(e, "custom_type", None)) for e in branch]
    comp = next(e for e in branch if e.type == "compaction")
    assert comp.trigger == "requested" and comp.instructions == "keep x"
    # it ran when the turn that asked for it ended: right after that turn's tool result
    assert kinds.index(("compaction", None)) == 3
    assert kinds[4] == ("custom", "ipython_state")
    # the summarizer got the instructions; the next model call starts with the summary
    assert "keep x" in json.dumps(llm.calls[1])
    after = llm.calls[2]
    assert after[1]["content"].startswith("Project memory")  # the project memory, then
    assert "x holds 41" in after[2]["content"]  # the summary
    assert any(m["role"] == "user" and "<ipython_state>" in m["content"] and "x" in m["content"]
               for m in after)


class _Fenced(ScriptedLLM):
    native_tools = False  # behaves like the small local model: fenced code, text FINAL


def test_small_model_giving_up_after_an_error_is_nudged_once(_isolated_home):
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced([
        "```python\nprint(sales['amount'].sum())\n```",
        "The column amount does not exist, sorry.",  # prose after a failing cell
        "```python\nsales = {'revenue': [1, 2]}\nprint(sum(sales['revenue']))\n```",
        "FINAL(3)",
    ])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        events = run(agent, "total revenue?")
    assert events[-1].reason == "final" and events[-1].final == "3"
    nudge = llm.calls[2][-1]
    assert nudge["role"] == "user" and "Your last cell failed" in nudge["content"]


def test_small_model_answering_before_looking_at_its_data_is_nudged(_isolated_home, tmp_path):
    from rlm.agent.context_files import load_context_files

    (tmp_path / "notes.txt").write_text("filler\n" * 100 + "code for X is 4711\n")
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced(["123456",  # a guess, before any cell ran
                   "```python\ni = notes.find('code for X')\nprint(notes[i:i+20])\n```",
                   "FINAL(4711)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        load_context_files(agent, [tmp_path / "notes.txt"])
        events = run(agent, "What is the code for X? Answer with the number only.")
    assert events[-1].final == "4711"
    assert "You have not looked at the data yet" in llm.calls[1][-1]["content"]


def test_prose_after_a_good_cell_is_the_answer(_isolated_home):
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced(["```python\nprint(6 * 7)\n```", "It is 42."])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        events = run(agent, "6*7?")
    assert events[-1].reason == "no_code" and events[-1].final == "It is 42."


def test_rate_limits_are_retried_then_end_the_run_cleanly(_isolated_home):
    config = Config(home=_isolated_home, model="script:x", cell_timeout=60)
    limited = {"error": "rate_limit", "message": "slow down"}
    llm = ScriptedLLM([limited, limited, call("final('ok')")], base_delay=0)
    session = SessionStore.create(_isolated_home, model="script:x", task="t")
    with agent_for(session, config, llm=llm) as agent:
        assert run(agent, "go")[-1].final == "ok"  # two transient failures, retried
        llm.enqueue(*[limited] * 5)  # more than the retries allow
        events = run(agent, "again")
    end = events[-1]
    assert end.reason == "error" and "gave up" in (end.detail or "")
    on_disk = SessionStore.open(session.path).branch()
    errors = [e for e in on_disk if isinstance(e, MessageEntry) and e.error]
    assert len(errors) == 1 and "RateLimited" in errors[0].error
    # the failed call never reaches a later prompt
    msgs = session.messages(system_prompt="s", native_tools=True)
    assert not [m for m in msgs
                if m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls")]


def test_auth_error_ends_the_run_with_the_fix(_isolated_home):
    config = Config(home=_isolated_home, model="script:x", cell_timeout=60)
    llm = ScriptedLLM([{"error": "auth", "message": "invalid api key"}], base_delay=0)
    session = SessionStore.create(_isolated_home, model="script:x", task="t")
    with agent_for(session, config, llm=llm) as agent:
        events = run(agent, "go")
    end = events[-1]
    assert end.reason == "error" and "authentication failed" in (end.detail or "")
    assert "_API_KEY" in (end.detail or "")
    assert not [e for e in events if isinstance(e, Notice)]  # told once: by RunEnded
    errors = [e for e in SessionStore.open(session.path).branch()  # still loads
              if isinstance(e, MessageEntry) and e.error]
    assert len(errors) == 1 and errors[0].error.startswith("AuthError")


def test_token_limit_counts_this_run_only(_isolated_home):
    config = Config(home=_isolated_home, model="script:x", cell_timeout=60, max_tokens=2000)
    llm = ScriptedLLM([{"content": "one", "usage": {"input_tokens": 2500, "output_tokens": 10}},
                       {"content": "two", "usage": {"input_tokens": 1500, "output_tokens": 10}}])
    session = SessionStore.create(_isolated_home, model="script:x", task="t")
    with agent_for(session, config, llm=llm) as agent:
        assert run(agent, "first")[-1].final == "one"
        # 2510 tokens were spent by the first run; the second run has its own 2000
        assert run(agent, "second")[-1].final == "two"


def test_small_model_final_after_a_silent_cell_is_nudged(_isolated_home):
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced(["```python\nimport re\nm = re.search('nope', 'text')\n```",
                   "FINAL(12345)",  # a guess: the cell printed nothing
                   "```python\nprint(m)\n```",
                   "FINAL(not found)",  # refused once: a turn is left to look again
                   "FINAL(not found)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with agent_for(session, config, llm=llm) as agent:
        events = run(agent, "find it")
    assert events[-1].final == "not found"
    assert "printed nothing" in llm.calls[2][-1]["content"]
    assert "says nothing was found" in llm.calls[4][-1]["content"]


def test_a_repeated_failing_cell_is_pointed_out(_isolated_home):
    agent, session, llm = make_agent(_isolated_home, [
        call("{}['missing']"), call("{}['missing']"), call("final('gave up')")])
    with agent:
        run(agent, "loop")
    first, second = tool_texts(llm.calls[2])
    assert "KeyError" in first and "same code as your previous cell" not in first
    assert "KeyError" in second and "same code as your previous cell" in second
