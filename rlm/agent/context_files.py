"""`rlm run --context FILE`: big inputs go into kernel variables, not into the prompt.

Each file becomes one variable named after its stem (`sales.csv` -> `sales`): CSV/TSV and
Parquet load as pandas DataFrames, JSON as parsed objects, anything else as text (or bytes
when it is not UTF-8). The model sees only names, types, sizes and a short preview.
"""

from __future__ import annotations

import builtins
import keyword
import re
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError
from rlm.session.entries import CustomEntry

_LOADERS = {
    ".csv": "import pandas as _pd\n{name} = _pd.read_csv({path!r})\ndel _pd\n",
    ".tsv": "import pandas as _pd\n{name} = _pd.read_csv({path!r}, sep='\\t')\ndel _pd\n",
    ".parquet": "import pandas as _pd\n{name} = _pd.read_parquet({path!r})\ndel _pd\n",
    ".json": "import json as _j\nwith open({path!r}) as _f:\n    {name} = _j.load(_f)\ndel _j, _f\n",
}
_TEXT = (
    "with open({path!r}, 'rb') as _f:\n    {name} = _f.read()\ndel _f\n"
    "try:\n    {name} = {name}.decode('utf-8')\nexcept UnicodeDecodeError:\n    pass\n"
)

# names a context file must not take: the kernel API (kernel_ext.api.NAMES; a test keeps
# the two in step), IPython's own, and every builtin (`print.txt` must not shadow print)
KERNEL_API = frozenset({"final", "final_var", "llm_query", "llm_query_batched", "rlm_query",
                        "compact", "goal", "heartbeat", "cron"})
RESERVED_NAMES = KERNEL_API | frozenset(dir(builtins)) | frozenset(
    {"In", "Out", "get_ipython", "exit", "quit", "display"})


def variable_name(path: Path, taken: set[str]) -> str:
    """An identifier from the file's stem; a keyword or a leading digit gets `data_` in
    front, a builtin or kernel API name gets the extension behind (`final.csv` ->
    `final_csv`), a repeat gets `_2`, `_3`, ..."""
    base = re.sub(r"\W", "_", path.stem).strip("_").lower() or "data"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "data_" + base
    if base in RESERVED_NAMES:
        ext = re.sub(r"\W", "_", path.suffix.lstrip(".")).lower()
        base = f"{base}_{ext or 'data'}"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def loader_code(path: Path, name: str) -> str:
    """The code that loads `path` into the variable `name` (also written into exports)."""
    return _LOADERS.get(path.suffix.lower(), _TEXT).format(name=name, path=str(path))


def load_context_files(agent: Any, paths: list[Any]) -> list[str]:
    """Load each file into a kernel variable; append a context_vars entry describing them."""
    names: list[str] = []
    renamed: list[str] = []
    taken: set[str] = set()
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"--context {raw}: no such file")
        name = variable_name(path, taken)
        if name != re.sub(r"\W", "_", path.stem).strip("_").lower():
            renamed.append(f"{path.name} -> {name}")
        code = loader_code(path, name)
        res = agent.executor.execute(code, timeout=max(agent.config.cell_timeout, 60))
        if not res.ok:
            raise ConfigError(f"--context {raw}: could not load it ({res.shaped.strip()[-300:]})")
        names.append(name)
    agent.attach_context(CustomEntry(
        custom_type="context_vars",
        data={"names": names, "files": [str(p) for p in paths]},
        display=True,
        content=describe_variables(agent, names, origin="loaded from the files you were given")
        + (f"\nRenamed (a file's name would have shadowed a builtin, the kernel API or "
           f"another file): {'; '.join(renamed)}" if renamed else ""),
    ))
    return names


def describe_variables(agent: Any, names: list[str] | None, *, origin: str,
                       tag: str = "context_variables") -> str:
    """Text telling the model which kernel variables hold its input (names=None: all the
    user's data values). Computed by the executor without running a visible cell."""
    items = agent.executor.describe(names)
    lines = [f"<{tag}>\nThese kernel variables hold your input ({origin}); "
             "read them through code, in slices:"]
    for d in items:
        lines.append(f"- {d['name']}: {d['type']}, {d['size']}\n  preview: {d['preview']}")
        if d.get("hint"):
            lines.append(f"  {d['hint']}")
    if not items:
        lines.append("- (none)")
    return "\n".join(lines) + f"\n</{tag}>"
