"""What a recorded cell may do and still be replayed: an allow-list (kernel_ext.lineage).

A cell is replayable only when everything it runs is known to stay in the kernel. The
check reads the (IPython-transformed) code, including function and class bodies, and —
where the kernel holds them — the values the names refer to (`ns`): at record time the
cell's namespace, at replay time the restored values (`classify`). A cell is refused when
it
  * runs a shell escape or magic (`get_ipython()`: `!cmd`, `%cmd`, `%%cell`), or calls
    the kernel API (`llm_query`, `final`, `compact`, ...);
  * imports a module that is not on MODULES (pure data libraries), or uses a module,
    function or class from one (`os`, `subprocess`, `socket`, `http.client`, `pathlib`,
    `shutil`, ... — also when reached through an alias, `from os import remove as rm`,
    or an attribute chain of an allowed module), or one of DENIED's functions of an
    allowed module (`numpy.save`, `json.dump`, `sqlite3.connect` on anything but
    ":memory:");
  * calls into the I/O part of a module that reaches files (IO_PARTS: `gzip`, `pandas.io`,
    `pyarrow.parquet`, ...) anything but its named reads, or passes a mode that is not a
    literal read mode where the mode decides (MODE_ARGS: `gzip.GzipFile(p, 'wb')`,
    `np.load(p, mmap_mode='r+')`): a module being allowed is not enough;
  * opens a file in a writing mode, or with a mode that is not a literal; prints to a
    file; calls a writing method (WRITE_METHODS: `to_parquet`, `write`, `tofile`, ...;
    `to_csv`/`to_json` with a destination);
  * uses `eval`, `exec`, `compile`, `__import__`, `getattr`/`setattr`, `globals()`, a
    dunder attribute, or calls something that is not a name or an attribute (`f()(x)`,
    `d[k](x)`), or a name the cell binds at run time (a loop variable, a parameter);
  * runs SQL other than a literal statement on an in-memory sqlite3 database (the
    planner checks that the connection is one: `db`/`db_uses` in the record);
  * names a URL (a literal or a held string starting with `scheme://`).
Functions and classes defined in earlier cells are not trusted as restored: the planner
replays their recorded definition (which passes the same check) before the cell that
uses them, and refuses when there is none.

Documented limits: strings assembled at run time (a URL or SQL built by `+`), code a
library runs from a string (`df.query`, `pd.eval`), and callbacks a library makes into
objects it was handed are not followed.
"""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
import re
import types
from collections.abc import Iterator, Mapping
from typing import Any

from kernel_ext import cell_syntax

