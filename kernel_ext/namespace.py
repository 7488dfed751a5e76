"""Which names in the kernel belong to the user, how big they are, and what a cell touched.

Pure helpers shared by the snapshot module and the namespace listing. No I/O.

The touched-name rule (see `cell_names` and `referenced_globals`): after a cell, a name is
re-pickled when it
  1. appears anywhere in the cell's AST (Load, Store or Del; `import` aliases; def/class
     names; `global` statements; except/match captures) — this covers mutation through
     `df["x"] = ...`, `lst.append(...)`, `obj.attr = ...`;
  2. is new, deleted, or bound to an object with a different id() than at the last snapshot;
  3. is a global that a touched function/class/instance defined in `__main__` refers to
     (its code's co_names, nested code objects included, transitively);
  4. shares its object (same id) with a touched name (`a = b = []; b.append(1)`);
  5. belongs to the same co-variable group as a touched name (see `reachable_ids` and
     `co_groups`): names whose values reach a common object are stored together, so a
     mutation through any of them (`d = {"k": lst}; lst.append(1)`) re-snapshots the group.
Conservative fallback: a cell that cannot be parsed, uses magics or shell escapes
(anything through `get_ipython()`), `exec`/`eval`/`globals`/`vars`/`locals`/`__import__`/
`setattr`/`delattr`, or `from m import *` re-pickles every name except immutable scalars
whose id() did not change.
Not covered (documented gap): a mutation made from a background thread/callback, or
through an object that no name of its group mentions in the cell and no touched function
refers to; sharing deeper than the bounded walk (`REACH_BUDGET` objects per name) is not
seen, so such names are stored apart (values kept, identity split).
"""

from __future__ import annotations

import ast
import datetime
import enum
import functools
import gc
import logging
import re
import sys
import types
from collections.abc import Iterable
from typing import Any

from kernel_ext import cell_syntax
from kernel_ext.aliases import is_alias

IPYTHON_NAMES = frozenset(
    {"In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh", "exit", "quit",
     "get_ipython"}
)
_NUMBERED = re.compile(r"_i{0,3}\d+$")
DYNAMIC_NAMES = frozenset(
    {"exec", "eval", "globals", "vars", "locals", "get_ipython", "__import__", "setattr",
     "delattr", "compile", "runpy"}
)
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), frozenset, range)
_EXT_PREFIX = "kernel_ext"


@functools.lru_cache(maxsize=1 << 16)  # asked for every name after every cell
def is_internal_name(name: str) -> bool:
    if name in IPYTHON_NAMES:
        return True
    if name.startswith("__") and name.endswith("__"):
        return True
    return name[:1] == "_" and _NUMBERED.match(name) is not None


def _from_extension(value: Any) -> bool:
    """An object kernel_ext injected; not a value a cell made of one of its types that
    says it is user data (`_rlm_user_data`: child handles and gathered results)."""
    try:
        if isinstance(value, (type, types.FunctionType)):
            mod = getattr(value, "__module__", None)
        else:
            if getattr(type(value), "_rlm_user_data", False):
                return False
            mod = type(value).__module__
    except Exception:  # noqa: BLE001 - arbitrary user objects
        return False
    return isinstance(mod, str) and mod.startswith(_EXT_PREFIX)


# type -> whether its instances are kernel_ext's (`_from_extension`), asked for every name
# after every cell; a class or function is asked about itself, never cached
_EXT_BY_TYPE: dict[type, bool] = {}
_UNCACHED_TYPES = (type, types.FunctionType)


def user_values(ip: Any) -> dict[str, Any]:
    """User-defined names -> values (`is_user_value`)."""
    hidden = ip.user_ns_hidden
    # a copy first: a subshell may list during a cell
    return {k: v for k, v in list(ip.user_ns.items()) if is_user_value(k, v, hidden)}


_MISSING = object()


def is_user_value(name: str, value: Any, hidden: dict[str, Any]) -> bool:
    """Whether `name` bound to `value` is the user's: no IPython internals, no hidden names
    (unless the user rebound them; `hidden`: the shell's user_ns_hidden), no objects
    injected by kernel_ext, and no alias the kernel bound (kernel_ext.aliases) that still
    names its module, also after a cell's own `import pandas as pd`: a new kernel binds it
    again, so it is never snapshotted."""
    if is_internal_name(name):
        return False
    if name in hidden:
        bound = hidden.get(name, _MISSING)
        if bound is value or (is_alias(name, bound) and is_alias(name, value)):
            return False  # the second: the kernel's alias, imported again by a cell
    t = type(value)
    ext = _EXT_BY_TYPE.get(t)
    if ext is None:
        ext = _from_extension(value)
        if not issubclass(t, _UNCACHED_TYPES):
            if len(_EXT_BY_TYPE) >= 4096:
                _EXT_BY_TYPE.clear()
            _EXT_BY_TYPE[t] = ext
    return not ext


