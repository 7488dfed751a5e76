"""A rule from a complaint: `/rule <what went wrong>` in chat, `rlm rule add SESSION "..."`.

The session's model writes a rule file from the complaint and the session's own outputs
(its replies' prose and cells, newest last); the rule is then validated against those
outputs before anything is saved:

- it must parse (rlm.agent.steer.files) and be a stream rule (a condition);
- it must match the bad example: the output the model names in `example: N` (the front
  matter's number of the output that shows what went wrong; the line is not saved), or,
  when it names none, at least one of the session's outputs;
- a rule that matches far more than the example (more than half of the outputs, and more
  than two) is sent back to be narrowed.

A failed check is fed back to the model, up to MAX_ATTEMPTS attempts; only a validated rule
is written, to the project's `.rlm/rules/NAME.md` (an existing file is never overwritten).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlm import safeio
from rlm.agent.steer.files import RuleError, parse_rule
from rlm.agent.steer.match import RuleTooSlow, StreamRule, match_code, match_text
from rlm.errors import RlmError
from rlm.llm.types import LLM
from rlm.session.entries import Entry, MessageEntry, call_code

_EXAMPLE = re.compile(r"^example:\s*\[?(\d+)\]?[^\n]*\n", re.M)
MAX_ATTEMPTS = 3
SAMPLES = 30  # the newest outputs shown to the model and checked
SAMPLE_CHARS = 600
ASK = """The user complains about how an AI agent worked in this session:

<complaint>{complaint}</complaint>

Write ONE rule file that stops the agent's reply as soon as it does this again. The agent's
outputs in this session, newest last:

{samples}

Reply with the rule file only, in a ```markdown block:

---
name: short_snake_case_name
example: N           # the number of the output above that shows what went wrong
condition: A PYTHON REGEX that matches that output, and little else
scope: code          # or text for prose
---
The reminder the agent reads when the rule fires: what to do instead, in one or two lines.
"""


class RuleAuthoringError(RlmError):
    pass


@dataclass(frozen=True)
class Output:
    where: str  # text | code
    text: str


@dataclass(frozen=True)
class Authored:
    rule: StreamRule
    path: Path
    matched: list[Output]
    attempts: int


def session_outputs(branch: list[Entry]) -> list[Output]:
    """The session's replies as rules see them: prose and each cell's code."""
    out: list[Output] = []
    for e in branch:
        if not (isinstance(e, MessageEntry) and e.role == "assistant" and e.error is None):
            continue
        content = e.message.get("content")
        text = content if isinstance(content, str) else ""
        prose = re.sub(r"```[^\n]*\n.*?(```|\Z)", "", text, flags=re.S).strip()
        if prose:
            out.append(Output("text", prose))
        out.extend(Output("code", c) for c in re.findall(r"```(?:python|py)?\n(.*?)```", text,
                                                          flags=re.S))
        out.extend(Output("code", code) for call in e.message.get("tool_calls") or []
                   if (code := call_code(call)))
    return out[-SAMPLES:]


def matches(rule: StreamRule, output: Output) -> bool:
    if rule.reads("text") != (output.where == "text"):
        return False
    find = match_text if output.where == "text" else match_code
    try:
        return find(rule, output.text) is not None
    except RuleTooSlow:  # a condition that runs out of time matches nothing
        return False


def check(rule: StreamRule, outputs: list[Output]) -> tuple[list[Output], str | None]:
    """(the outputs it matches, why it is not valid or None)."""
    hit = [o for o in outputs if matches(rule, o)]
    if not hit:
        return hit, ("the rule matches none of the session's outputs, so it would not have "
                     "stopped the bad one: make the condition match the offending "
                     f"{'prose' if rule.scope == 'text' else 'code'} above")
    if len(hit) > 2 and len(hit) > len(outputs) // 2:
        return hit, (f"the rule matches {len(hit)} of the session's {len(outputs)} outputs, far "
                     "more than the bad example: narrow the condition")
    return hit, None


def author_rule(llm: LLM, branch: list[Entry], complaint: str, project: Path) -> Authored:
    """Ask `llm` for a rule, validate it against `branch`, save it under `project`."""
    complaint = " ".join(complaint.split())
    if not complaint:
        raise RuleAuthoringError("say what went wrong: /rule <what the agent did wrong>")
    outputs = session_outputs(branch)
    if not outputs:
        raise RuleAuthoringError("the session has no replies yet to write a rule from")
    samples = "\n\n".join(f"[{i}] ({o.where})\n{o.text[:SAMPLE_CHARS]}"
                          for i, o in enumerate(outputs, 1))
    messages = [{"role": "user", "content": ASK.format(complaint=complaint, samples=samples)}]
    why = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        text = _rule_text(llm.complete(messages, tools=[]).content)
        messages.append({"role": "assistant", "content": text})
        rule, hit, why = _validated(text, complaint, outputs)
        if rule is not None:
            return Authored(rule, _save(project, rule.name, _without_example(text)), hit,
                            attempt)
        messages.append({"role": "user", "content": f"{why}. Write the rule file again."})
    raise RuleAuthoringError(f"no valid rule after {MAX_ATTEMPTS} attempts ({why}); nothing "
                             "was saved: say more precisely what went wrong and try again")


def _validated(text: str, complaint: str, outputs: list[Output]
               ) -> tuple[StreamRule | None, list[Output], str]:
    """(the rule, what it matches, "") when valid, else (None, [], why not)."""
    try:
        rule, _, _ = parse_rule(text, name=_slug(complaint), source="")
    except RuleError as e:
        return None, [], f"the rule file is not valid: {e}"
    if rule is None:
        return None, [], "the rule file has no `condition`"
    named = _example(text, len(outputs))
    if named is not None and not matches(rule, outputs[named - 1]):
        return None, [], (f"the rule does not match output [{named}], the bad example you "
                          f"named: make the condition match its "
                          f"{'prose' if outputs[named - 1].where == 'text' else 'code'}")
    hit, why = check(rule, outputs)
    return (None, [], why) if why else (rule, hit, "")


def _example(text: str, n: int) -> int | None:
    """The output number the rule file names in `example: N` (None: none, or out of range)."""
    m = _EXAMPLE.search(text)
    value = int(m.group(1)) if m else 0
    return value if 1 <= value <= n else None


def _without_example(text: str) -> str:
    return _EXAMPLE.sub("", text, count=1)


def _rule_text(reply: str) -> str:
    m = re.search(r"```(?:markdown|md)?\n(.*?)```", reply, flags=re.S)
    return (m.group(1) if m else reply).strip() + "\n"


def _slug(text: str) -> str:
    return "_".join(re.findall(r"[a-z0-9]+", text.lower())[:5]) or "rule"


def _save(project: Path, name: str, text: str) -> Path:
    folder = project / ".rlm" / "rules"
    base = _slug(name)
    path, n = folder / f"{base}.md", 2
    while os.path.lexists(path):
        path, n = folder / f"{base}_{n}.md", n + 1
    # the working directory is the kernel's: nothing below it is followed (rlm.safeio)
    safeio.write_atomic(project, path, text.encode("utf-8"), mode=0o644, durable=False,
                        create_dirs=True)
    return path