# pure data libraries (top-level names; a private C module `_x` counts as `x`)
MODULES = frozenset({
    "builtins", "pandas", "numpy", "scipy", "polars", "pyarrow", "math", "cmath", "re", "json",
    "csv", "collections", "itertools", "functools", "operator", "datetime", "time", "calendar",
    "zoneinfo", "statistics", "decimal", "fractions", "numbers", "random", "string", "textwrap",
    "unicodedata", "difflib", "heapq", "bisect", "array", "copy", "dataclasses", "enum",
    "typing", "io", "sqlite3", "gzip", "bz2", "lzma", "glob", "fnmatch", "hashlib", "base64",
    "binascii", "struct", "uuid", "pprint", "abc", "contextlib", "dateutil", "pytz",
})
# functions of allowed modules that leave the kernel (any attribute depth: np.lib.npyio.savetxt)
DENIED = {
    "numpy": frozenset({"save", "savez", "savez_compressed", "savetxt", "memmap", "open_memmap",
                        "tofile", "DataSource", "ctypeslib"}),
    "pandas": frozenset({"to_pickle", "read_pickle", "ExcelWriter", "HDFStore", "read_sql_table",
                         "read_clipboard"}),
    "json": frozenset({"dump"}),
    "csv": frozenset({"writer", "DictWriter"}),
    "io": frozenset({"FileIO", "open_code"}),
    "functools": frozenset({"partialmethod"}),
    "operator": frozenset({"methodcaller", "attrgetter"}),
    "contextlib": frozenset({"redirect_stdout", "redirect_stderr", "chdir"}),
    "scipy": frozenset({"savemat", "mmwrite", "wavfile", "netcdf_file"}),
    "polars": frozenset({"read_database", "read_database_uri"}),
    "pyarrow": frozenset({"OSFile", "memory_map", "create_memory_map", "MemoryMappedFile",
                          "output_stream", "PythonFile", "CompressedOutputStream",
                          "BufferedOutputStream", "FixedSizeBufferWriter", "NativeFile",
                          "LocalFileSystem", "HadoopFileSystem", "copy_files"}),
    "sqlite3": frozenset({"enable_callback_tracebacks"}),
}
# Modules that reach files. A module being allowed is not enough here: in their I/O parts
# (a submodule, "" for the whole module; private `_x` and `x_impl` spellings count as `x`)
# only the calls named are allowed: reads, and constructors whose mode MODE_ARGS checks.
# Anything else there (`gzip.GzipFile(p, 'wb')`, `pq.write_table`, `pd.io.common.get_handle`,
# `pyarrow.fs.LocalFileSystem()`) is not replayed. Names in capitals are constants.
IO_PARTS: dict[str, dict[str, frozenset[str]]] = {
    "io": {"": frozenset({"StringIO", "BytesIO", "TextIOWrapper", "BufferedReader", "open",
                          "IOBase", "TextIOBase", "RawIOBase", "BufferedIOBase",
                          "UnsupportedOperation", "text_encoding"})},
    "gzip": {"": frozenset({"open", "GzipFile", "compress", "decompress", "BadGzipFile"})},
    "bz2": {"": frozenset({"open", "BZ2File", "compress", "decompress", "BZ2Compressor",
                           "BZ2Decompressor"})},
    "lzma": {"": frozenset({"open", "LZMAFile", "compress", "decompress", "LZMACompressor",
                            "LZMADecompressor", "LZMAError", "is_check_supported"})},
    "pandas": {"io": frozenset({
        "read_csv", "read_table", "read_fwf", "read_json", "json_normalize", "read_parquet",
        "read_feather", "read_orc", "read_excel", "ExcelFile", "read_html", "read_xml",
        "read_stata", "read_sas", "read_spss", "read_sql", "read_sql_query"})},
    "numpy": {"lib.npyio": frozenset({"load", "loadtxt", "genfromtxt", "fromregex"}),
              "lib.format": frozenset({"read_array", "read_magic"}),
              "lib.datasource": frozenset(), "ctypeslib": frozenset()},
    "scipy": {"io": frozenset({"loadmat", "whosmat", "mmread", "mminfo", "readsav"})},
    "pyarrow": {
        "parquet": frozenset({"read_table", "read_pandas", "read_schema", "read_metadata",
                              "ParquetFile", "ParquetDataset"}),
        "csv": frozenset({"read_csv", "open_csv", "ReadOptions", "ParseOptions",
                          "ConvertOptions"}),
        "json": frozenset({"read_json", "ReadOptions", "ParseOptions"}),
        "feather": frozenset({"read_table", "read_feather"}),
        "ipc": frozenset({"open_file", "open_stream", "read_message", "read_record_batch",
                          "read_schema", "read_tensor", "IpcReadOptions"}),
        "orc": frozenset({"read_table", "ORCFile"}),
        "dataset": frozenset({"dataset", "field", "scalar", "partitioning"}),
        "fs": frozenset(), "hdfs": frozenset(), "filesystem": frozenset(),
    },
}
# calls whose mode argument decides whether they write: (module, name) -> (its position,
# its keyword, the literal values that only read; None: every mode without w, a, x or +)
MODE_ARGS: dict[tuple[str, str], tuple[int, str, frozenset[Any] | None]] = {
    ("gzip", "GzipFile"): (1, "mode", None), ("bz2", "BZ2File"): (1, "mode", None),
    ("lzma", "LZMAFile"): (1, "mode", None),
    ("numpy", "load"): (1, "mmap_mode", frozenset({None, "r", "c"})),
}
# method names that write outside the kernel, on any value
WRITE_METHODS = frozenset({
    "write", "writelines", "writerow", "writerows", "truncate", "tofile", "dump", "savefig",
    "to_parquet", "to_excel", "to_pickle", "to_hdf", "to_feather", "to_stata", "to_orc",
    "to_gbq", "to_clipboard", "to_netcdf", "write_text", "write_bytes", "unlink",
    "rmdir", "mkdir", "touch", "symlink_to", "hardlink_to", "chmod", "system", "popen", "kill",
    "sendall", "sendto", "connect_ex", "urlopen", "read_pickle", "write_csv", "write_parquet",
    "write_json", "write_ndjson", "write_excel", "write_database", "write_ipc", "sink_csv",
    "sink_parquet", "load_extension", "backup", "serialize", "deserialize",
})
# ... or only when given a destination (with no argument they return the text)
WRITE_IF_DESTINATION = frozenset({"to_csv", "to_json", "to_html", "to_latex", "to_markdown",
                                  "to_string", "to_xml"})
