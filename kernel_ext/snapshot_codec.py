"""Turn one value into a manifest entry plus bytes, and back. No file I/O here.

Order of attempts for a value:
  * a module                          -> kind "module" {"module": name}, re-imported
  * a function/class importable by (module, qualname) from outside __main__
                                      -> kind "import", re-imported
  * a function or class defined in __main__ (lambdas included) -> dill (by value; globals
    stay the live kernel namespace, see `relink`)
  * anything else                     -> C pickle protocol 5 with out-of-band buffers
                                         (numpy/pandas data is never copied), then dill
  * still failing or over the cap     -> kind "skipped" with a reason

Co-variable groups (`encode_group`): the values of names that share objects are pickled as
ONE tuple, so pickle's memo restores `b is a`, `c["x"] is a`, cycles, and a dict holding a
DataFrame that is also a name. Pickle copies numpy views; inside a group, an array whose
data root (`.base` chain) is also in the group is stored as (root, byte offset, shape,
strides, dtype) whenever two or more arrays of the group share that data root
(`shared_array_roots`); the root is stored once, whole, and each array is rebuilt as a
view of it, so `v = a[::2]`, `col = df["x"]` (a view of the DataFrame's block) and the
root keep sharing memory after a restore. Object-dtype arrays and arrays that share their
root with no other array of the group are copied (as before).
"""

from __future__ import annotations

import functools
import importlib
import io
import os
import pickle
import stat
import threading
import types
from dataclasses import dataclass, field
from typing import Any

from kernel_ext.namespace import array_root, estimate_size

MiB = 1024 * 1024


class OverCap(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass
class Encoded:
    kind: str  # module | import | pickle | dill | skipped
    parts: list[Any] = field(default_factory=list)  # bytes / memoryview: main pickle, buffers
    meta: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @property
    def size(self) -> int:
        return sum(memoryview(p).nbytes for p in self.parts)


class _CappedSink:
    """A write-only file for the pickler that aborts as soon as the output passes the cap."""

    def __init__(self, cap: int) -> None:
        self.cap, self.size = cap, 0
        self.chunks: list[bytes] = []
        self.buffers: list[memoryview] = []

    def _grow(self, n: int) -> None:
        self.size += n
        if self.size > self.cap:
            raise OverCap(self.size)

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._grow(n)
        self.chunks.append(bytes(data) if not isinstance(data, bytes) else data)
        return n

    def buffer_callback(self, pb: pickle.PickleBuffer) -> bool:
        try:
            raw = pb.raw()
        except BufferError:  # not contiguous: serialise in-band
            return True
        self._grow(raw.nbytes)
        self.buffers.append(raw)
        return False


def _fmt_mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} B"


def over_cap_reason(size: int, cap: int, what: str = "per-variable") -> str:
    return f"over {what} cap ({_fmt_mib(size)} > {_fmt_mib(cap)})"


def error_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _defined_in_main(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, type, functools._lru_cache_wrapper)) \
        and getattr(value, "__module__", None) == "__main__"


def _lru_cached(fn: Any, maxsize: int | None, typed: bool) -> Any:
    """Unpickle helper: a kernel function decorated with functools.lru_cache (empty cache)."""
    return functools.lru_cache(maxsize=maxsize, typed=typed)(fn)


def _lru_reduce(obj: Any) -> Any:
    """pickle looks an lru_cache wrapper up by name in __main__, where it is what is being
    restored: store the wrapped function (by value) and the cache's parameters instead."""
    if isinstance(obj, functools._lru_cache_wrapper) and getattr(obj, "__module__", None) == "__main__":
        params = obj.cache_parameters()
        return _lru_cached, (obj.__wrapped__, params["maxsize"], params["typed"])
    return NotImplemented


def import_ref(value: Any) -> dict[str, str] | None:
    """(module, qualname) if `value` is a module, or a function/class importable by name."""
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if not isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return None
    mod, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or mod == "__main__" or "<" in qual:
        return None
    try:
        if resolve_import(mod, qual) is value:
            return {"module": mod, "qualname": qual}
    except Exception:  # noqa: BLE001 - any lookup failure means "not importable"
        return None
    return None


def resolve_import(module: str, qualname: str | None) -> Any:
    obj: Any = importlib.import_module(module)
    for part in (qualname.split(".") if qualname else []):
        obj = getattr(obj, part)
    return obj


