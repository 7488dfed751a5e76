"""A child's `context=`: the object itself, moved by the snapshot codec (issue 58).

`rlm_spawn(task, context=df)` / `rlm_query(task, context=arr)`: the parent's kernel encodes
the value as a snapshot does (kernel_ext.snapshot_codec.encode: C pickle protocol 5 with
out-of-band buffers, dill for what is defined in `__main__`) into one blob, sent base64 in
the spawn request. The host never unpickles it: it checks its size against the user's
bound (`child_context_max_bytes`) and keeps it as `children/<id>/context.bin`; the child's
kernel decodes it into its variable `context` (`bind_json`). So a DataFrame arrives as the same
DataFrame, an ndarray with its dtype and shape, a tuple as a tuple.

Past the bound (the env's CHILD_CONTEXT_CAP, else the wire's MAX_CONTEXT_BYTES) or when the
value cannot be pickled, `pack` raises in the parent's cell, naming the size, the bound and
how to pass it instead; the value stays where it was.

Blob: MAGIC, an 8-byte big-endian header length, a JSON header {"kind", "meta", "sizes",
"type"}, then the codec's parts (main pickle, out-of-band buffers) one after another.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from kernel_ext import contract, wire
from kernel_ext.namespace import estimate_size
from kernel_ext.snapshot_codec import decode, encode, relink

MAGIC = b"RLMCTX1\n"
PACKED = "rlm_object"  # the key of a packed context in a spawn request


def cap() -> int:
    """The bound the host set for this kernel (bytes), else the wire's."""
    raw = os.environ.get(contract.CHILD_CONTEXT_CAP, "")
    try:
        value = int(raw)
    except ValueError:
        return wire.MAX_CONTEXT_BYTES
    return min(value, wire.MAX_CONTEXT_BYTES) if value > 0 else wire.MAX_CONTEXT_BYTES


def type_name(value: Any) -> str:
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


def too_big(what: str, size: int | None, bound: int) -> str:
    """The refusal for a context past the bound: its size, the bound, how to pass it."""
    shown = f"about {_size(size)}" if size is not None and size > bound else \
        f"more than {_size(bound)}"
    return (f"context= is a {what} of {shown} pickled, over the {_size(bound)} a child's "
            f"context may be (child_context_max_bytes in the rlm config): write it to a "
            f"file (df.to_parquet('part.parquet'), np.save('part.npy', arr), ...) and pass "
            f"the path as context= for the child to read, or pass a slice of it")


def to_blob(value: Any, bound: int) -> bytes:
    """`value` as one blob, or ValueError (past `bound`) / TypeError (unpicklable)."""
    enc = encode(value, bound)
    what = type_name(value)
    if enc.kind == "skipped":
        reason = enc.reason or "it cannot be pickled"
        if reason.startswith("over"):
            raise ValueError(too_big(what, estimate_size(value), bound))
        raise TypeError(f"context= is a {what} that cannot be moved to the child ({reason}): "
                        "pass plain data (a DataFrame, an array, a dict of values) or a "
                        "file path instead; nothing was sent, your value is unchanged")
    parts = [bytes(memoryview(p).cast("B")) for p in enc.parts]
    header = json.dumps({"kind": enc.kind, "meta": enc.meta, "type": what,
                         "sizes": [len(p) for p in parts]}).encode()
    blob = b"".join([MAGIC, len(header).to_bytes(8, "big"), header, *parts])
    if len(blob) > bound:
        raise ValueError(too_big(what, len(blob), bound))
    return blob


def pack(value: Any) -> Any:
    """What a spawn request carries for `value` (None stays None)."""
    if value is None:
        return None
    blob = to_blob(value, cap())
    return {PACKED: base64.b64encode(blob).decode("ascii"), "type": type_name(value),
            "bytes": len(blob)}


def from_blob(blob: bytes) -> Any:
    """The value a blob holds (in the child's kernel; never on the host)."""
    if not blob.startswith(MAGIC):
        raise ValueError("not a packed context (bad magic)")
    n = int.from_bytes(blob[len(MAGIC):len(MAGIC) + 8], "big")
    start = len(MAGIC) + 8
    header = json.loads(blob[start:start + n])
    view, at, parts = memoryview(bytearray(blob)), start + n, []  # writable: arrays stay so
    for size in header["sizes"]:
        parts.append(view[at:at + size])
        at += size
    return decode(header["kind"], parts, header.get("meta") or {})


def bind_json(path: str) -> str:
    """The child's `context`: the blob its host kept at `path`, decoded here and bound to
    the variable `context`; JSON {"type": ...} of what it holds."""
    from IPython import get_ipython

    ip = get_ipython()
    with open(path, "rb") as f:
        value = from_blob(f.read())
    ip.user_ns["context"] = relink(value, ip.user_ns)
    return json.dumps({"type": type_name(value)})