def estimate_size(value: Any) -> int:
    """A cheap size estimate in bytes (numpy nbytes, pandas shallow memory usage,
    sys.getsizeof of a container plus its first 10k items)."""
    try:
        mod = type(value).__module__
        if mod.startswith("pandas") and hasattr(value, "memory_usage"):
            usage = value.memory_usage(index=True, deep=False)
            return int(usage.sum()) if hasattr(usage, "sum") else int(usage)
        nbytes = getattr(value, "nbytes", None) if mod.startswith("numpy") else None
        if isinstance(nbytes, int):
            return nbytes
        size = sys.getsizeof(value)
        # copy before walking: a subshell lists while the cell may grow the container
        if isinstance(value, (list, tuple, set, frozenset)) and len(value) <= 10_000:
            size += sum(sys.getsizeof(v) for v in list(value))
        elif isinstance(value, dict) and len(value) <= 10_000:
            size += sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in list(value.items()))
        return int(size)
    except Exception:  # noqa: BLE001 - arbitrary user objects
        return 0


def is_immutable_scalar(value: Any) -> bool:
    return type(value) in _IMMUTABLE


class CellNames:
    """Names a cell's source could touch; `full` asks for a conservative full rescan."""

    __slots__ = ("names", "deleted", "full")

    def __init__(self, names: set[str], deleted: set[str], full: bool) -> None:
        self.names, self.deleted, self.full = names, deleted, full


def _node_names(node: ast.AST, names: set[str], deleted: set[str]) -> bool:
    """Adds the names bound or used by one node; returns True if it forces a full rescan."""
    if isinstance(node, ast.Name):
        names.add(node.id)
        if isinstance(node.ctx, ast.Del):
            deleted.add(node.id)
        return node.id in DYNAMIC_NAMES
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name == "*":
                return True
            names.add(alias.asname or alias.name.split(".")[0])
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        names.update(node.names)
    elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
        if node.name:
            names.add(node.name)
    elif isinstance(node, ast.MatchMapping) and node.rest:
        names.add(node.rest)
    return False


def cell_names(code: str) -> CellNames:
    """Parse (already IPython-transformed) cell code; see the module docstring."""
    return names_in(cell_syntax.parse(code))


def names_in(parsed: cell_syntax.Parsed | None) -> CellNames:
    """`cell_names` of a cell parsed already (None: it does not parse)."""
    if parsed is None:
        return CellNames(set(), set(), True)
    names: set[str] = set()
    deleted: set[str] = set()
    full = False
    for node in parsed.nodes:
        full = _node_names(node, names, deleted) or full
    return CellNames(names, deleted, full)


def _code_names(code: types.CodeType, out: set[str]) -> None:
    out.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, out)


def _codes_of(value: Any, ns: dict[str, Any]) -> list[types.CodeType]:
    """Code objects of a function/class/instance defined in __main__ (whose globals are ns)."""
    if isinstance(value, types.FunctionType):
        return [value.__code__] if value.__globals__ is ns else []
    if isinstance(value, types.MethodType):
        return _codes_of(value.__func__, ns)
    cls = value if isinstance(value, type) else type(value)
    if getattr(cls, "__module__", None) != "__main__":
        return []
    codes: list[types.CodeType] = []
    for klass in cls.__mro__:
        if getattr(klass, "__module__", None) != "__main__":
            continue
        for member in vars(klass).values():
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                codes.extend(f.__code__ for f in (member.fget, member.fset, member.fdel)
                             if isinstance(f, types.FunctionType))
            elif isinstance(member, types.FunctionType):
                codes.append(member.__code__)
    return codes


def referenced_globals(values: Iterable[Any], ns: dict[str, Any]) -> set[str]:
    """Global names reachable from the code of __main__ functions/classes/instances, transitively."""
    found: set[str] = set()
    stack = list(values)
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        try:
            codes = _codes_of(value, ns)
        except Exception:  # noqa: BLE001 - arbitrary user objects
            continue
        names: set[str] = set()
        for code in codes:
            _code_names(code, names)
        for name in names - found:
            if name in ns:
                found.add(name)
                stack.append(ns[name])
    return found


# ---- co-variables: names that share objects -------------------------------------------

REACH_BUDGET = 20_000  # objects inspected per name; deeper sharing is not detected
_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None), range, slice})
_NOT_IDENTITY: tuple[type, ...] = (type, types.ModuleType, types.BuiltinFunctionType,
                                    types.CodeType, types.FrameType, datetime.tzinfo, enum.Enum,
                                    logging.Logger, logging.Manager)
# the kernel's own machinery: reachable from loggers, figures' callbacks, threads; never
# user data, and it would chain every name that reaches it into one group
_MACHINERY = ("ipykernel", "IPython", "zmq", "jupyter_client", "traitlets", "tornado",
              "asyncio", "logging", "kernel_ext", "comm", "matplotlib_inline")