def _array_view(root: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
                dtype: Any) -> Any:
    """Unpickle helper: a view of `root`'s memory (see `_view_reduce`)."""
    import numpy as np

    flat = root.reshape(-1, order="A").view(np.uint8)
    return np.ndarray(shape, dtype, buffer=flat, offset=offset, strides=strides)


def _view_reduce(obj: Any, roots: frozenset[int]) -> Any:
    """(rebuild, args) for an ndarray that is a view of a group array, else NotImplemented."""
    if not roots or type(obj).__module__ != "numpy" or type(obj).__name__ != "ndarray":
        return NotImplemented
    root = array_root(obj)
    if root is obj or id(root) not in roots or obj.dtype.hasobject or root.dtype.hasobject:
        return NotImplemented
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        return NotImplemented
    offset = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    lo = offset + sum(s * (n - 1) for s, n in zip(obj.strides, obj.shape, strict=True) if s < 0)
    hi = offset + obj.itemsize + sum(s * (n - 1) for s, n in zip(obj.strides, obj.shape, strict=True) if s > 0)
    if obj.size == 0 or lo < 0 or hi > root.nbytes:
        return NotImplemented
    return _array_view, (root, offset, obj.shape, obj.strides, obj.dtype)


_RLOCK = type(threading.RLock())


def _reopen(name: str, mode: str, encoding: str | None, position: int | None) -> Any:
    """Unpickle helper: a file reopened in `mode`, at `position` (None: where it opens).
    Regular files only, opened without blocking: a FIFO put at the path since (or an
    older snapshot's) would block the restore until the kernel's start timeout, and every
    other name would be lost with it; it fails this one name instead."""
    def regular_only(path: str, flags: int) -> int:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path} is not a regular file (a FIFO or device): not reopened")
        os.set_blocking(fd, True)
        return fd

    f = (open(name, mode, encoding=encoding, opener=regular_only) if "b" not in mode  # noqa: SIM115
         else open(name, mode, opener=regular_only))  # noqa: SIM115
    if position is not None:
        f.seek(position)
    return f


def _file_reduce(obj: Any) -> Any:
    """Files come back safely: one open for reading is reopened at its position (dill's
    reopens at 0); one open for writing is reopened for APPENDING (dill's reopens it with
    its mode, and "w" truncates the file on restore); a closed one is not stored."""
    if not isinstance(obj, (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom)):
        return NotImplemented
    mode, name = getattr(obj, "mode", ""), getattr(obj, "name", None)
    if not isinstance(name, str):
        return NotImplemented
    if obj.closed:
        raise TypeError(f"closed file {name!r} is not stored")
    try:
        regular = stat.S_ISREG(os.fstat(obj.fileno()).st_mode)
    except (OSError, ValueError):
        regular = False
    if not regular:  # a FIFO, socket or device: reopening it could block the restore
        raise TypeError(f"{name!r} is not a regular file (a FIFO, socket or device): not stored")
    enc = obj.encoding if isinstance(obj, io.TextIOWrapper) else None
    if mode in ("r", "rb", "rt"):
        return _reopen, (name, mode, enc, obj.tell())
    return _reopen, (name, "ab" if "b" in mode else "a", enc, None)


def _override(obj: Any, roots: frozenset[int]) -> Any:
    if type(obj) is _RLOCK:  # the threads that held it are gone: a fresh, free RLock
        return threading.RLock, ()  # (dill's own comes back unlocked yet unacquirable)
    rv = _view_reduce(obj, roots)
    if rv is NotImplemented:
        rv = _lru_reduce(obj)
    return _file_reduce(obj) if rv is NotImplemented else rv


class _GroupPickler(pickle.Pickler):
    roots: frozenset[int] = frozenset()

    def reducer_override(self, obj: Any) -> Any:
        return _override(obj, self.roots)


def _pickle(value: Any, cap: int, roots: frozenset[int] = frozenset()) -> Encoded:
    sink = _CappedSink(cap)
    p = _GroupPickler(sink, protocol=5, buffer_callback=sink.buffer_callback)
    p.roots = roots
    p.dump(value)
    return Encoded("pickle", [b"".join(sink.chunks), *sink.buffers])


def _dill(value: Any, cap: int, roots: frozenset[int] = frozenset()) -> Encoded:
    import dill

    class _DillGroupPickler(dill.Pickler):  # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            return _override(obj, roots)

    sink = _CappedSink(cap)
    _DillGroupPickler(sink, protocol=5, recurse=False, byref=False).dump(value)
    return Encoded("dill", [b"".join(sink.chunks)])


