"""The embedded model's reply grammar: a turn's reply is one fenced Python cell or a
final answer, so every reply parses (rlm.agent.codeparse).

A fenced-code model is free to write prose, several blocks, a fence it never closes or an
answer in a form the host does not read; the 1.5B model does all of these. On a turn that
offers the python tool (the agent's turns; not a compaction summary, an `llm_query`
sub-call or the advisor) the local provider samples under this GBNF grammar (llama.cpp's
grammar sampler), and the reply is exactly one of:

- a cell: "```python\\n", lines (the first that is not blank starts at its first column:
  an empty block is no cell), "```" at the start of a line; a plan goes at its top as
  `# ...` comment lines. Nothing follows the closing fence (the grammar is complete there,
  so the next token is the end of the turn).
- `FINAL(answer)`, its parentheses balanced (what codeparse.text_final reads), or
  `FINAL_VAR(name)`.

A call that requires the tool (`tool_choice="required"`: the host refused an answer and the
fix is work, rlm.agent.policy `AnswerPolicy.tool_choice`) is sampled under the `cell` form:
the same cell, no answer. The forms share their rules (`FORMS`).

The grammar is small on purpose: its cost grows with the alternatives open at a position.
llama-cpp-python's grammar sampler checks every one of the 151k vocabulary tokens at every
step: +42% per generated token on 2 cores (bench/grammar_local.py). A greedy turn (the
default, temperature 0) uses `GreedyGrammar` instead, as llama.cpp's own common sampler
does: the most likely token is checked alone and taken when the grammar allows it; only
when it does not (the first token of a reply that would be prose, the end of a block) is
the whole vocabulary checked. The reply is the same; the cost is about free sampling's.
A reply cut by `max_tokens` ends inside the grammar; codeparse still runs an unterminated
last fence.

`check(llm)` compiles the grammar against a loaded model's vocabulary (llama.cpp returns no
sampler for a grammar it cannot parse); `Matcher` steps it token by token (tests).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from rlm.errors import ModelError

ROOT = "root"
CELL_RULES = r"""
cell  ::= "```python\n" "\n"* first line* "```"
first ::= [^`\n \t] [^\n]* "\n"
line  ::= [^`\n] [^\n]* "\n" | "\n"
"""
FINAL_RULES = r"""
final ::= "FINAL(" arg ")" | "FINAL_VAR(" name ")"
arg   ::= ([^()] | "(" arg ")")*
name  ::= [A-Za-z_] [A-Za-z0-9_]*
"""
GBNF = "root  ::= cell | final" + CELL_RULES + FINAL_RULES.lstrip("\n")
CELL_GBNF = "root  ::= cell" + CELL_RULES
# a reply's form -> its grammar: an agent's turn, and a turn that must run a cell
FORMS = {"cell_or_answer": GBNF, "cell": CELL_GBNF}


def _sampler(llm: Any, text: str = GBNF) -> Any:
    import llama_cpp

    smpl = llama_cpp.llama_sampler_init_grammar(
        llm._model.vocab, text.encode("utf-8"), ROOT.encode("utf-8"))
    if not smpl:
        raise ModelError("llama.cpp could not parse the local model's reply grammar")
    return smpl


def check(llm: Any, text: str = GBNF) -> Any:
    """The grammar `text` as llama-cpp-python takes it (`grammar=`), after llama.cpp
    compiled it against `llm`'s vocabulary (a grammar it cannot parse would crash the
    sampler chain)."""
    import llama_cpp
    from llama_cpp import LlamaGrammar

    llama_cpp.llama_sampler_free(_sampler(llm, text))
    return LlamaGrammar.from_string(text, verbose=False)


def _allowed(smpl: Any, token: int) -> bool:
    """Whether the grammar sampler `smpl` allows `token` next (checked alone)."""
    import llama_cpp

    data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
    llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
    return not math.isinf(data[0].logit)


class GreedyGrammar:
    """Greedy sampling under the grammar, one llama.cpp sampler step at a time (`apply`, a
    custom sampler placed before the greedy one, rlm.llm.local): the most likely token is
    checked alone; only a token the grammar forbids makes it check them all. The tokens
    generated since the last step are read from the model's input ids and fed to the
    grammar first. `close()` frees the grammar; `full` counts the steps that checked all."""

    def __init__(self, llm: Any, text: str = GBNF) -> None:
        self.llm = llm
        self.smpl = _sampler(llm, text)
        self.fed: int | None = None
        self.steps = self.full = 0

    def apply(self, cur_p: Any) -> None:
        import llama_cpp
        import numpy as np

        if self.smpl is None:  # closed: the reply has ended
            return
        n = self.llm.n_tokens
        for token in self.llm.input_ids[self.fed or n : n]:
            llama_cpp.llama_sampler_accept(self.smpl, int(token))
        self.fed = n
        self.steps += 1
        arr = cur_p.contents
        data = np.ctypeslib.as_array(arr.data, shape=(arr.size,))
        if not _allowed(self.smpl, int(data["id"][int(np.argmax(data["logit"]))])):
            self.full += 1
            llama_cpp.llama_sampler_apply(self.smpl, cur_p)

    def close(self) -> None:
        import llama_cpp

        if self.smpl is not None:
            llama_cpp.llama_sampler_free(self.smpl)
            self.smpl = None


class Matcher:
    """The grammar stepped over a text's tokens by llama.cpp's own sampler: whether each
    token is allowed where it comes, and whether the text is a whole reply."""

    def __init__(self, llm: Any, text: str = GBNF) -> None:
        self.llm, self.text = llm, text

    def status(self, text: str) -> str:
        """"complete" (a whole reply: the end of turn is allowed after it), "partial"
        (a prefix of one) or "rejected"."""
        import llama_cpp

        smpl = _sampler(self.llm, self.text)
        try:
            for token in self.llm.tokenize(text.encode("utf-8"), add_bos=False,
                                           special=False):
                if not _allowed(smpl, token):
                    return "rejected"
                llama_cpp.llama_sampler_accept(smpl, token)
            return "complete" if _allowed(smpl, self.llm.token_eos()) else "partial"
        finally:
            llama_cpp.llama_sampler_free(smpl)