# pandas calls that take a connection: allowed on an in-memory sqlite3 database only
SQL_CON_CALLS = frozenset({"to_sql", "read_sql", "read_sql_query"})
SQL_METHODS = frozenset({"execute", "executemany", "executescript", "cursor", "commit",
                         "rollback", "fetchone", "fetchall", "fetchmany", "iterdump"})
KERNEL_API = {"llm_query": "calls a sub-model", "llm_query_batched": "calls a sub-model",
              "rlm_query": "runs a child agent", "final": "gives the final answer",
              "final_var": "gives the final answer", "compact": "compacts the conversation",
              "history": "reads the session log",
              "goal": "changes the goal", "heartbeat": "schedules a heartbeat",
              "cron": "schedules a job", "get_ipython": "runs a shell command or magic"}
DENIED_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "getattr", "setattr",
                             "delattr", "globals", "locals", "vars", "breakpoint", "input",
                             "help", "exit", "quit"})
_DUNDERS_OK = frozenset({"__name__", "__doc__", "__qualname__", "__version__"})
_MODE = re.compile(r"[rwxabtU+]{1,4}")
_URL = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
_SQL_OUT = re.compile(r"\b(attach|vacuum|load_extension)\b", re.I)
_BUILTINS = frozenset(dir(builtins))
MEMORY_DB = ":memory:"
# a record made under older rules is checked again at replay (kernel_ext.lineage.plan)
RULES_VERSION = 2
_SCAN_ITEMS = 1000  # items of a held container looked at for functions


# path-string modules of a package that is not allowed: only by their own name
# (`from os.path import join`, `import os.path as osp`; `import os.path` binds os)
PATH_MODULES = frozenset({"os.path", "posixpath", "ntpath", "genericpath"})


def module_allowed(name: str) -> bool:
    return name in PATH_MODULES or (name.split(".")[0].lstrip("_") or name) in MODULES


def _denied(module: str, name: str) -> bool:
    top = module.split(".")[0].lstrip("_")
    return name in DENIED.get(top, ()) or name in WRITE_METHODS or \
        name in WRITE_IF_DESTINATION or _io_part_refuses(module, name)


def _part(segment: str) -> str:
    segment = segment.lstrip("_")
    return segment[:-5] if segment.endswith("_impl") else segment


def _io_part_refuses(module: str, name: str) -> bool:
    """`name` of `module` sits in an I/O part (IO_PARTS) and is not one of its reads."""
    top, *rest = module.split(".")
    parts = IO_PARTS.get(top.lstrip("_"))
    if not parts or name.isupper():
        return False
    path = ".".join(_part(s) for s in rest)
    return any(not prefix or path == prefix or path.startswith(prefix + ".")
               for prefix, reads in parts.items() if name not in reads)


