"""Compaction sized to the model's window, and the overflow / limit fixes of issue 12.

Each test names the defect it guards; each fails on the code before its fix.
"""

from __future__ import annotations

import json
import os

import pytest

from rlm.compaction.controller import CompactionController
from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import (
    CompactionSettings,
    EffectiveSettings,
    context_tokens,
    effective_settings,
)
from rlm.config import Config
from rlm.errors import ConfigError, ContextOverflow, RateLimited
from rlm.llm import ScriptedLLM
from rlm.llm.errormap import normalize_error
from rlm.llm.script import DEFAULT_SCRIPT_WINDOW
from rlm.llm.tokens import count_messages
from rlm.session.context import build_messages
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.test_compaction_core import FakeKernel, session_from

LOCAL_WINDOW = 8192  # the local model's n_ctx when nothing is configured


# ------------------------------------------------------------------ settings scale


def test_defaults_scale_to_the_local_window():
    """Before: reserve 16,384 and keep-recent 20,000 on an 8,192 window: never compacts."""
    eff = effective_settings(Config(), LOCAL_WINDOW)
    assert eff.reserve_tokens >= 0.15 * LOCAL_WINDOW
    assert eff.keep_recent_tokens + eff.reserve_tokens < LOCAL_WINDOW
    assert eff.threshold == LOCAL_WINDOW - eff.reserve_tokens > 0
    assert set(eff.scaled) == {"reserve_tokens", "keep_recent_tokens"}
    assert eff.to_dict() == {
        "enabled": True, "window": LOCAL_WINDOW, "threshold": eff.threshold,
        "reserve_tokens": eff.reserve_tokens, "keep_recent_tokens": eff.keep_recent_tokens,
        "scaled": ["reserve_tokens", "keep_recent_tokens"],
    }


@pytest.mark.parametrize("window", [1024, 2048, 4096, 8192, 16_384, 32_768, 128_000, 200_000, 1_000_000])
def test_scaled_defaults_always_leave_room(window):
    eff = effective_settings(Config(), window)
    assert eff.reserve_tokens >= 0.15 * window  # pi / oh-my-pi's floor
    # after a compaction the kept turns plus a summary of up to `reserve` fit below the threshold
    assert eff.keep_recent_tokens + 2 * eff.reserve_tokens <= window
    assert eff.keep_recent_tokens <= 20_000 and eff.keep_recent_tokens >= 1


def test_large_windows_keep_prime_defaults_or_the_15_percent_floor():
    assert effective_settings(Config(), 65_536).reserve_tokens == 16_384
    assert effective_settings(Config(), 200_000).reserve_tokens == 30_000
    assert effective_settings(Config(), 200_000).keep_recent_tokens == 20_000


def test_unknown_window_keeps_the_defaults_and_never_fires():
    eff = effective_settings(Config(), None)
    assert (eff.reserve_tokens, eff.keep_recent_tokens, eff.threshold) == (16_384, 20_000, None)


def test_user_values_are_kept_as_given():
    eff = effective_settings(Config(reserve_tokens=1000, keep_recent_tokens=500), LOCAL_WINDOW)
    assert (eff.reserve_tokens, eff.keep_recent_tokens, eff.scaled) == (1000, 500, ())
    # one user value, the other scaled around it
    eff = effective_settings(Config(keep_recent_tokens=5000), LOCAL_WINDOW)
    assert eff.keep_recent_tokens == 5000 and eff.reserve_tokens + 5000 < LOCAL_WINDOW
    assert eff.reserve_tokens >= 0.15 * LOCAL_WINDOW and eff.scaled == ("reserve_tokens",)


@pytest.mark.parametrize("flags, names", [
    ({"keep_recent_tokens": 7500}, "--keep-recent-tokens"),
    ({"reserve_tokens": 8192}, "--reserve-tokens"),
    ({"reserve_tokens": 4000, "keep_recent_tokens": 4192}, "--keep-recent-tokens or --reserve-tokens"),
])
def test_impossible_user_combination_is_refused_with_the_setting_to_change(flags, names):
    with pytest.raises(ConfigError) as exc:
        effective_settings(Config(**flags), LOCAL_WINDOW)
    msg = str(exc.value)
    assert names in msg and "8192-token context window" in msg and "\n" not in msg
    # the controller refuses at start; mid-run it never raises
    ctl = CompactionController(SessionStore.in_memory(), ScriptedLLM([]),
                               CompactionSettings.from_config(Config(**flags)), lambda: LOCAL_WINDOW)
    with pytest.raises(ConfigError):
        ctl.start_run()
    assert ctl.after_turn(None) is None


