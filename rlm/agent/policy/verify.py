"""Whether an accepted answer is verified: every claim it makes is shown by this run. Pure.

A *claim* is a figure ("1000", "23.5%", "1,800") or a named entity ("N725MQ", "EV", "9E",
"Lyon", "T-1": a capitalised word, a code, an all-caps token) the answer asserts. When an
answer asserts neither, its content words are its claims ("bath", "date and category").
Words and figures of any user prompt of the session are the question's, not claims, and
so are function words ("the", "based", "overall").

An answer with neither says what its own words say ("Badge not found", "ok", "Yes"):
those are its claims, so it is verified only when an output of code that read the data
shows them (`True` shows "yes"); an empty answer is never verified. "Done" is the one
exception, where a goal is in force: the host checks a goal's files and gates itself.

A claim is supported by a successful cell of this run whose output holds it (a figure at
the answer's precision; a word as a whole token, case-insensitively), or, for
`final(value)` / `final_var(name)`, by the value the kernel computed, unless the claim is
a literal typed in a cell of this run (`final("42")`, `answer = "N725MQ, with 1000"`):
typed claims are checked against the outputs like text. A figure a cell prints from text
it typed (`print("Lyon, with 431 orders")`: the local model copied its prompt's example)
is not supported by that cell's output: only by an output that computed it. The same rule
holds for fenced-code and native-tool models.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# a figure: thousands separators, decimals, an optional percent sign; not part of a code
# ("9E", "N725MQ", "2025-01-15" are words) nor of a dotted or hyphenated run
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w-]|[.,]\d))(?P<pct>\s?%)?"
    r"|(?P<word>[^\W_](?:[\w'-]*[^\W_])?)")
# figures in outputs are read loosely (a superset: scientific notation, "1,2" as 1, 2 and 12)
_OUT_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
MAX_RECORDED = 100  # claims listed in evidence / unverified_claims (all are checked)
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)$", re.I)
_PERCENT = re.compile(r"\bper ?cent\b", re.I)

# function words and the vocabulary of answers about data: never a claim on their own
_FUNCTION_WORDS = frozenset("""
a an the and or but nor so yet for of in on at to by with from into onto over under than
then that this these those there their they them it its is are was were be been being am
has have had do does did not no yes true false none null nan ok i we you he she his her
our your which what who whom whose when where why how all any each every some most more
less least many much few one two three per as if also only just about around approx
approximately roughly nearly almost exactly total overall average mean median sum count
number value values result results answer answers final output outputs data based here
thus therefore hence so given shows show shown printed computed calculated found see
according highest lowest largest smallest biggest greatest top bottom best worst first last
max min maximum minimum amount amounts same other another both either neither such like
while after before during since because between among within without via per cent percent
record records row rows column columns table file files list item items entry entries
""".split())
# the words of a completion claim about work the host checks itself (a goal's files and
# gates): "salaries.md is correct" asserts nothing an output could hold, and the local
# model was refused it three times after the host had shown it the right file
COMPLETION = frozenset("""correct correctly right done complete completed finished written
wrote write saved created exists exist matches match successfully updated holds contains
check checked checks pass passes passed goal line lines""".split())
STOPWORDS = _FUNCTION_WORDS | COMPLETION


@dataclass(frozen=True)
class Claim:
    text: str  # as the answer wrote it
    kind: str  # figure | name | word
    value: float | None = None
    decimals: int = 0
    percent: bool = False

    def key(self) -> str:
        return self.text.lower()


@dataclass(frozen=True)
class Shown:
    """A successful cell of this run: its session entry id, the output the model saw and
    the cell's code; whether it depends on the task's data, and what its data-dependent
    lines said (rlm.agent.policy.dataflow: None when the kernel sent no line record)."""

    entry_id: str
    text: str
    code: str = ""
    depends: bool = True
    evidence: str | None = None


@dataclass(frozen=True)
class Verdict:
    verified: bool
    why: str | None = None
    # per claim (as written): the entry ids of the cell results that hold it
    evidence: dict[str, list[str]] = field(default_factory=dict)
    unverified_claims: list[str] = field(default_factory=list)


def _figure(raw: str, pct: bool) -> tuple[float, int] | None:
    digits = raw.replace(",", "")
    try:
        return float(digits), len(digits.split(".")[1]) if "." in digits else 0
    except ValueError:
        return None


def question_vocabulary(prompts: list[str]) -> tuple[set[str], list[float]]:
    """The words (lowercased) and figures of the session's prompts."""
    words: set[str] = set()
    figures: list[float] = []
    for text in prompts:
        for m in _TOKEN.finditer(text):
            if m.group("word"):
                words.add(_bare(m.group("word")).lower())
            elif (f := _figure(m.group("num"), False)) is not None:
                figures.append(f[0])
    return words, figures