def _origin(v: Any) -> tuple[str, str] | None:
    """(module, name) a callable comes from, or None for a value that is not callable."""
    if isinstance(v, functools.partial):
        return _origin(v.func)
    if isinstance(v, types.MethodType):
        inner = _origin(v.__func__)
        owner = type(v.__self__).__module__
        if inner is not None and inner[0] != "__main__" and not module_allowed(owner):
            return owner, inner[1]
        return inner
    if isinstance(v, types.FunctionType):
        return str(v.__module__ or "__main__"), v.__name__
    if isinstance(v, types.BuiltinFunctionType):  # also builtin methods: `[].append`
        mod = v.__module__ if isinstance(v.__module__, str) else type(v.__self__).__module__
        return mod, v.__name__
    if isinstance(v, type):
        return str(v.__module__), v.__name__
    if callable(v):
        return type(v).__module__, type(v).__name__
    return None


def classify(v: Any) -> tuple[str, str]:
    """(kind, why) of a value a cell uses: "data" (safe), "user" (a function or class a
    cell defined: replay re-defines it from its recorded cell), "object" (an instance of a
    type outside MODULES: its methods may leave the kernel), "user-object" (an instance of
    a class a cell defined: its restored methods are not checked), or "unsafe"."""
    try:
        if isinstance(v, types.ModuleType):
            return ("data", "") if module_allowed(v.__name__) else ("unsafe", f"module {v.__name__}")
        if isinstance(v, str):
            return ("unsafe", "a URL (network)") if _URL.match(v[:64]) else ("data", "")
        origin = _origin(v)
        if origin is not None:
            mod, name = origin
            if mod == "__main__":
                return "user", ""
            if not module_allowed(mod) or _denied(mod, name):
                return "unsafe", f"{mod}.{name}"
            return "data", ""
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            return _classify_items(v)
        tmod = type(v).__module__
        if tmod == "__main__":
            return "user-object", f"a {type(v).__name__} object of a class defined in a cell"
        if not module_allowed(tmod) or _denied(tmod, type(v).__name__):
            return "object", f"a {tmod}.{type(v).__qualname__} object"
        return "data", ""
    except Exception:  # noqa: BLE001 - an arbitrary object: not known to be safe
        return "unsafe", "a value the check could not inspect"


def _classify_items(v: Any) -> tuple[str, str]:
    items: Any = v.items() if isinstance(v, dict) else v
    for item in itertools.islice(items, _SCAN_ITEMS):
        for x in (item if isinstance(v, dict) else (item,)):
            if isinstance(x, (str, int, float, bool, type(None))):
                continue
            kind, why = classify(x) if not isinstance(x, (dict, list, tuple, set, frozenset)) \
                else ("data", "")
            if kind != "data":
                return "unsafe", f"holds {why or 'functions defined in a cell'}"
    return "data", ""


# ---- the syntactic check -----------------------------------------------------------------

def _attr_chain(node: ast.expr) -> tuple[ast.expr, list[str]]:
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


def _bound_in(nodes: list[ast.AST]) -> tuple[set[str], set[str], set[str], dict[str, str]]:
    """(every name the cell binds anywhere, names bound by def/class/lambda or import,
    names bound by def/class/lambda, import alias -> module path)."""
    bound: set[str] = set()
    defs: set[str] = set()
    imports: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            defs.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            defs.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    continue
                name = a.asname or a.name.split(".")[0]
                bound.add(name)
                if isinstance(node, ast.Import):
                    imports[name] = a.name if a.asname else a.name.split(".")[0]
                else:
                    imports[name] = f"{node.module or ''}.{a.name}"
    return bound, defs | imports.keys(), defs, imports


