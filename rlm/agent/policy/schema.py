"""Typed results: a child spawned with `schema=` must end with a `final(value)` that the
JSON schema accepts (jsonschema). Pure decisions over the answer's text:

  parse_value(text)      the value final() sent: JSON, else a Python literal (final()
                         sends str(value), so a dict arrives as its repr)
  with_sections(v, s, schema)  `yield_section(label, item)` items merged into the arrays
                         the schema declares (items yielded first, then the value's own)
  problems(value, schema)      what the schema refuses, one line each
  SchemaRule             the answer policy's rule: an answer that does not validate is
                         refused with the errors, up to `retries` times per run

A value still invalid after the retries reaches the parent as a `SchemaError`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

from rlm.agent.policy.decisions import Answer, Facts, Refuse
from rlm.agent.policy.rules import Rule
from rlm.errors import RlmError
from rlm.session.entries import Entry

RETRIES = 3  # refusals of an invalid final() per child run
MAX_ERRORS = 5  # errors shown per refusal
KEY = "schema"


class SchemaError(RlmError):
    """A child's final value that its schema refuses (after the retries)."""


def check_schema(schema: Any) -> None:
    """Refuse a schema jsonschema cannot use, naming the fix (at spawn, in the parent)."""
    import jsonschema

    if not isinstance(schema, dict | bool):
        raise RlmError(f"schema must be a JSON schema (a dict), not {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise RlmError(f"schema is not a valid JSON schema: {e.message}") from None


def parse_value(text: str) -> Any:
    """final()'s value: JSON text, else a Python literal (str(dict)), else the text."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            continue
    return text


def with_sections(value: Any, sections: dict[str, list[Any]], schema: Any) -> Any:
    """`value` with the yielded sections merged into the object's array properties."""
    if not sections or not isinstance(value, dict):
        return value
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    out = dict(value)
    for label, items in sections.items():
        if props.get(label, {}).get("type") == "array" or label not in out:
            own = out.get(label, [])
            out[label] = list(items) + (list(own) if isinstance(own, list) else [own])
    return out


def problems(value: Any, schema: Any) -> list[str]:
    """Each way `value` breaks `schema`, as `path: message`; [] when it validates."""
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    out = []
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in err.path) or "(the value)"
        out.append(f"{where}: {err.message[:300]}")
    return out


def typed_result(text: str | None, sections: dict[str, list[Any]], schema: Any) -> Any:
    """The parent's value for a child's final answer, or SchemaError."""
    value = with_sections(parse_value(text or ""), sections, schema)
    errors = problems(value, schema)
    if errors:
        raise SchemaError("the child's final value does not match its schema: "
                          + "; ".join(errors[:MAX_ERRORS]))
    return value


def schema_note(schema: Any) -> str:
    """How a child with a schema reports (the end of its role: rlm.agent.children)."""
    return ("\n\nReport your result with final(value), where value is a Python dict/list "
            "that matches this JSON schema (it is validated; an invalid value is returned "
            "to you with the errors):\n" + json.dumps(schema, indent=1)[:4000]
            + "\nFor a long list you may also call yield_section(label, item) for each item "
              "as you find it: the items are added to the array property `label`.")


class SchemaRule(Rule):
    """Refuse a final answer the child's schema does not accept, with the errors, at most
    `retries` times per run; then the answer stands and the parent gets a SchemaError."""

    def __init__(self, schema: Any, sections: dict[str, list[Any]],
                 retries: int = RETRIES) -> None:
        self.schema, self.sections, self.retries = schema, sections, retries

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        tries = sum(k.startswith(KEY) for k in facts.refused)
        if tries >= self.retries:
            return None
        value = with_sections(parse_value(answer.text), self.sections, self.schema)
        errors = problems(value, self.schema)
        if not errors:
            return None
        shown = "\n".join(f"- {e}" for e in errors[:MAX_ERRORS])
        left = self.retries - tries - 1
        return Refuse(
            f"Your final value does not match the required JSON schema:\n{shown}\n"
            f"Fix the value and call final() again ({left} retr{'y' if left == 1 else 'ies'} "
            "left).",
            f"the child's final value failed its schema ({len(errors)} error(s)); sent it "
            "back to fix", key=f"{KEY}-{tries + 1}")