def _bare(word: str) -> str:
    return re.sub(r"'s$", "", word)


# the words of an answer no output is needed to show: function words and words about the
# answering itself ("based on the output, the answer is yes" says "yes")
FILLER = frozenset("""a an the and or of to in on at by for with from is are was were be
been has have it its this that there based output outputs answer answers result results
final computed calculated according shows shown printed see here thus therefore hence
given data""".split())
# how a kernel prints what an answer words: "yes" is shown by `True`
_SHOWN_AS = {"yes": ("true",), "no": ("false",), "true": ("yes",), "false": ("no",)}


def phrase(answer: str, asked: set[str], host_checks: bool = False) -> list[Claim]:
    """A claimless answer's own words and figures, the answer vocabulary's included
    ("not found", "ok", "Yes"): what it says, which only an output of code that read the
    data can show. Words of the question (`asked`) are left out while others remain; so
    are the words of a completion claim ("done", "written") where the host checks the
    work itself (`host_checks`: a goal is in force, its files and gates checked)."""
    said = _phrase(answer)
    said = [c for c in said if c.key() not in asked] or said
    return [c for c in said if c.key() not in COMPLETION] if host_checks else said


def _phrase(answer: str) -> list[Claim]:
    out: list[Claim] = []
    seen: set[str] = set()
    for m in _TOKEN.finditer(answer):
        if m.group("num") and (f := _figure(m.group("num"), False)) is not None:
            text = m.group(0).replace(" ", "")
            if text not in seen:
                seen.add(text)
                out.append(Claim(text, "figure", f[0], f[1], bool(m.group("pct"))))
        elif m.group("word"):
            low = _bare(m.group("word")).lower()
            if low not in FILLER and low not in seen:
                seen.add(low)
                out.append(Claim(low, "word"))
    return out


def claims(answer: str, prompts: list[str], host_checks: bool = False,
           disputed: frozenset[str] = frozenset()) -> list[Claim]:
    """Every figure and named entity `answer` asserts that the prompts do not hold; its
    content words when it asserts none; its phrase (`phrase`) when it has no content word
    either: an answer is never verified for saying nothing checkable. `disputed`: claims
    (lowercased, as written) a refusal named; they stay claims though that refusal, a
    prompt, now holds them."""
    asked_words, asked_figures = question_vocabulary(prompts)
    asked_words -= disputed
    gone = {f[0] for d in disputed if (f := _figure(d.rstrip("%"), False)) is not None}
    asked_figures = [f for f in asked_figures if f not in gone]
    percent_words = bool(_PERCENT.search(answer))
    strong: list[Claim] = []
    words: list[Claim] = []
    seen: set[str] = set()
    for m in _TOKEN.finditer(answer):
        if m.group("num"):
            f = _figure(m.group("num"), bool(m.group("pct")))
            if f is None or f[0] in asked_figures or m.group("num") in seen:
                continue
            seen.add(m.group("num"))
            strong.append(Claim(m.group(0).replace(" ", ""), "figure", f[0], f[1],
                                bool(m.group("pct")) or percent_words))
            continue
        word = _bare(m.group("word"))
        low = word.lower()
        if low in STOPWORDS or low in asked_words or low in seen or _ORDINAL.match(word):
            continue
        seen.add(low)
        code = any(c.isdigit() for c in word) or (len(word) >= 2 and word.isupper())
        if code or word[0].isupper():
            strong.append(Claim(word, "name"))
        else:
            words.append(Claim(word, "word"))
    return strong or words or phrase(answer, asked_words, host_checks)


def _output_figures(text: str) -> list[float]:
    out: list[float] = []
    for m in _OUT_NUMBER.finditer(text):
        raw = m.group(0)
        for candidate in {raw.replace(",", ""), *raw.split(",")}:
            try:
                out.append(float(candidate))
            except ValueError:
                continue
    return out


def _output_words(text: str) -> set[str]:
    return {_bare(m.group("word")).lower() for m in _TOKEN.finditer(text) if m.group("word")}


def holds(claim: Claim, figures: list[float], words: set[str]) -> bool:
    """`claim` is among an output's figures (at the answer's precision; a percent also as
    a fraction) or words."""
    if claim.kind != "figure" or claim.value is None:
        return any(w in words for w in (claim.key(), *_SHOWN_AS.get(claim.key(), ())))
    tol = 0.5 * 10 ** -claim.decimals + 1e-9
    return any(abs(v - claim.value) <= tol or (claim.percent and abs(v * 100 - claim.value) <= tol)
               for v in figures)


