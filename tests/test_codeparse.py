"""Fenced-code parsing and the text FINAL fallback used by small models."""

from rlm.agent.codeparse import code_tool_calls, fenced_blocks, overwritten_inputs, text_final


def test_python_and_bare_fences_become_cells_in_order():
    reply = "Look first.\n```python\nimport pandas as pd\nprint(1)\n```\nthen\n```\nx = 2\n```\n"
    assert fenced_blocks(reply) == ["import pandas as pd\nprint(1)\n", "x = 2\n"]


def test_non_code_fences_are_ignored():
    reply = "```text\nnot code at all, just words\n```\n```json\n{\"a\": 1}\n```\n"
    assert fenced_blocks(reply) == []


def test_bare_fence_with_prose_is_not_run():
    assert fenced_blocks("```\nthe region with most sales is East\n```") == []


def test_unterminated_last_fence_still_runs():
    assert fenced_blocks("```python\nprint(3)") == ["print(3)\n"]


def test_magics_in_bare_fence_count_as_cells():
    assert fenced_blocks("```\n%timeit sum(range(10))\n```") == ["%timeit sum(range(10))\n"]


def test_tool_calls_are_synthetic_python_calls():
    calls = code_tool_calls("```py\nprint(1)\n```")
    assert [(c.name, c.arguments, c.synthetic) for c in calls] == [
        ("python", {"code": "print(1)\n"}, True)
    ]
    assert calls[0].id.startswith("fenced_")


def test_text_final_forms():
    assert text_final("The answer: FINAL(42)") == ("answer", "42")
    assert text_final('FINAL("East")') == ("answer", "East")
    assert text_final("FINAL_VAR(result)") == ("var", "result")
    assert text_final("FINAL_VAR('result')") == ("var", "result")
    assert text_final("no final here") is None
    # the task suite's 1.5B model wrote the answer title-cased; it was read as prose
    assert text_final("Final(Lyon, with 431 orders)") == ("answer", "Lyon, with 431 orders")
    assert text_final("Final_var(result)") == ("var", "result")
    assert fenced_blocks("```python\nFinal(42)\n```") == []
    assert text_final("use `final(x)` in a cell") is None  # the kernel's own API is code


def test_final_inside_code_fence_is_not_a_text_final():
    assert text_final("```python\nprint('FINAL(1)')\n```") is None


def test_a_fence_holding_only_final_is_an_answer_not_a_cell():
    reply = "```python\nFINAL(The old ferry, 940521)\n```"
    assert fenced_blocks(reply) == []
    assert text_final(reply) == ("answer", "The old ferry, 940521")
    # next to real code it is an answer written too early: only the code runs
    both = "```python\nprint(x)\n```\n\n```python\nFINAL(940521)\n```"
    assert fenced_blocks(both) == ["print(x)\n"]


def test_overwritten_inputs_finds_literal_rebinding_only():
    inputs = {"haystack", "sales"}
    assert overwritten_inputs('import re\nhaystack = """a\nb"""\n', inputs) == ["haystack"]
    assert overwritten_inputs("sales: list = [1, 2, {'a': 3}]", inputs) == ["sales"]
    assert overwritten_inputs("haystack = haystack.lower()", inputs) == []  # derived, fine
    assert overwritten_inputs("other = 'x'\nx = haystack", inputs) == []
    assert overwritten_inputs("def f():\n    haystack = 'x'", inputs) == []  # a local
    assert overwritten_inputs("haystack = 'x'", set()) == []
    assert overwritten_inputs("haystack = (", inputs) == []  # the kernel reports the error
    # a retyped text the token limit cut off does not parse: its start still counts
    cut = 'haystack = "2025-01-01 02:16:07 INFO config reloaded\\n2025-01-01 20:24:50 INF'
    assert overwritten_inputs(cut, inputs) == ["haystack"]
    assert overwritten_inputs("x = 1\nsales: str = \"\"\"a,b\n1,2", inputs) == ["sales"]
    assert overwritten_inputs("    haystack = 'x'\nprint(", inputs) == []  # indented: a local
    assert overwritten_inputs("other = 'x\nprint(haystack", inputs) == []
