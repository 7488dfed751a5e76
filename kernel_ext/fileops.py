"""Record the files the user's code reads and writes, with a `sys.addaudithook` hook.

The hook runs on every `open` in the process, so it is kept cheap: one flag check, one
string test against a few prefixes, one set insertion. Audit hooks cannot be removed, so
`uninstall` only clears the module-level `_enabled` flag that the hook checks first.

Recorded events: `open` (mode decides read vs modified; writes, appends, `+` and `x`
count as modified), `os.rename` / `os.replace` (source and destination modified),
`os.remove` / `os.unlink` (modified), `shutil.copyfile` (source read, destination
modified), `shutil.move`/`shutil.rmtree` (modified). pandas and numpy readers/writers go
through `open`, so they are covered. Paths under the Python installation (stdlib,
site-packages), the snapshot dir, /proc, /dev, /sys and the kernel's runtime files are
ignored. Each set is capped at `MAX_PATHS` entries.

Under ipykernel the files a cell read go back in its own execute_reply's metadata
(`wire.CELL_READS`): a user expression for them cost the kernel ~0.3 ms a cell (an eval
and IPython's display formatters).
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
import tempfile
from typing import Any

from kernel_ext import contract, provenance, wire

MAX_PATHS = 1000

_enabled = False
_hook_added = False
_read: set[str] = set()
_cell_read: set[str] = set()  # the files the running (or last) cell read
_modified: set[str] = set()
_ignored_prefixes: tuple[str, ...] = ("/proc/", "/dev/", "/sys/")
_WRITE_CHARS = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _compute_ignored() -> tuple[str, ...]:
    prefixes = {"/proc/", "/dev/", "/sys/", "/usr/", "/etc/"}  # system and library data
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            prefixes.add(os.path.realpath(p) + os.sep)
            prefixes.add(p + os.sep)
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        prefixes.add(os.path.join(p, "lib") + os.sep)
    # dirs the host set up for the kernel and its libraries; the session dir holds the
    # host's own files (log, snapshot, runtime, artifacts, context.bin)
    for v in (os.environ.get(contract.SNAPSHOT_DIR), os.environ.get(contract.MPLCONFIGDIR),
              os.environ.get(contract.IPYTHONDIR), os.environ.get(contract.SESSION_DIR)):
        if v:
            prefixes.add(os.path.abspath(v).rstrip(os.sep) + os.sep)
    # this package's own source (an editable install lives outside site-packages)
    prefixes.add(os.path.dirname(os.path.abspath(__file__)) + os.sep)
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        prefixes.add(os.path.abspath(jupyter_runtime_dir()) + os.sep)
    except Exception:  # noqa: BLE001 - optional dependency
        pass
    home = os.path.expanduser("~")
    for sub in (".ipython", ".cache", ".config/matplotlib", ".matplotlib"):
        prefixes.add(os.path.join(home, sub) + os.sep)
    return tuple(sorted(prefixes))


_TMP = tempfile.gettempdir().rstrip(os.sep) + os.sep
_SCRATCH_NAME = re.compile(r"[a-z0-9_]{8}$")  # tempfile.mkstemp()'s random names


def _is_scratch(p: str) -> bool:
    """Anonymous temp files (tempfile's random names) and IPython's cell-source cache."""
    if not p.startswith(_TMP):
        return False
    rest = p[len(_TMP):]
    return rest.startswith("ipykernel_") or ("/" not in rest and bool(_SCRATCH_NAME.match(rest)))


def _record(target: set[str], path: Any) -> None:
    if isinstance(path, int) or len(target) >= MAX_PATHS:
        return
    try:
        p = os.fsdecode(path)
    except TypeError:
        return
    if not p:
        return
    if p[0] != "/":
        p = os.path.abspath(p)
    # a directory opened for fsync is the prefix itself, without the trailing separator
    if (p + "/").startswith(_ignored_prefixes) or "/__pycache__/" in p or _is_scratch(p):
        return
    target.add(p)
    if target is _modified:
        provenance.note_write(p)  # which line of the cell wrote it
    if target is _read:
        provenance.note_read()  # which line of the cell read it
        if len(_cell_read) < MAX_PATHS:
            _cell_read.add(p)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not (_enabled and _in_cell):
        return
    if event == "open":
        path, mode = args[0], args[1]
        if path is None:
            return
        if isinstance(mode, str):
            _record(_modified if _WRITE_CHARS.intersection(mode) else _read, path)
        else:  # os.open: mode is None, the flags say it
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            _record(_modified if flags & _WRITE_FLAGS else _read, path)
    elif event in ("os.rename", "shutil.copyfile", "shutil.move"):
        if event == "shutil.copyfile":
            _record(_read, args[0])
        else:
            _record(_modified, args[0])
        _record(_modified, args[1])
    elif event in ("os.remove", "shutil.rmtree"):
        _record(_modified, args[0])


_in_cell = False  # record only while a user cell runs: kernel start-up is not the user's


def _cell_started(*_: Any) -> None:
    global _in_cell
    _in_cell = True
    _cell_read.clear()


def _cell_ended(*_: Any) -> None:
    global _in_cell
    _in_cell = False


def watch(on: bool) -> None:
    """Record reads around one cell run outside IPython's events (`%%rlm`'s agent cells in
    the user's own kernel: rlm.notebook.inprocess); the hook is added on first use."""
    global _enabled, _hook_added, _ignored_prefixes, _in_cell
    if on and not _hook_added:
        _ignored_prefixes = _compute_ignored()
        sys.addaudithook(_hook)
        _hook_added = True
    if on:
        _enabled = True
        _cell_read.clear()
    _in_cell = on


def install(ip: Any) -> None:
    global _enabled, _hook_added, _ignored_prefixes
    _ignored_prefixes = _compute_ignored()
    if not _hook_added:
        sys.addaudithook(_hook)
        _hook_added = True
    if ip is not None:
        ip.events.register("pre_run_cell", _cell_started)
        ip.events.register("post_run_cell", _cell_ended)
        _report_reads(getattr(ip, "kernel", None))
    _enabled = True


_own_finish: Any = None  # (kernel, its own finish_metadata) while ours is installed


def _report_reads(kernel: Any) -> None:
    """The files a cell read, in its execute_reply's metadata (not for a silent request:
    no cell ran)."""
    global _own_finish
    own = getattr(kernel, "finish_metadata", None)
    if own is None or _own_finish is not None:
        return

    def finish_metadata(parent: Any, metadata: Any, reply_content: Any) -> Any:
        metadata = own(parent, metadata, reply_content)
        content = parent.get("content") if isinstance(parent, dict) else None
        if isinstance(metadata, dict) and isinstance(content, dict) and not content.get("silent"):
            metadata[wire.CELL_READS] = sorted(_cell_read)
        return metadata

    kernel.finish_metadata = finish_metadata
    _own_finish = (kernel, own)


def uninstall(ip: Any) -> None:
    global _enabled, _own_finish
    _enabled = False
    if ip is not None:
        for event, fn in (("pre_run_cell", _cell_started), ("post_run_cell", _cell_ended)):
            try:
                ip.events.unregister(event, fn)
            except ValueError:
                pass
    if _own_finish is not None:
        kernel, own = _own_finish
        kernel.finish_metadata = own
        _own_finish = None


def file_ops() -> dict[str, list[str]]:
    return {"read": sorted(_read), "modified": sorted(_modified)}


def file_ops_json() -> str:
    return json.dumps(file_ops())


def reset_file_ops() -> str:
    _read.clear()
    _modified.clear()
    return "{}"