def test_controller_effective_reports_window_threshold_reserve_keep():
    ctl = CompactionController(SessionStore.in_memory(), ScriptedLLM([]),
                               CompactionSettings.from_config(Config()), lambda: LOCAL_WINDOW)
    eff = ctl.effective()
    assert isinstance(eff, EffectiveSettings) and eff == effective_settings(Config(), LOCAL_WINDOW)
    st = ctl.status()
    assert (st["context_window"], st["threshold"], st["reserve_tokens"], st["keep_recent_tokens"]) \
        == (LOCAL_WINDOW, eff.threshold, eff.reserve_tokens, eff.keep_recent_tokens)


def _long_session(turns: int, chars: int) -> SessionStore:
    s = SessionStore.in_memory()
    s.append(MessageEntry(message={"role": "user", "content": "Summarise the logs."}))
    for i in range(turns):
        s.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "python", "arguments": json.dumps({"code": f"print(log[{i}])"})}}]},
            usage={"input_tokens": 0, "output_tokens": 10}))
        s.append(MessageEntry(message={"role": "tool", "tool_call_id": f"c{i}",
                                       "content": f"line {i}: " + "warning disk almost full " * (chars // 25)}))
    return s


def test_default_settings_compact_a_local_sized_context():
    """Before: with the defaults, a context past the 8,192 window found "nothing to summarize"."""
    s = _long_session(turns=10, chars=4000)  # ~10 x 800 tokens > the scaled threshold
    llm = ScriptedLLM(["## Goal\nsummarise logs"])
    ctl = CompactionController(s, llm, CompactionSettings.from_config(Config()), lambda: LOCAL_WINDOW)
    ctl.start_run()
    before = ctl.context_tokens()
    assert before > ctl.effective().threshold
    # the default ladder relieves it (shaking the old results) without a model call
    entry = ctl.after_turn(FakeKernel([{"name": "log", "type": "list"}]))
    assert entry is not None and ctl.context_tokens() < ctl.effective().threshold
    assert llm.calls == []
    # the summary tier alone (no tiers) compacts it too
    s = _long_session(turns=10, chars=4000)
    ctl = CompactionController(s, llm, CompactionSettings.from_config(Config()), lambda: LOCAL_WINDOW,
                               tiers=False)
    ctl.start_run()
    entry = ctl.after_turn(FakeKernel([{"name": "log", "type": "list"}]))
    assert isinstance(entry, CompactionEntry) and entry.trigger == "threshold", s.branch()[-1]
    assert s.branch()[-1].custom_type == "ipython_state"
    after = ctl.context_tokens()
    assert after < ctl.effective().threshold < before
    assert len(llm.calls) == 1 and "<conversation>" in llm.calls[0][1]["content"]


# ------------------------------------------------------------------ overflow state


def test_overflow_state_resets_at_the_start_of_each_run():
    """Before: a run that ended in an overflow report left the state at "reported", so the
    next run's overflow was reported without trying to compact."""
    s = session_from("task_with_cells")
    llm = ScriptedLLM(["S1", "S2"])
    ctl = CompactionController(s, llm, CompactionSettings(reserve_tokens=1000, keep_recent_tokens=110),
                               lambda: 4000, tiers=False)  # the summary tier's overflow state
    ctl.overflow_state, ctl.overflow_message = "reported", "old report"
    ctl.start_run()
    assert (ctl.overflow_state, ctl.overflow_message) == ("idle", None)
    err = s.append(MessageEntry(message={"role": "assistant", "content": ""}, error="context overflow"))
    assert ctl.on_overflow(err.id, None, None) == "retry"
    assert s.branch()[-1].trigger == "overflow"


# ------------------------------------------------------------------ the seam


@pytest.mark.parametrize("text", [
    "Rate limit reached for gpt-4o: too many tokens per minute, please wait 20s",
    "Request too large: token limit per minute exceeded; please wait and retry",
    "ThrottlingException: Too many tokens, please wait before trying again.",
    "Error 429: the prompt is too long for your current quota tier",
])
def test_rate_limits_and_throttling_are_not_overflows(text):
    """Before: "too many tokens" / "token limit" matched the overflow wording first."""
    import litellm

    err, transient = normalize_error(
        litellm.BadRequestError(message=text, model="m", llm_provider="openai"), "openai/x")
    assert isinstance(err, RateLimited) and transient, err


def test_true_overflow_still_recognised():
    import litellm

    err, transient = normalize_error(litellm.BadRequestError(
        message="This model's maximum context length is 8192 tokens", model="m", llm_provider="openai"),
        "openai/x")
    assert isinstance(err, ContextOverflow) and not transient


def test_silent_overflow_is_a_context_overflow():
    """A stop for length with no output and the input at >= 99% of the window."""
    silent = {"content": "", "finish_reason": "length",
              "usage": {"input_tokens": 7_900, "output_tokens": 0}}
    llm = ScriptedLLM([silent], Config(context_window=7_950), base_delay=0)
    with pytest.raises(ContextOverflow, match="stopped for length with no output"):
        llm.complete([{"role": "user", "content": "hi"}])
    # below 99%, or with output: an ordinary (truncated) reply
    llm = ScriptedLLM([silent, {"content": "partial", "finish_reason": "length",
                                "usage": {"input_tokens": 7_949, "output_tokens": 1}}],
                      Config(context_window=9_000), base_delay=0)
    assert llm.complete([{"role": "user", "content": "hi"}]).finish_reason == "length"
    llm.config = Config(context_window=7_950)
    assert llm.complete([{"role": "user", "content": "hi"}]).content == "partial"


def test_every_model_reports_its_window():
    assert ScriptedLLM([]).context_window() == DEFAULT_SCRIPT_WINDOW
    assert ScriptedLLM([], Config(context_window=4096)).context_window() == 4096
    from rlm.llm import get_llm

    assert get_llm("openai/gpt-4o-mini", Config(context_window=5000)).context_window() == 5000


# ------------------------------------------------------------------ <ipython_state>


class _BrokenKernel(FakeKernel):
    def __init__(self, exc=None, listing=None):
        super().__init__()
        self.exc, self.listing = exc, listing

    def list_namespace(self, timeout=5.0):
        if self.exc is not None:
            raise self.exc
        return self.listing


@pytest.mark.parametrize("kernel", [
    _BrokenKernel(ValueError("Expecting value: line 1 column 1")),  # a garbled JSON reply
    _BrokenKernel(RuntimeError("bridge closed")),
    _BrokenKernel(KeyError("names")),
    _BrokenKernel(listing=["not", "a", "dict"]),
])
def test_a_failing_namespace_listing_gives_no_notice_and_the_compaction_stands(kernel):
    """Before: only KernelDied / KernelBusy / TimeoutError were caught; any other error
    aborted the compaction (and the run) after the summary was already written."""
    s = session_from("task_with_cells")
    entry = perform_compaction(s, ScriptedLLM(["H", "P"]), CompactionSettings(keep_recent_tokens=100),
                               trigger="threshold", kernel=kernel)
    assert isinstance(entry, CompactionEntry) and s.branch()[-1] is entry
    assert not any(getattr(e, "custom_type", None) == "ipython_state" for e in s.branch())


def _state(names: list[str]) -> CustomEntry:
    from rlm.compaction.notes import format_ipython_state

    listed = [{"name": n, "type": "int"} for n in names]
    return CustomEntry(custom_type="ipython_state", data={"names": listed}, display=False,
                       content=format_ipython_state(listed, []))


def _two_compactions() -> SessionStore:
    """A second compaction whose kept range still holds the first one's notice."""
    s = SessionStore.in_memory()
    s.append(MessageEntry(message={"role": "user", "content": "start"}))
    s.append(MessageEntry(message={"role": "assistant", "content": "a1"}))
    s.append(CompactionEntry(summary="first", first_kept_entry_id=s.leaf_id))
    s.append(_state(["old_name"]))
    kept = s.append(MessageEntry(message={"role": "user", "content": "go on"}))
    s.append(MessageEntry(message={"role": "assistant", "content": "a2"}))
    s.append(CompactionEntry(summary="second", first_kept_entry_id=s.branch()[3].id))
    s.append(_state(["new_name"]))
    assert kept.id in [e.id for e in s.branch()]
    return s


@pytest.mark.parametrize("native", [True, False])
def test_only_the_newest_ipython_state_is_projected(native):
    """Before: the older notice (naming variables that may be gone) sat beside the new one."""
    s = _two_compactions()
    full = build_messages(s.branch(), system_prompt="sys", native_tools=native)
    states = [m["content"] for m in full if "<ipython_state>" in str(m["content"])]
    assert len(states) == 1 and "new_name" in states[0] and "old_name" not in states[0]
    # the store's incremental projection says the same
    assert s.messages(system_prompt="sys", native_tools=native) == full
    fresh = SessionStore.in_memory()
    for e in s.branch():  # fed one entry at a time, as a running session does
        fresh.append(e)
        fresh.messages(system_prompt="sys", native_tools=native)
    assert fresh.messages(system_prompt="sys", native_tools=native) == full


def test_token_count_matches_what_is_projected():
    """Before: the count walked entries and included the hidden older notice."""
    s = _two_compactions()
    branch = s.branch()
    projected = build_messages(branch, system_prompt="", native_tools=True)[1:]
    assert context_tokens(branch) == count_messages(projected)

    def fenced(b):
        return build_messages(list(b), system_prompt="You are rlm.", native_tools=False)

    msgs = fenced(branch)
    assert context_tokens(branch, fenced) == count_messages(msgs)
    ctl = CompactionController(s, ScriptedLLM([]), CompactionSettings(), lambda: 100_000,
                               projection=fenced)
    assert ctl.status()["tokens"] == count_messages(msgs)


# ------------------------------------------------------------------ restore timeout


def test_restore_timeout_scales_with_the_snapshot_on_disk(tmp_path):
    """Before: a fixed 60 s, so a large snapshot's slow restore became a start failure."""
    from rlm import __version__
    from rlm.kernel.kernel import HANDSHAKE_EXPR, RESTORE_BYTES_PER_S, START_TIMEOUT_S, Kernel

    k = Kernel(tmp_path / "s", Config(home=tmp_path))
    assert k.restore_timeout() == START_TIMEOUT_S  # no snapshot
    snap = tmp_path / "s" / "snapshot" / "vars"
    snap.mkdir(parents=True)
    big = snap / "group-0.pkl"
    with open(big, "wb") as f:  # sparse: 4 GiB on paper, nothing written
        f.truncate(4 * 1024**3)
    (tmp_path / "s" / "snapshot" / "manifest.json").write_text("{}")
    expected = START_TIMEOUT_S + (4 * 1024**3 + 2) / RESTORE_BYTES_PER_S
    assert k.restore_timeout() == pytest.approx(expected)
    seen = []

    def answer(expr: str, timeout: float) -> str:  # the handshake, then the restore report
        seen.append(timeout)
        return json.dumps({"version": __version__} if expr == HANDSHAKE_EXPR else {})

    k._expression = answer  # type: ignore[method-assign]
    k._restore()
    assert seen == [pytest.approx(expected)] * 2 and expected > 4 * START_TIMEOUT_S
    os.remove(big)


# ------------------------------------------------------------------ rlm_query child


def test_a_child_that_overflows_says_so(_isolated_home):
    """Before: the child's run ended with no answer and the parent's cell got None."""
    from rlm.app import build_agent

    child_llm = ScriptedLLM([{"error": "overflow", "message": "maximum context length exceeded"}])
    config = Config(home=_isolated_home, model="script:main", sub_model="script:child",
                    cell_timeout=60, max_depth=1)
    code = ("try:\n    r = rlm_query('summarise', context=[1, 2])\nexcept Exception as e:\n"
            "    r = f'ERR {e}'\nprint(r)")
    main = ScriptedLLM([
        {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]},
        {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": "final('done')"}}]},
    ])
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    with build_agent(session, config, entry="run", llm=main,
                     llm_factory=lambda spec: child_llm) as agent:
        list(agent.run("delegate"))
    seen = [m["content"] for m in main.calls[1] if m["role"] == "tool"][0]
    assert seen.startswith("ERR ") and "context overflow" in seen and "ended without an answer" in seen


@pytest.mark.parametrize("spec, window, told", [
    ("openai/rlm-no-such-model-7", None, True),     # unknown to litellm: the user is told
    ("openai/rlm-no-such-model-7", 32_000, False),  # --context-window given: nothing to say
    ("openai/gpt-4o-mini", None, False),            # litellm's map knows its window
])
def test_an_unknown_hosted_window_is_said_once_at_start(_isolated_home, spec, window, told):
    """Before: a hosted model missing from litellm's map had no window, so threshold
    compaction silently never fired; now the run's notices say how to set the window."""
    from rlm.app import build_agent
    from rlm.events import Notice
    from rlm.llm import get_llm

    config = Config(home=_isolated_home, model=spec, context_window=window)
    session = SessionStore.create(_isolated_home, model=spec, task="t")
    agent = build_agent(session, config, entry="run", llm=get_llm(spec, config))
    said = [n.text for n in agent.notices if isinstance(n, Notice) and "--context-window" in n.text]
    assert len(said) == (1 if told else 0), agent.notices
    if told:
        assert spec in said[0] and "unknown" in said[0]


# ------------------------------------------------------------------ one entry over keep-recent

_WORDS = " ".join(f"w{i:05d}x" for i in range(1500))  # ~4,500 tokens, one entry


def _imported(home, window: int) -> SessionStore:
    session = SessionStore.create(home, model="script:main", task="t")
    session.append(CustomEntry(custom_type="notebook_import", display=True,
                               content="Notebook cell [1] output:\n" + _WORDS))
    return session


def test_an_entry_larger_than_keep_recent_is_summarised_not_kept(_isolated_home):
    """Before: the walk stopped on the import (a cut point) and kept it whole, so the plan
    said "nothing to summarize" while the import alone filled the window."""
    from rlm.compaction.plan import find_cut_point, plan_compaction

    session = _imported(_isolated_home, 8192)
    session.append(MessageEntry(message={"role": "user", "content": "How many words?"}))
    branch = session.branch()
    big = next(i for i, e in enumerate(branch) if getattr(e, "custom_type", "") == "notebook_import")
    cut, turn_start = find_cut_point(branch, 0, len(branch), keep_recent=2048)
    assert cut == big + 1 and turn_start == -1  # the prompt is kept, the import is summarised
    plan = plan_compaction(branch, CompactionSettings(keep_recent_tokens=2048))
    assert [getattr(e, "custom_type", None) for e in plan.history] == ["notebook_import"]
    # the newest entry is never summarised away, however large
    alone = [e for e in branch if e is branch[big]]
    assert find_cut_point(alone, 0, 1, keep_recent=2048) == (0, -1)


def test_a_context_over_the_threshold_compacts_before_the_first_call(_isolated_home):
    """Before: the threshold was only checked after a turn, so a run that started over it
    (a large notebook import, a resumed session) sent the whole context first; on the
    local model that first call took minutes, or overflowed."""
    from rlm.app import build_agent

    config = Config(home=_isolated_home, model="script:main", context_window=6000)
    summary = "## Goal\nCount the words.\n## Progress\nThe notebook printed 1500 words."
    main = ScriptedLLM([summary, {"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final('1500')"}}]}], config)
    session = _imported(_isolated_home, 6000)
    with build_agent(session, config, entry="run", llm=main) as agent:
        events = list(agent.run("How many words?"))
    summarised, first_model_call = (json.dumps(c) for c in main.calls[:2])
    # the summariser got the import (its head and tail: context entries are cut to
    # CONTEXT_MAX_CHARS for it), then the model the summary
    assert "w00000x w00001x" in summarised and "w01498x w01499x" in summarised
    assert _WORDS not in first_model_call and "The notebook printed 1500 words." in first_model_call
    branch = session.branch()
    kinds = [type(e).__name__ for e in branch]
    assert kinds.index("CompactionEntry") < kinds.index("MessageEntry", kinds.index("CompactionEntry"))
    comp = next(e for e in branch if isinstance(e, CompactionEntry))
    assert comp.trigger == "threshold"
    assert [e.final for e in events if type(e).__name__ == "RunEnded"] == ["1500"]


@pytest.mark.parametrize("window, set_by_user, seen_max", [
    (8192, None, 8192),       # the local model's window: ~8 KB of each output
    (128_000, None, 20_000),  # large windows keep the 20,000 default
    (8192, 3000, 3000),       # a value the user set is kept as given
])
def test_the_output_budget_is_scaled_to_the_window(_isolated_home, window, set_by_user, seen_max):
    """Before: every model saw up to 20,000 characters of each output (~6,000 tokens), three
    quarters of the local model's 8,192-token window in one cell."""
    from rlm.app import build_agent

    config = Config(home=_isolated_home, model="script:main", context_window=window,
                    output_budget_chars=set_by_user)
    main = ScriptedLLM([{"content": "", "tool_calls": [{"name": "python", "arguments": {
        "code": "print('abcdefghi ' * 4000)"}}]}, "FINAL(done)"], config)
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    with build_agent(session, config, entry="run", llm=main) as agent:
        assert agent.config.output_budget_chars == seen_max
        list(agent.run("print a lot"))
    system, tool = main.calls[0][0]["content"], [m for m in main.calls[1] if m["role"] == "tool"][0]
    assert str(seen_max) in system.replace(",", "")  # the prompt states the budget it uses
    assert seen_max * 0.9 < len(tool["content"]) < seen_max + 600  # head + tail + the spool note
