"""The local model's reply grammar (rlm.llm.reply_grammar).

Fast: which calls are sampled under it (an agent's turn offers the python tool; summaries
and sub-calls do not; config `local_grammar = false` turns it off) and that only the local
provider is sent the tools of a fenced-code call. No model is loaded (a 4-byte GGUF stub).

Slow (the real model file): llama.cpp compiles the grammar, and its own grammar sampler,
stepped over a reply's tokens, accepts exactly the replies codeparse reads as one cell or
one answer; a real generation under it parses, also when cut by max_tokens.
"""

from __future__ import annotations

import pytest

from rlm.agent.codeparse import fenced_blocks, text_final
from rlm.config import Config
from rlm.llm.types import PYTHON_TOOL

USER = [{"role": "user", "content": "How many rows has `df`?"}]


@pytest.fixture
def stub_local(tmp_path):
    """`get_llm` for a stub GGUF whose model records how each call would be sampled."""
    from rlm.llm import get_llm, inproc, local

    path = tmp_path / "stub.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 16)

    def build(config: Config):
        llm = get_llm(f"local:{path}", config)
        model = llm._handler.model
        calls: list[str | None] = []

        def prepare(messages, max_tokens, stop=None):
            return local.Prepared("p", list(stop or []), 1, 16)

        def generate(prep, *, temperature, seed, prefixes=None, form=None):
            calls.append(form)
            yield inproc.chunk("FINAL(3)")
            yield inproc.chunk(finished=True, finish_reason="stop",
                               usage={"prompt_tokens": 1, "completion_tokens": 3,
                                      "total_tokens": 4})

        model.prepare, model.generate = prepare, generate
        return llm, calls

    yield build
    local._MODELS.pop(next((k for k, m in local._MODELS.items() if m.path == path), ""), None)


def test_an_agent_turn_is_sampled_under_the_grammar_other_calls_are_not(stub_local, tmp_path):
    llm, calls = stub_local(Config(home=tmp_path))
    assert llm.complete(USER, tools=[PYTHON_TOOL]).content == "FINAL(3)"  # a turn
    llm.complete(USER, tools=[])  # a summary, an llm_query sub-call
    llm.complete(USER)  # the advisor on a fenced-code model
    assert calls == ["cell_or_answer", None, None]


def test_config_local_grammar_off_samples_every_call_freely(stub_local, tmp_path):
    llm, calls = stub_local(Config(home=tmp_path, local_grammar=False))
    llm.complete(USER, tools=[PYTHON_TOOL])
    llm.complete(USER, tools=[PYTHON_TOOL], tool_choice="required")
    assert calls == [None, None]


