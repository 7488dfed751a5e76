"""`rlm run --context FILE`: big inputs go into kernel variables, not into the prompt.

Each file becomes one variable named after its stem (`sales.csv` -> `sales`): CSV/TSV,
Parquet and JSON Lines (.jsonl, .ndjson) load as pandas DataFrames, JSON as parsed objects,
anything else as text (or bytes when it is not UTF-8). The model sees only names, types, sizes and a short preview.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from kernel_ext.contract import ALIASES
from rlm.config import Config
from rlm.errors import ConfigError
from rlm.kernel.types import CellResult
from rlm.protocols import Executor, started
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry

# Each loader binds only its target name: modules come from `__import__(...)` inside the
# expression, so nothing else in the user's namespace is bound or deleted (a loader
# that did `import pandas as _pd ... del _pd` removed a `_pd` the user had).
_LOADERS = {
    ".csv": "{name} = __import__('pandas').read_csv({path!r})\n",
    ".tsv": "{name} = __import__('pandas').read_csv({path!r}, sep='\\t')\n",
    ".parquet": "{name} = __import__('pandas').read_parquet({path!r})\n",
    ".json": "{name} = __import__('json').loads(__import__('pathlib').Path({path!r}).read_bytes())\n",
}
_TEXT = (
    "{name} = __import__('pathlib').Path({path!r}).read_bytes()\n"
    "try:\n    {name} = {name}.decode('utf-8')\nexcept UnicodeDecodeError:\n    pass\n"
)
# JSON Lines: one record per line, a table like a CSV (text when a line is not JSON)
_LINES = ("try:\n    {name} = __import__('pandas').read_json({path!r}, lines=True)\n"
          "except ValueError:\n" + "".join("    " + line + "\n" for line in _TEXT.splitlines()))
_LOADERS[".jsonl"] = _LOADERS[".ndjson"] = _LINES

# names a context file must not take: the kernel API (kernel_ext.api.NAMES; a test keeps
# the two in step), IPython's own, and every builtin (`print.txt` must not shadow print)
KERNEL_API = frozenset({"final", "final_var", "llm_query", "llm_query_batched", "rlm_query",
                        "compact", "history", "goal", "heartbeat", "cron", "memory",
                        "rlm_spawn", "rlm_gather", "rlm_wait", "rlm_max_children",
                        "yield_section"})
RESERVED_NAMES = KERNEL_API | frozenset(dir(builtins)) | frozenset(
    {"In", "Out", "get_ipython", "exit", "quit", "display"})


def _identifier_part(text: str) -> str:
    """`text` as the characters an identifier may hold, each after NFKC (what Python does
    to an identifier: `ｐｒｉｎｔ` is `print`, `ﬁnal_var` is `final_var`); any other
    character (`²` in `a²b`, punctuation) becomes `_`."""
    out = []
    for ch in unicodedata.normalize("NFKC", text):
        out.append(ch if ("a" + ch).isidentifier() else "_")
    return "".join(out)


def variable_name(path: Path, taken: set[str]) -> str:
    """An identifier from the file's stem, normalised as Python normalises identifiers
    (NFKC) BEFORE the reserved-name check, so a look-alike cannot shadow a builtin or
    the kernel API; a keyword or a leading digit gets `data_` in front, a builtin or
    kernel API name gets the extension behind (`final.csv` -> `final_csv`), a name in
    `taken` (another file, or a variable the kernel already holds) gets `_2`, `_3`, ..."""
    base = re.sub(r"_+", "_", _identifier_part(path.stem)).strip("_").lower() or "data"
    base = unicodedata.normalize("NFKC", base)  # lower() can un-normalise (rare)
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "data_" + base
    if not base.isidentifier():
        base = "data_" + base
    if base in RESERVED_NAMES:
        ext = _identifier_part(path.suffix.lstrip(".")).lower()
        base = f"{base}_{ext or 'data'}"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def loader_code(path: Path, name: str) -> str:
    """The code that loads `path` into the variable `name` (also written into exports)."""
    return _LOADERS.get(path.suffix.lower(), _TEXT).format(name=name, path=str(path))


# a file the task names is loaded like --context up to this size; a bigger one is left
# for the model's code to read (pandas holds a CSV at several times its size on disk)
NAMED_FILE_LIMIT = 512 * 1024 * 1024
# a quoted name (it may hold spaces: `"my data.csv"`), and every bare word: a word is read
# whether or not a quote span covers it, so a possessive's apostrophe ("each order's ...
# each carrier's") never hides the files named between two of them
_QUOTED_NAME = re.compile(r"""(?<!\w)["'`]([^"'`\n]+)["'`](?!\w)""")
_BARE_NAME = re.compile(r"""[^\s"'`()\[\]{}<>,;]+""")
_EXT = re.compile(r"[^./\\]\.[A-Za-z0-9]{1,10}$")


# a file name a task or goal may name: a path ending in a data or document extension
FILE_NAME = re.compile(
    r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:md|csv|tsv|txt|json|jsonl|html|xlsx|parquet|png|svg"
    r"|yaml|yml|log|py|tex|xml))(?![\w.-])", re.I)


def file_names(text: str) -> list[str]:
    """The files a task's or a goal's text names, in order, once each (whether they
    exist or not: `named_files` finds those on disk)."""
    out: list[str] = []
    for m in FILE_NAME.finditer(text):
        if m.group(1) not in out:
            out.append(m.group(1))
    return out


def named_files(task: str, base: Path, given: list[str]) -> tuple[list[str], list[str]]:
    """The existing files the task names (`... in sales.csv`), relative to `base` or
    absolute, that are not among `given` (--context): (to load, too big to load up front,
    as `name (size)`). `rlm run "which region grew fastest in sales.csv"` then works like
    `--context sales.csv`: the model is told the variable and its columns instead of
    guessing them."""
    seen = {Path(g).expanduser().resolve() for g in given}
    load: list[str] = []
    big: list[str] = []
    for word, path in _file_words(task, base):
        try:
            if not path.is_file() or path.resolve() in seen:
                continue
            size = path.stat().st_size
        except OSError:
            continue
        seen.add(path.resolve())
        if size > NAMED_FILE_LIMIT:
            big.append(f"{word} ({size / 2**20:,.0f} MB)")
        else:
            load.append(str(path.resolve()))
    return load, big


def _file_words(task: str, base: Path) -> Iterator[tuple[str, Path]]:
    """The words of `task` that look like file names, each with its path (relative ones
    under `base`)."""
    quoted = [m for m in _QUOTED_NAME.finditer(task) if _EXT.search(m.group(1).strip())]
    found = sorted([(m.start(1), m.group(1)) for m in quoted]
                   + [(m.start(), m.group(0)) for m in _BARE_NAME.finditer(task)
                      if not any(q.start() <= m.start() < q.end() for q in quoted)])
    words: list[str] = []
    for _, raw in found:  # in the order the task names them, each once
        word = raw.strip().rstrip(".:!?")
        if _EXT.search(word) and word not in words:
            words.append(word)
            path = Path(word).expanduser()
            yield word, path if path.is_absolute() else base / path


def misspelled_files(task: str, base: Path) -> list[tuple[str, list[Path]]]:
    """Words of the task that look like file names (`flights.cvs`) but name no file, each
    with the existing files in that folder one edit away (`flights.csv`; several when as
    many are as near); a word with none is left out (it may name a file to be written)."""
    from rlm.spelling import edits

    out: list[tuple[str, list[Path]]] = []
    for word, path in _file_words(task, base):
        try:
            if path.exists() or not path.parent.is_dir():
                continue
            files = sorted(p.name for p in path.parent.iterdir() if p.is_file())
        except OSError:
            continue
        near = [path.parent / f for f in files if edits(path.name, f) == 1]
        if near and all(w != word for w, _ in out):
            out.append((word, near))
    return out


class InputHost(Protocol):
    """What loading and describing input needs of an agent (rlm.agent.loop.Agent): its
    kernel (started), its cell timeout, and where a description of the input goes."""

    config: Config
    executor: Executor | None

    def attach_context(self, entry: CustomEntry) -> None: ...


def load_context_files(agent: InputHost, paths: list[Any], *, optional: list[str] | None = None
                       ) -> list[str]:
    """Load each file into a kernel variable; append a context_vars entry describing them.
    A file in `optional` (named in a prompt, not given with --context) that does not load
    is described as not loaded, with pandas' or Python's one-line reason, instead of
    failing the run."""
    names: list[str] = []
    loaded: list[str] = []  # the file of each name (`files` also holds those that failed)
    renamed: list[str] = []
    failed: list[str] = []
    taken = _bound_names(agent)  # a later prompt's file never replaces the model's `result`
    lenient = {str(p) for p in optional or []}
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        if not path.is_file():
            if str(raw) in lenient:
                failed.append(f"{path.name}: no such file")
                continue
            raise ConfigError(f"--context {raw}: no such file")
        name = variable_name(path, taken)
        if name != re.sub(r"\W", "_", path.stem).strip("_").lower():
            renamed.append(f"{path.name} -> {name}")
        code = loader_code(path, name)
        res = started(agent.executor).execute(code, timeout=max(agent.config.cell_timeout, 60))
        if not res.ok:
            why = _error_line(res)
            if str(raw) in lenient:
                failed.append(f"{path.name}: {why}")
                taken.discard(name)
                continue
            raise ConfigError(f"--context {raw}: could not load it ({res.shaped.strip()[-300:]})")
        names.append(name)
        loaded.append(str(raw))
    items = started(agent.executor).describe([*names, *ALIASES])  # the aliases: what is defined
    content = format_description(items, origin="loaded from the files you were given")
    if renamed:
        content += (f"\nRenamed (a file's name would have shadowed a builtin, the kernel API, "
                    f"another file or a variable the kernel holds): {'; '.join(renamed)}")
    if failed:
        content = ((content + "\n") if names else "") + (
            "Not loaded (read them with your own code if you need them): " + "; ".join(failed))
    agent.attach_context(CustomEntry(
        custom_type="context_vars",
        data={"names": names, "files": [str(p) for p in paths], "loaded": loaded,
              "long_texts": [d["name"] for d in items if d.get("hint")]},
        display=True, content=content))
    return names


def _bound_names(agent: InputHost) -> set[str]:
    """The names the kernel holds now (empty when it cannot say in time)."""
    try:
        listing = started(agent.executor).list_namespace(timeout=10.0)
    except Exception:  # busy, dead, or an executor without listings: load with fresh names
        return set()
    return {str(n.get("name")) for n in (listing or {}).get("names", []) if isinstance(n, dict)}


def _error_line(res: CellResult) -> str:
    """Why a loader cell failed, in one line: its exception (`ParserError: Error
    tokenizing data...`), else its status (a timeout, a kernel that died)."""
    for out in res.outputs:
        if out.kind == "error":
            return f"{out.ename}: {out.evalue}"[:300]
    return f"the load ended with status {res.status}"


def describe_variables(agent: InputHost, names: list[str] | None, *, origin: str) -> str:
    """Text telling the model which kernel variables hold its input (names=None: all the
    user's data values). Computed by the executor without running a visible cell."""
    asked = None if names is None else [*names, *ALIASES]
    return format_description(started(agent.executor).describe(asked), origin=origin)


def format_description(items: list[dict[str, Any]], *, origin: str) -> str:
    """No XML-like tag around it: the 1.5B model turned `<context_variables>` into
    `context_variables['context']`. Only the real variable names look like names. A table
    (an item with `columns`, kernel_ext.columns) lists what each column holds before its
    first rows: a small model filters with the values it was shown ('Adelie', not
    'adelie') and does not drop a filter it can see the column for. Items
    with an `alias` (kernel_ext.describe.alias_item) are the modules the kernel defined
    before the first cell: one line saying they need no import."""
    values = [d for d in items if not d.get("alias")]
    lines = [f"Input: these kernel variables already hold your input ({origin}); "
             "read them through code, in slices:"]
    for d in values:
        if d.get("columns"):  # a table: what each column holds, then its first rows
            lines.append(f"- {d['name']}: {d['type']}, {d['size']}\n  columns (dtype: values):\n"
                         f"{d['columns']}\n  first rows:\n{d['preview']}")
        else:
            lines.append(f"- {d['name']}: {d['type']}, {d['size']}\n  preview: {d['preview']}")
            if d.get("fields"):  # a line-structured text: the few values of its words
                lines.append("  words that take few values, by position in each line:\n"
                             f"{d['fields']}")
        if d.get("hint"):
            lines.append(f"  {d['hint']}")
    if not values:
        lines.append("- (none)")
    aliases = [f"{d['name']} ({d['alias']})" for d in items if d.get("alias")]
    if aliases:
        lines.append(f"Already imported, no import needed: {', '.join(aliases)}.")
    return "\n".join(lines)


_STOP = frozenset("""what which where when who whom whose why how does did do is are was were
the this that these those there their them they with from into about than then have has had
will would could should shall must might your you answer only number text file data find
give tell show name list many much each every some any other more most less least just also
please exactly value says said according mentioned given""".split())
_QUOTED = re.compile(r"[\"'`“‘]([^\"'`”’\n]{3,60})[\"'`”’]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}")


def question_words(question: str, avoid: set[str]) -> str | None:
    """Words to search a long input for: a quoted phrase of the question, else the longest
    word of the first name it gives (`question_names`: "Which badge was issued to Bruno
    Brandt?" searched its longest word, `issued`, and the 1.5B model answered from another
    badge's line), else its longest word that is not a stop word or a variable name; None
    when there is none."""
    m = _QUOTED.search(question)
    if m and m.group(1).strip():
        return m.group(1).strip()
    for name in question_names(question):
        word = max(name.split(), key=len)
        if len(word) >= 3 and word not in avoid and word.lower() not in _STOP:
            return word
    words = [w for w in _WORD.findall(question) if w.lower() not in _STOP and w not in avoid]
    return max(words, key=len) if words else None


_NAME_RUN = re.compile(r"[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*")
_QUOTED_NAME = re.compile(r"(?<!\w)['\"‘“]([^'\"‘’“”\n]{2,40})['\"’”](?!\w)")
_OPENERS = frozenset("""in on at what which who whom whose when where why how find give list
show tell name is are was were did does do the a an of for from to by with reply answer
according please return print count compute""".split())
MAX_NAMES = 4


def question_names(question: str) -> list[str]:
    """The names `question` gives, at most MAX_NAMES: quoted text, runs of capitalised
    words not opening a sentence ("Ilse Tanaka", "Halcyon"), and a multi-word name's
    longest word (a text may write "Tanaka, Ilse")."""
    found: list[str] = [q.strip() for q in _QUOTED_NAME.findall(question) if q.strip()]
    for m in _NAME_RUN.finditer(question):
        words = [re.sub(r"(?:'s|’s|[.'’-])$", "", w) for w in m.group(0).split()]
        before = question[:m.start()].rstrip()
        if (not before or before[-1] in ".?!:;\n") and words[0].lower() in _OPENERS:
            words = words[1:]  # the sentence's first word, not a name
        words = [w for w in words if w]
        if not words:
            continue
        found.append(" ".join(words))
        if len(words) > 1:
            found.append(max(words, key=len))
    out: list[str] = []
    for term in found:
        if term.lower() not in {t.lower() for t in out} and len(term) >= 2:
            out.append(term)
    return out[:MAX_NAMES]


def with_question_example(entry: CustomEntry, question: str | None) -> CustomEntry:
    """The input description with a search example built from the question's own words
    (never placeholder words a small model would copy), for each long text it lists."""
    data = entry.data if isinstance(entry.data, dict) else {}
    long_texts = [n for n in data.get("long_texts", []) if isinstance(n, str)]
    if not question or not long_texts or not isinstance(entry.content, str):
        return entry
    words = question_words(question, set(data.get("names", [])))
    if words is None:
        return entry
    lines = [f"{EXAMPLE_MARK}i = {n}.find({words!r}); "
             f"print({n}[max(0, i-300):i+300])" for n in long_texts]
    return CustomEntry(custom_type=entry.custom_type, data=data, display=entry.display,
                       content=entry.content + "\n" + "\n".join(lines))


EXAMPLE_MARK = "  for this question, e.g.: "
_EXAMPLE = re.compile(rf"^{re.escape(EXAMPLE_MARK)}(.+)$", re.M)


def question_example(entries: Sequence[Any]) -> str | None:
    """The search example `with_question_example` gave the newest input description on
    `entries`, as a cell (one statement a line), or None."""
    for e in reversed(custom_entries(entries, "context_vars")):
        m = _EXAMPLE.search(e.content) if isinstance(e.content, str) else None
        if m:
            return m.group(1).replace("; ", "\n")
    return None


def input_descriptions_of(entries: Sequence[Any]) -> list[str]:
    """The text of the `context_vars` entries among `entries`: the input described."""
    return [e.content for e in custom_entries(entries, "context_vars")
            if isinstance(e.content, str)]


def input_names_of(entries: Sequence[Any]) -> set[str]:
    """The kernel variables the `context_vars` entries among `entries` describe."""
    return {n for e in custom_entries(entries, "context_vars")
            for n in (e.data or {}).get("names", []) if isinstance(n, str)}


_PREVIEW = re.compile(r"^- ([A-Za-z_][A-Za-z0-9_]*): [^\n]*\n  preview: ([^\n]*)$", re.M)


def input_previews_of(entries: Sequence[Any]) -> dict[str, str]:
    """name -> the one-line preview the model was shown (`format_description`): a cell
    that assigns exactly that value, complete, changes nothing (rlm.agent.codeparse)."""
    return {m.group(1): m.group(2) for e in custom_entries(entries, "context_vars")
            if isinstance(e.content, str) for m in _PREVIEW.finditer(e.content)}


def input_files_of(entries: Sequence[Any]) -> set[str]:
    """The files the `context_vars` entries among `entries` were loaded from."""
    return {f for e in custom_entries(entries, "context_vars")
            for f in (e.data or {}).get("files") or [] if isinstance(f, str)}