def _not_identity_types() -> tuple[type, ...]:
    """Shared immutable objects that would chain unrelated names into one group: numpy
    dtypes, pandas dtypes, Index objects (immutable; DataFrames share them freely),
    pd.NA / pd.NaT; plus classes, modules, code, time zones, enum members."""
    extra: list[type] = []
    np = sys.modules.get("numpy")
    if np is not None:
        extra.append(np.dtype)
    pd = sys.modules.get("pandas")
    if pd is not None:
        try:
            extra += [pd.Index, pd.api.extensions.ExtensionDtype, type(pd.NA), type(pd.NaT)]
        except AttributeError:  # a partly imported or unusual pandas
            pass
    return _NOT_IDENTITY + tuple(extra)


def array_root(value: Any) -> Any:
    """The ndarray at the end of a numpy view's `.base` chain (the value itself if it
    owns its data or its base is not an ndarray)."""
    seen = 0
    while seen < 64:
        base = getattr(value, "base", None)
        if base is None or type(base).__module__ != "numpy" or not hasattr(base, "__array_interface__"):
            return value
        value, seen = base, seen + 1
    return value


def _is_ndarray(value: Any) -> bool:
    t = type(value)
    return t.__module__ == "numpy" and t.__name__ in ("ndarray", "memmap", "matrix", "recarray")


class Reach:
    """What one name's value reaches: ids of mutable objects (the value itself included,
    numpy arrays also by their data root), and `arrays`: id of each array met -> id of its
    data root."""

    __slots__ = ("ids", "arrays", "complete")

    def __init__(self, ids: set[int], arrays: dict[int, int], complete: bool) -> None:
        self.ids, self.arrays, self.complete = ids, arrays, complete


def reachable_ids(value: Any, ns: dict[str, Any], budget: int = REACH_BUDGET) -> Reach:
    """A bounded walk of `value`'s object graph. Immutable atoms, classes, modules, code
    and frames are not identities worth keeping (and lead everywhere); functions are
    recorded but not walked (their globals are the namespace), nor is the namespace dict.
    Containers are scanned item by item (an untracked dict may still hold an array);
    other objects through `gc.get_referents` (nothing for objects without GC support:
    arrays, bytearrays). At most `budget` objects are recorded and 10x that many items
    scanned; past that the walk stops (`complete` False: deeper sharing is not seen)."""
    ids: set[int] = set()
    arrays: dict[int, int] = {}
    skip = _not_identity_types()
    stack = [value]
    scan_left = budget * 10
    ns_id = id(ns)
    while stack:
        obj = stack.pop()
        scan_left -= 1
        if scan_left < 0:
            return Reach(ids, arrays, False)
        t = type(obj)
        if t in _ATOMS or isinstance(obj, skip) or (t is tuple and not obj):
            continue  # () is a shared singleton too
        if t.__module__.startswith(_MACHINERY):
            continue
        i = id(obj)
        if i in ids or i == ns_id:
            continue
        if len(ids) >= budget:
            return Reach(ids, arrays, False)
        ids.add(i)
        if _is_ndarray(obj):
            root = array_root(obj)
            arrays[i] = id(root)
            if root is not obj:
                ids.add(id(root))
            if obj.dtype.hasobject and obj.size <= budget:
                stack.extend(obj.ravel(order="K").tolist())
            continue
        if isinstance(obj, types.FunctionType):
            continue
        try:
            if t is dict:
                stack.extend(obj.values())
            elif t in (list, tuple, set, frozenset):
                stack.extend(obj)
            elif gc.is_tracked(obj):
                stack.extend(gc.get_referents(obj))
        except Exception:  # noqa: BLE001 - arbitrary user objects
            continue
    return Reach(ids, arrays, True)


def co_groups(reach: dict[str, Reach]) -> list[list[str]]:
    """Union-find over the reached ids: names whose values reach a common object form one
    group (sorted names; groups in the order of their first name)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[int, str] = {}
    for name in sorted(reach):
        parent.setdefault(name, name)
        for i in reach[name].ids:
            other = owner.setdefault(i, name)
            if other != name:
                a, b = find(other), find(name)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for name in sorted(reach):
        groups.setdefault(find(name), []).append(name)
    return list(groups.values())


def shared_array_roots(reaches: Iterable[Reach]) -> frozenset[int]:
    """Data roots that two or more distinct arrays met in `reaches` share (a root met
    itself counts): arrays over them are stored as views so the sharing survives."""
    arrays: dict[int, int] = {}
    for r in reaches:
        arrays.update(r.arrays)
    count: dict[int, int] = {}
    for root in arrays.values():
        count[root] = count.get(root, 0) + 1
    return frozenset(root for root, n in count.items() if n >= 2)
