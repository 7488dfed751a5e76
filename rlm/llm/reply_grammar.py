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

The grammar is small on purpose: llama.cpp checks every vocabulary token against it at each
step, and its cost grows with the alternatives open at a position. A reply cut by
`max_tokens` ends inside the grammar; codeparse still runs an unterminated last fence.

`check(llm)` compiles the grammar against a loaded model's vocabulary (llama.cpp returns no
sampler for a grammar it cannot parse); `Matcher` steps it token by token (tests).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from rlm.errors import ModelError

ROOT = "root"
GBNF = r"""
root  ::= cell | final
cell  ::= "```python\n" "\n"* first line* "```"
first ::= [^`\n \t] [^\n]* "\n"
line  ::= [^`\n] [^\n]* "\n" | "\n"
final ::= "FINAL(" arg ")" | "FINAL_VAR(" name ")"
arg   ::= ([^()] | "(" arg ")")*
name  ::= [A-Za-z_] [A-Za-z0-9_]*
"""


def _sampler(llm: Any) -> Any:
    import llama_cpp

    smpl = llama_cpp.llama_sampler_init_grammar(
        llm._model.vocab, GBNF.encode("utf-8"), ROOT.encode("utf-8"))
    if not smpl:
        raise ModelError("llama.cpp could not parse the local model's reply grammar")
    return smpl


def check(llm: Any) -> Any:
    """The grammar as llama-cpp-python takes it (`grammar=`), after llama.cpp compiled it
    against `llm`'s vocabulary (a grammar it cannot parse would crash the sampler chain)."""
    import llama_cpp
    from llama_cpp import LlamaGrammar

    llama_cpp.llama_sampler_free(_sampler(llm))
    return LlamaGrammar.from_string(GBNF, verbose=False)


class Matcher:
    """The grammar stepped over a text's tokens by llama.cpp's own sampler: whether each
    token is allowed where it comes, and whether the text is a whole reply."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def _allowed(self, smpl: Any, token: int) -> bool:
        import llama_cpp

        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        return not math.isinf(data[0].logit)

    def status(self, text: str) -> str:
        """"complete" (a whole reply: the end of turn is allowed after it), "partial"
        (a prefix of one) or "rejected"."""
        import llama_cpp

        smpl = _sampler(self.llm)
        try:
            for token in self.llm.tokenize(text.encode("utf-8"), add_bos=False,
                                           special=False):
                if not self._allowed(smpl, token):
                    return "rejected"
                llama_cpp.llama_sampler_accept(smpl, token)
            return "complete" if self._allowed(smpl, self.llm.token_eos()) else "partial"
        finally:
            llama_cpp.llama_sampler_free(smpl)