def test_local_grammar_is_read_from_the_users_config_file(tmp_path, monkeypatch):
    from rlm.config import load_config

    monkeypatch.setenv("RLM_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text("local_grammar = false\n")
    assert load_config().local_grammar is False
    assert Config().local_grammar is True  # on by default


def test_a_fenced_code_model_of_another_provider_is_never_sent_tools():
    from rlm.llm.inproc_models import ScriptedLLM

    llm = ScriptedLLM(["```python\nprint(1)\n```"])
    llm.native_tools = False  # a fenced-code script, like a hosted model without tools
    llm.complete(USER, tools=[PYTHON_TOOL])
    assert llm.requests[0]["tools"] is None


# -- the grammar itself, on the real vocabulary (slow tier: it needs the model file) ----------

CELL = "```python\nprint(len(df))\n```"
ACCEPTED = [
    CELL,
    "```python\n# plan: count the rows, then print them\nn = len(df)\n\nprint(n)\n```",
    "```python\n\nfor r in rows:\n    print(r)\n```",
    "```python\ns = '```'\nprint(s)\n```",  # a fence inside a line is code
    "FINAL(42)",
    "FINAL(Lyon, with 431 orders (of 1200))",
    "FINAL(two\nlines)",
    "FINAL_VAR(result)",
]
REJECTED = [
    "The answer is 42.",  # prose
    "Here is the code:\n" + CELL,  # prose before the block
    CELL + "\nFINAL(1)",  # anything after the block
    CELL + "\n" + CELL,  # a second block
    "```py\nprint(1)\n```",  # another language tag
    "```python\n```",  # an empty block is no cell
    "```python\n   \n```",
    "FINAL(a))",  # unbalanced at top level
    "Final(1)",
    "FINAL_VAR(1x)",
]
PARTIAL = ["```python\nprint(1)\n", "FINAL(f(x)"]  # what max_tokens may cut


@pytest.fixture(scope="module")
def vocab(joined_model_cache):
    from llama_cpp import Llama

    from rlm.llm.modelfile import MODEL_FILENAME

    llm = Llama(str(joined_model_cache / MODEL_FILENAME), vocab_only=True, verbose=False)
    yield llm
    llm.close()


@pytest.mark.slow
def test_llama_cpp_compiles_the_grammar(vocab):
    from rlm.llm import reply_grammar

    grammar = reply_grammar.check(vocab)
    assert grammar._grammar == reply_grammar.GBNF


@pytest.mark.slow
@pytest.mark.parametrize("text", ACCEPTED)
def test_the_grammar_accepts_one_cell_or_one_answer_and_codeparse_reads_it(vocab, text):
    from rlm.llm.reply_grammar import Matcher

    assert Matcher(vocab).status(text) == "complete"
    cells, final = fenced_blocks(text), text_final(text)
    assert (len(cells), final is None) in ((1, True), (0, False))  # exactly one of them


@pytest.mark.slow
@pytest.mark.parametrize("text", REJECTED)
def test_the_grammar_rejects_prose_extra_text_and_other_forms(vocab, text):
    from rlm.llm.reply_grammar import Matcher

    assert Matcher(vocab).status(text) == "rejected"


@pytest.mark.slow
def test_the_cell_form_accepts_the_cell_and_no_answer(vocab):
    from rlm.llm.reply_grammar import CELL_GBNF, Matcher

    cell = Matcher(vocab, CELL_GBNF)
    assert [cell.status(t) for t in (CELL, ACCEPTED[1], ACCEPTED[3])] == ["complete"] * 3
    assert [cell.status(t) for t in ("FINAL(42)", "FINAL_VAR(result)", "The answer is 42.")] \
        == ["rejected"] * 3


@pytest.mark.slow
@pytest.mark.parametrize("text", PARTIAL)
def test_a_reply_cut_inside_the_grammar_still_parses(vocab, text):
    from rlm.llm.reply_grammar import Matcher

    assert Matcher(vocab).status(text) == "partial"
    assert fenced_blocks(text) or text_final(text)  # the unterminated-fence rule, FINAL( rest


# -- a real generation under the grammar -----------------------------------------------------


@pytest.mark.slow
def test_a_turn_that_would_be_prose_is_a_cell_or_an_answer_under_the_grammar(
        local_model, _isolated_home):
    from rlm.llm import get_llm

    llm = get_llm("local", Config(home=_isolated_home, temperature=0.0))
    ask = [{"role": "user", "content": "In one sentence, what is a Python list?"}]
    free = llm.complete(ask, tools=[], max_tokens=48).content
    assert not fenced_blocks(free) and text_final(free) is None  # prose when free
    turn = llm.complete(ask, tools=[PYTHON_TOOL], max_tokens=48).content
    assert len(fenced_blocks(turn)) == 1 or text_final(turn) is not None, turn
    cut = llm.complete(ask, tools=[PYTHON_TOOL], max_tokens=6).content
    assert fenced_blocks(cut) or text_final(cut) is not None, cut


@pytest.mark.slow
def test_a_turn_that_must_run_a_cell_is_a_cell_where_it_would_answer(local_model,
                                                                     _isolated_home):
    from rlm.llm import get_llm

    llm = get_llm("local", Config(home=_isolated_home, temperature=0.0))
    ask = [{"role": "user", "content": "What is 6*7? Reply with only FINAL(answer)."}]
    free = llm.complete(ask, tools=[PYTHON_TOOL], max_tokens=48).content
    assert text_final(free) is not None and not fenced_blocks(free), free
    cell = llm.complete(ask, tools=[PYTHON_TOOL], tool_choice="required", max_tokens=48).content
    assert len(fenced_blocks(cell)) == 1 and text_final(cell) is None, cell


@pytest.mark.slow
def test_the_greedy_grammar_gives_the_reply_llama_cpps_grammar_sampler_gives(
        local_model, _isolated_home):
    """GreedyGrammar checks the likeliest token alone (all of them only when it is
    forbidden); the reply is the one the full grammar sampler gives."""
    from rlm.llm import local, reply_grammar

    model = local.make_handler(None, Config(home=_isolated_home)).model
    ask = [{"role": "user", "content": "In one sentence, what is a Python list?"}]
    prep = model.prepare(ask, 40)
    llm = model.load()

    def reply(grammar):
        llm.reset()
        out = llm.create_completion(prep.tokens, max_tokens=40, temperature=0.0,
                                    grammar=grammar)
        return out["choices"][0]["text"]

    fast = reply_grammar.GreedyGrammar(llm)
    try:
        assert reply(fast) == reply(reply_grammar.check(llm))
    finally:
        fast.close()
    assert 1 <= fast.full < fast.steps  # prose was forbidden at the start, not everywhere