def typed_literals(codes: list[str]) -> tuple[list[float], set[str]]:
    """Figures and words the model typed into its answer in `codes`. Words: every string
    literal (f-string text included). Figures: the number literals that reach a final() /
    final_var() value unchanged: passed straight, through f-strings, `str()`/`int()`/
    `format()` and the like, container literals and string concatenation, and through the
    names they are bound to in any cell (`n = [1000]` then `final(n[0])`; `K = 3` then
    `final(f"{g(2)}|{K}")`: a constant the code merely carries is typed, not computed).
    Numbers code computes with (`head(10)`, `x * 3`) are not typed. Code that does not
    parse counts whole."""
    parts: list[str] = []
    trees: list[ast.AST] = []
    for code in codes:
        try:
            trees.append(ast.parse(code))
        except SyntaxError:
            parts.append(code)
    for tree in trees:
        parts.extend(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str))
    parts.extend(_number(c) for c in _flowing_constants(trees))
    text = "\n".join(parts)
    return _output_figures(text), _output_words(text)


_FINALS = ("final", "final_var")
# calls that hand a value on unchanged (a conversion or a container), not a computation
_CARRIERS = frozenset({"str", "int", "float", "repr", "format", "list", "tuple", "set",
                       "frozenset", "dict", "sorted"})


def _flowing_constants(trees: list[ast.AST]) -> list[ast.expr]:
    """The literals that reach a final() value unchanged, following names to what any
    cell bound them to (a fixpoint over every cell's assignments)."""
    bindings: dict[str, list[ast.expr]] = {}
    starts: list[ast.expr] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _FINALS:
                starts += node.args
                starts += [ast.Name(a.value) for a in node.args
                           if getattr(node.func, "id", None) == "final_var"
                           and isinstance(a, ast.Constant) and isinstance(a.value, str)]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            bindings.setdefault(name.id, []).append(node.value)
    found: list[ast.expr] = []
    seen_names: set[str] = set()
    todo = list(starts)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(
                node.op, ast.USub) and isinstance(node.operand, ast.Constant)):
            found.append(node)
        elif isinstance(node, ast.Name):
            if node.id not in seen_names:
                seen_names.add(node.id)
                todo += bindings.get(node.id, [])
        else:
            todo += _carried(node)
    return found


def _carried(node: ast.expr) -> list[ast.expr]:
    """The parts of `node` whose value it hands on unchanged."""
    if isinstance(node, ast.JoinedStr):
        return list(node.values)
    if isinstance(node, (ast.FormattedValue, ast.Starred)):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return list(node.elts)
    if isinstance(node, ast.Dict):
        return [v for v in (*node.keys, *node.values) if v is not None]
    if isinstance(node, ast.Subscript):  # n[0]: an element of what n holds
        return [node.value]
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)) and any(
            _is_text(side) for side in (node.left, node.right)):
        return [node.left, node.right]  # "with " + str(1000), "%d flights" % 1000
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in _CARRIERS:
            return [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Attribute) and func.attr in ("format", "join") and _is_text(func.value):
            return [func.value, *node.args, *(k.value for k in node.keywords)]
    return []


def _supported(s: Shown) -> tuple[str, list[float], set[str]]:
    """(entry, figures, words) of `s`'s output that code depending on data printed: what
    its data-dependent lines said, as far as the model saw it; the whole output when the
    kernel sent no line record and the cell depends on data; nothing otherwise."""
    if not s.depends:
        return s.entry_id, [], set()
    figures, words = _computed(_output_figures(s.text), s.code), _output_words(s.text)
    if s.evidence is None:
        return s.entry_id, figures, words
    said_figures, said_words = set(_output_figures(s.evidence)), _output_words(s.evidence)
    return (s.entry_id, [f for f in figures if f in said_figures],
            words & said_words)


def _computed(figures: list[float], code: str) -> list[float]:
    """An output's figures less those its cell typed in a string literal it prints (text,
    not a result)."""
    typed = set(_output_figures(_strings(code)))
    return [f for f in figures if f not in typed] if typed else figures


def _strings(code: str) -> str:
    """The text of the string literals `code` prints: inside a print() / display() call
    (f-strings' text parts included, format specs not)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    printed = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "id", None) in ("print", "display")]
    specs = {id(c) for call in printed for node in ast.walk(call)
             if isinstance(node, ast.FormattedValue) and node.format_spec is not None
             for c in ast.walk(node.format_spec)}
    return "\n".join(node.value for call in printed for node in ast.walk(call)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and id(node) not in specs)


def _number(node: ast.expr) -> str:
    """The text of a number literal (`42`, `-1.5`), or ""."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return f"-{inner}" if inner else ""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return repr(node.value)
    return ""


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)) or (
        isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("str", "repr", "format"))