def encode(value: Any, cap: int, roots: frozenset[int] = frozenset()) -> Encoded:
    """Encode one value; never raises (failures become kind "skipped" with a reason)."""
    ref = import_ref(value)
    if ref is not None:
        return Encoded("module" if "qualname" not in ref else "import", meta=ref)
    est = estimate_size(value)
    if est > cap:
        return Encoded("skipped", reason=over_cap_reason(est, cap))
    return _pickle_or_dill(value, est, cap, roots, try_pickle=not _defined_in_main(value))


def _pickle_or_dill(value: Any, est: int, cap: int, roots: frozenset[int], *,
                    try_pickle: bool) -> Encoded:
    """C pickle first (unless the value holds objects defined in __main__), dill after a
    failure; over the cap or unpicklable by both: "skipped" with the first reason."""
    first_error: BaseException | None = None
    if try_pickle:
        try:
            return _pickle(value, cap, roots)
        except OverCap as exc:
            return Encoded("skipped", reason=over_cap_reason(max(exc.size, est), cap))
        except Exception as exc:  # noqa: BLE001 - any pickling failure: try dill
            first_error = exc
    try:
        return _dill(value, cap, roots)
    except OverCap as exc:
        return Encoded("skipped", reason=over_cap_reason(max(exc.size, est), cap))
    except Exception as exc:  # noqa: BLE001 - RecursionError included
        return Encoded("skipped", reason=error_reason(first_error or exc))


def encode_group(values: list[Any], cap: int, roots: frozenset[int] = frozenset()) -> Encoded:
    """Encode the values of one co-variable group as one tuple (see the module docstring).
    `roots`: ids of arrays of the group whose views are stored as views. Never raises;
    kind "skipped" with the reason when the tuple cannot be pickled (the caller then
    stores the members one by one)."""
    est = sum(estimate_size(v) for v in values)
    if est > cap:
        return Encoded("skipped", reason=over_cap_reason(est, cap))
    return _pickle_or_dill(tuple(values), est, cap, roots,
                           try_pickle=not any(_defined_in_main(v) for v in values))


def decode(kind: str, parts: list[memoryview], meta: dict[str, Any]) -> Any:
    if kind in ("module", "import"):
        return resolve_import(meta["module"], meta.get("qualname"))
    if kind == "pickle":
        return pickle.loads(parts[0], buffers=parts[1:])
    if kind == "dill":
        import dill

        return dill.loads(parts[0])
    raise ValueError(f"unknown entry kind {kind!r}")


def _rebuild_function(fn: types.FunctionType, ns: dict[str, Any]) -> types.FunctionType:
    new = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__annotations__ = fn.__annotations__
    new.__doc__ = fn.__doc__
    new.__module__ = fn.__module__
    new.__dict__.update(fn.__dict__)
    return new


def _relink_member(member: Any, ns: dict[str, Any]) -> Any:
    if isinstance(member, types.FunctionType) and member.__globals__ is not ns:
        return _rebuild_function(member, ns)
    if isinstance(member, (staticmethod, classmethod)):
        inner = _relink_member(member.__func__, ns)
        return member if inner is member.__func__ else type(member)(inner)
    if isinstance(member, property):
        fns = [_relink_member(f, ns) if f is not None else None for f in (member.fget, member.fset, member.fdel)]
        if any(a is not b for a, b in zip(fns, (member.fget, member.fset, member.fdel), strict=True)):
            return property(fns[0], fns[1], fns[2], member.__doc__)
    return member


def relink(value: Any, ns: dict[str, Any]) -> Any:
    """Make a restored __main__ function (or a restored class's methods) use the live
    namespace `ns` as globals, so a later `g = 5` in the kernel is seen. Instances whose
    class was rebuilt by value are pointed at the namespace's class of the same name."""
    if isinstance(value, types.FunctionType) and value.__module__ == "__main__":
        return _relink_member(value, ns)
    if isinstance(value, type) and value.__module__ == "__main__":
        for name, member in list(vars(value).items()):
            new = _relink_member(member, ns)
            if new is not member:
                setattr(value, name, new)
        return value
    cls = type(value)
    if getattr(cls, "__module__", None) == "__main__":
        live = ns.get(cls.__qualname__)
        if isinstance(live, type) and live is not cls and live.__qualname__ == cls.__qualname__:
            try:
                value.__class__ = live
            except TypeError:
                pass
    return value