class Check:
    """One cell's allow-list check; `effects` are the reasons it may not be replayed."""

    def __init__(self, tree: ast.AST, ns: Mapping[str, Any], nodes: list[ast.AST] | None = None):
        self.ns = ns
        self.effects: set[str] = set()
        self.loads: set[str] = set()  # free names used anywhere (bodies too)
        self.roots: set[str] = set()  # names whose attributes are used
        self.db: dict[str, str] = {}  # name -> ":memory:" or the connection it came from
        self.db_uses: set[str] = set()
        nodes = cell_syntax.walk(tree) if nodes is None else nodes  # `nodes`: of `tree`
        self.bound, self.static, self.defs, self.imports = _bound_in(nodes)
        self._kinds: dict[str, tuple[str, str]] = {}
        for node in nodes:
            self._node(node)

    def kind(self, name: str) -> tuple[str, str]:
        if name not in self._kinds:
            self._kinds[name] = classify(self.ns[name]) if name in self.ns else ("data", "")
        return self._kinds[name]

    def _node(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._name(node.id)
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in _DUNDERS_OK:
                self.effects.add(f"uses the attribute {node.attr} (attribute-obfuscated access)")
            root, attrs = _attr_chain(node)
            if isinstance(root, ast.Name):
                self.roots.add(root.id)
                self._module_chain(root.id, attrs)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _URL.match(node.value[:64]):
            self.effects.add(f"names a URL ({node.value[:40]!r}: network)")
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and isinstance(node.values[0].value, str) and _URL.match(node.values[0].value):
            self.effects.add("names a URL (network)")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            self._db_binding(node)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.level:
            self.effects.add("a relative import")
            return
        # `import os.path` binds os: the name it binds is what must be allowed
        mods = [(node.module or "", node.module or "")] if isinstance(node, ast.ImportFrom) else \
            [(a.name, a.name if a.asname else a.name.split(".")[0]) for a in node.names]
        for shown, bound in mods:
            if not module_allowed(bound):
                self.effects.add(f"imports {shown} (not a pure data library)")
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*" and _denied(node.module or "", a.name):
                    self.effects.add(f"imports {node.module}.{a.name} (leaves the kernel)")

    def _name(self, name: str) -> None:
        if name not in self.bound:
            if name in KERNEL_API:
                self.effects.add(f"{name}() {KERNEL_API[name]}")
                return
            if name in DENIED_BUILTINS:
                self.effects.add(f"uses {name} (attribute-obfuscated access or code from a string)")
                return
            if name in _BUILTINS and name not in self.ns:
                return
        if name.startswith("__") and name != "__name__":
            self.effects.add(f"uses {name}")
        self.loads.add(name)
        kind, why = self.kind(name)
        if kind == "unsafe":
            self.effects.add(f"uses {name} ({why})")

    def _module_chain(self, root: str, attrs: list[str]) -> None:
        """`np.lib.npyio.savetxt`, `pd.io.common.os`: an allowed module's attributes."""
        mod = self.imports.get(root)
        value: Any = self.ns.get(root)
        if mod is None and not isinstance(value, types.ModuleType):
            return
        top = (mod or value.__name__).split(".")[0]
        for a in attrs:
            if a in DENIED.get(top.lstrip("_"), ()):
                self.effects.add(f"uses {root}.{'.'.join(attrs)} (leaves the kernel)")
                return
        for a in attrs:  # follow modules the kernel holds (record time) to their values
            if not isinstance(value, types.ModuleType):
                return
            value = getattr(value, a, None)
            kind, why = classify(value) if value is not None else ("data", "")
            if kind in ("unsafe", "object"):
                self.effects.add(f"uses {root}.{'.'.join(attrs)} ({why})")
                return

    def _is_sqlite(self, name: str) -> bool:
        value = self.ns.get(name)
        return self.imports.get(name) == "sqlite3" or (
            isinstance(value, types.ModuleType) and value.__name__ == "sqlite3")

    def _target(self, func: ast.expr) -> tuple[str, str] | None:
        """(module, name) a call's function comes from, where the cell's imports or the
        held values say: `gzip.GzipFile`, `GzipFile` from `from gzip import GzipFile`, a
        held `G = gzip.GzipFile`; None for a method of a value."""
        if isinstance(func, ast.Name):
            path = self.imports.get(func.id)
            if path is not None:
                mod, _, name = path.rpartition(".")
                return (mod, name) if mod else None
            if func.id in self.ns and not isinstance(self.ns[func.id], types.ModuleType):
                return _origin(self.ns[func.id])
            return None
        root, attrs = _attr_chain(func)
        if not isinstance(root, ast.Name) or not attrs:
            return None
        base = self.imports.get(root.id)
        held = self.ns.get(root.id)
        if base is None and isinstance(held, types.ModuleType):
            base = held.__name__
        return (".".join([base, *attrs[:-1]]), attrs[-1]) if base is not None else None

    def _library_call(self, node: ast.Call) -> None:
        """A call into a module that reaches files: only its known reads (IO_PARTS), and a
        mode argument that only reads (MODE_ARGS)."""
        target = self._target(node.func)
        if target is None:
            return
        mod, name = target
        shown = f"{mod}.{name}"
        if _io_part_refuses(mod, name):
            self.effects.add(f"calls {shown} (not a known read-only call)")
        rule = MODE_ARGS.get((mod.split(".")[0].lstrip("_"), name))
        if rule is None:
            return
        pos, kw, reads = rule
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            self.effects.add(f"calls {shown} with * or ** arguments (its {kw} cannot be read)")
        values = [k.value for k in node.keywords if k.arg == kw]
        if len(node.args) > pos:
            values.append(node.args[pos])
        for v in values:
            if not isinstance(v, ast.Constant):
                self.effects.add(f"calls {shown} with a {kw} that is not a literal "
                                 "(counts as writing)")
            elif (reads is None and not (isinstance(v.value, str) and _MODE.fullmatch(v.value)
                                         and not any(c in v.value for c in "wax+"))) or (
                    reads is not None and v.value not in reads):
                self.effects.add(f"calls {shown} with {kw}={v.value!r} (writes)")

    def _call(self, node: ast.Call) -> None:
        self._library_call(node)
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
            if name == "open" and name not in self.bound:
                self._open_mode(node)
            elif name == "print" and any(k.arg == "file" for k in node.keywords):
                self.effects.add("prints to a file")
            elif name in self.bound and name not in self.static:
                self.effects.add(f"calls {name}, a value bound at run time (the check cannot follow it)")
            if self.imports.get(name) == "sqlite3.connect" or (
                    getattr(self.ns.get(name), "__module__", None) == "sqlite3" and
                    getattr(self.ns.get(name), "__name__", None) == "connect"):
                self._connect(node)
            elif name in SQL_CON_CALLS:
                self._con_argument(node, name)
        elif isinstance(func, ast.Attribute):
            self._method_call(node, func)
        else:
            self.effects.add("calls the result of an expression (e.g. getattr(...)(...), d[k](...))")

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        """`x.attr(...)`: writing methods, `.open` modes, SQL on a named connection, and
        (record time) the type of a held `x`."""
        attr = func.attr
        root, attrs = _attr_chain(func)
        if attr == "open":
            module = isinstance(root, ast.Name) and len(attrs) == 1 and (
                root.id in self.imports or isinstance(self.ns.get(root.id), types.ModuleType))
            self._open_mode(node, method=not module)
        elif attr in WRITE_METHODS:
            self.effects.add(f"{attr}() acts outside the kernel (writes, runs or sends)")
        elif attr in WRITE_IF_DESTINATION and (node.args or any(
                k.arg in ("path_or_buf", "buf", "path") for k in node.keywords)):
            self.effects.add(f"{attr}() writes a file")
        elif attr in SQL_CON_CALLS:
            self._con_argument(node, attr)
        elif attr == "load" and any(k.arg == "allow_pickle" for k in node.keywords):
            self.effects.add("load(allow_pickle=...) runs code a file holds")
        if attr == "connect" and isinstance(root, ast.Name) and self._is_sqlite(root.id):
            self._connect(node)
        if not isinstance(root, ast.Name):
            if attr in SQL_METHODS and not (
                    isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute)
                    and root.func.attr in SQL_METHODS):
                self.effects.add(f"{attr}() on an expression (SQL runs only on an in-memory sqlite3 "
                                 "database held by a name)")
            if attr in SQL_METHODS:
                self._sql(node)
            return
        if root.id in self.imports or isinstance(self.ns.get(root.id), types.ModuleType):
            return  # a module's function: _module_chain checked it
        kind, why = self.kind(root.id)
        if kind == "object":
            self.effects.add(f"calls {root.id}.{'.'.join(attrs)} ({why})")
        if attr in SQL_METHODS:
            if len(attrs) == 1:
                self.db_uses.add(root.id)
            else:
                self.effects.add(f"{attr}() on {root.id}.{'.'.join(attrs[:-1])} (SQL runs only on an "
                                 "in-memory sqlite3 database held by a name)")
            self._sql(node)

    def _con_argument(self, node: ast.Call, what: str) -> None:
        con = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "con"), None)
        if isinstance(con, ast.Name):
            self.db_uses.add(con.id)
        else:
            self.effects.add(f"{what}() on a database that is not an in-memory sqlite3 one held by a name")

    def _open_mode(self, node: ast.Call, method: bool = False) -> None:
        """`open(file, mode)` (also io/gzip/bz2/lzma.open); `method`: a value's
        `.open(...)` (`Path(p).open('w')`, `zf.open(name, mode)`), where the mode may be
        any positional argument: every one is looked at."""
        modes = [k.value for k in node.keywords if k.arg == "mode"]
        if method:
            modes += node.args
        elif len(node.args) > 1:
            modes.append(node.args[1])
        for mode in modes:
            if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
                self.effects.add("opens a file with a mode that is not a literal (counts as writing)")
            elif any(c in mode.value for c in "wax+") and _MODE.fullmatch(mode.value):
                self.effects.add(f"opens a file for writing (mode {mode.value!r})")

    def _connect(self, node: ast.Call) -> None:
        target = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "database"), None)
        if not (isinstance(target, ast.Constant) and target.value == MEMORY_DB) or \
                any(k.arg == "uri" for k in node.keywords):
            self.effects.add("connects to a database that is not sqlite3 ':memory:'")

    def _sql(self, node: ast.Call) -> None:
        assert isinstance(node.func, ast.Attribute)
        if node.func.attr not in ("execute", "executemany", "executescript") or not node.args:
            return
        sql = node.args[0]
        if not (isinstance(sql, ast.Constant) and isinstance(sql.value, str)):
            self.effects.add("runs SQL that is not a literal")
        elif _SQL_OUT.search(sql.value):
            self.effects.add("runs SQL that reaches outside the database (ATTACH/VACUUM)")

    def _db_binding(self, node: ast.Assign) -> None:
        call = node.value
        assert isinstance(call, ast.Call)
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        f = call.func
        src: str | None = None
        if isinstance(f, (ast.Attribute, ast.Name)) and (f.attr if isinstance(f, ast.Attribute) else f.id) == "connect":
            arg = call.args[0] if call.args else None
            if isinstance(arg, ast.Constant) and arg.value == MEMORY_DB:
                src = MEMORY_DB
        elif isinstance(f, ast.Attribute) and f.attr in ("cursor", "execute", "executemany") \
                and isinstance(f.value, ast.Name):
            src = f.value.id
        if src is not None:
            self.db.update(dict.fromkeys(names, src))


def check(tree: ast.AST, ns: Mapping[str, Any] | None = None,
          nodes: list[ast.AST] | None = None) -> Check:
    return Check(tree, ns or {}, nodes)


def iter_kinds(ns: Mapping[str, Any], names: Iterator[str] | set[str]) -> dict[str, tuple[str, str]]:
    """`classify` of the held values of `names` (replay time: what the planner needs)."""
    return {k: classify(ns[k]) for k in names if k in ns}