def verify(answer: str, *, source: str, shown: list[Shown], codes: list[str], prompts: list[str],
           cells_run: int, last_cell_ok: bool | None, error_like: str | None = None,
           final_entry: str | None = None, final_depends: bool = True,
           host_checks: bool = False, disputed: frozenset[str] = frozenset()) -> Verdict:
    """Whether `answer` is verified by this run, with the evidence for each claim or the
    claims nothing supports. `source` is final | final_var (a value from the kernel,
    computed by the cell `final_entry`; `final_depends`: by a statement that depends on the
    task's data), or text | reply (written by the model); `codes` are the cells this run
    executed; `prompts` every user prompt of the session. A claim is supported only by
    what code that depends on the task's data printed (rlm.agent.policy.dataflow).
    `host_checks`: a goal is in force, so "done" is the host's to check (`phrase`);
    `disputed`: claims a refusal named, claims still (`claims`)."""
    echo = _echoed(answer, prompts)
    if echo:
        return Verdict(False, echo, {}, [])
    if not _phrase(answer):
        return Verdict(False, NOTHING_SAID, {}, [])
    found = claims(answer, prompts, host_checks, disputed)
    read = [_supported(s) for s in shown]
    evidence: dict[str, list[str]] = {}
    for c in found:
        evidence[c.text] = [entry for entry, figures, words in read if holds(c, figures, words)]
    if source in ("final", "final_var") and final_entry is not None and final_depends:
        typed_figures, typed_words = typed_literals(codes)
        for c in found:
            if not evidence[c.text] and not holds(c, typed_figures, typed_words):
                evidence[c.text] = [final_entry]  # computed in the kernel, not typed
    missing = [c for c in found if not evidence[c.text]]
    # what no data-dependent line said, but an output shows: made from literals
    raw = [(_output_figures(s.text), _output_words(s.text)) for s in shown] if missing else []
    literal = [c for c in missing if any(holds(c, fig, words) for fig, words in raw)]
    why = _why(missing, source=source, shown=shown, cells_run=cells_run,
               last_cell_ok=last_cell_ok, error_like=error_like, literal=literal)
    if why is None:  # what is recorded is bounded: an answer can be a whole table
        return Verdict(True, None, dict(list(evidence.items())[:MAX_RECORDED]))
    return Verdict(False, why, {},
                   ([c.text for c in missing] or [c.text for c in found])[:MAX_RECORDED])


NOTHING_SAID = "the answer says nothing an output could show (it is empty or only filler)"
ECHO_WORDS = 6  # an answer this long found whole in a prompt is an echo, not a finding
ECHOED = "the answer repeats words it was given (a prompt or the host's note), not an output"


def _echoed(answer: str, prompts: list[str]) -> str | None:
    """Why `answer` is no finding: it is (the start of) text the session gave the model.
    The local model answered a goal's continuation with a copy of its "Done means: ..."
    line, whose words are all the question's: no claim was left to check (issue 33's
    shipments run completed its goal with a wrong file)."""
    said = _plain(answer)
    if len(said.split()) < ECHO_WORDS:
        return None
    return ECHOED if any(said in _plain(p) for p in prompts) else None


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[`'\"*_]", "", text).lower().split()).strip(" .,:;!()")


def _why(missing: list[Claim], *, source: str, shown: list[Shown], cells_run: int,
         last_cell_ok: bool | None, error_like: str | None,
         literal: list[Claim] | None = None) -> str | None:
    if error_like:
        return f"the answer reads like an error message ({error_like})"
    if cells_run == 0 and source not in ("final", "final_var"):
        return "no cell ran in this run: the answer was not checked by code"
    if not shown and source not in ("final", "final_var"):
        if last_cell_ok is False:
            return "the last cell of this run failed: no successful output supports the answer"
        return "no cell of this run succeeded: no output supports the answer"
    if not missing:
        return None
    kinds = {"figure": "figures", "name": "names", "word": "words"}
    literal = literal or []
    unseen = [c for c in missing if c not in literal]
    parts = []
    for subset, said in ((unseen, "appear in no output of this run"),
                         (literal, "appear only in outputs of code that reads none of the "
                                   "task's data (literals, not the data)")):
        groups = [f"{kinds[k]} ({', '.join(c.text for c in subset if c.kind == k)[:120]})"
                  for k in kinds if any(c.kind == k for c in subset)]
        if groups:
            parts.append(f"the answer's {' and '.join(groups)} {said}")
    return "; ".join(parts)
