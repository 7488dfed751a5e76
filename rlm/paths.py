"""Where things live on disk, and the rule that they are private to the user.

Two homes, both from platformdirs unless overridden:

- RLM_HOME (default `user_data_dir("rlm")`, e.g. ~/.local/share/rlm): sessions, config.toml.
- the model cache (RLM_MODEL_CACHE, default `user_cache_dir("rlm")/models`, e.g.
  ~/.cache/rlm/models): the joined offline model, shared by every RLM_HOME and working
  directory (rlm.llm.modelfile), so it exists once per user, not once per folder.

Layout under RLM_HOME:

    sessions/<id>/session.jsonl     append-only log (rlm.session.store)
    sessions/<id>/snapshot/         per-variable kernel snapshot (kernel_ext.snapshot)
    sessions/<id>/artifacts/        full cell outputs, images, rich mime payloads
    sessions/<id>/runtime/          what the kernel writes: its unix sockets, its IPython dir
    sessions/<id>/host/             what the host writes for the kernel to read: the
                                    connection file, kernel.log, kernel.pid, socket-dir
                                    owners (never writable by the kernel)
    sessions/<id>/children/<id>/    child sessions of rlm_query
    sessions/<id>/scheduled-jobs.json
    models/                         (before issue 14) the joined model; found and moved
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import platformdirs

from rlm import safeio
from rlm.errors import SessionError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


APP_NAME = "rlm"
LEGACY_HOME = ".rlm"  # the default RLM_HOME before issue 14 (relative to the working dir)


def rlm_home() -> Path:
    """$RLM_HOME, else the user's data directory (one session list per user)."""
    env = os.environ.get("RLM_HOME")
    if env:
        return Path(env).expanduser().absolute()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def model_cache() -> Path:
    """Where the joined offline model lives: $RLM_MODEL_CACHE, else the user's cache
    directory. Creates nothing."""
    env = os.environ.get("RLM_MODEL_CACHE")
    if env:
        return Path(env).expanduser().absolute()
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "models"


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it owner-only. A symlink at `path` is refused
    (never chmodded or written through): a copied session's `snapshot -> /etc` must not
    make rlm change /etc."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if os.path.islink(path):
        raise SessionError(f"{path} is a symbolic link; rlm does not follow links where it "
                           "writes (a copied directory could point anywhere): remove it")
    os.chmod(path, PRIVATE_DIR, follow_symlinks=False)
    return path


# What a session directory holds (rlm.session.store, rlm.longrun, kernel_ext.snapshot):
# each must be what it says, never a symlink, FIFO or device.
SESSION_DIRS = ("snapshot", "runtime", "host", "artifacts", "children", "worker-inbox")
# the host writes here and the kernel may only read (the sandbox shows it read-only)
HOST_DIR = "host"
SESSION_FILES = ("session.jsonl", "worker.lock", "worker.json", "worker-events.jsonl",
                 "worker.log", "scheduled-jobs.json", ".lock", ".scrubbed")


def check_session_layout(folder: Path) -> None:
    """Refuse a session directory whose known entries are symlinks or of the wrong kind
    (a FIFO `worker.lock` would hang every reader; a symlinked one would be truncated
    through the link). One line naming the entry and the fix."""
    import stat as st_

    for name in SESSION_DIRS + SESSION_FILES:
        try:
            mode = os.lstat(folder / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            raise SessionError(f"cannot check {folder / name}: {e.strerror}") from None
        want_dir = name in SESSION_DIRS
        ok = st_.S_ISDIR(mode) if want_dir else st_.S_ISREG(mode)
        if not ok:
            what = "a symbolic link" if st_.S_ISLNK(mode) else ("not a directory" if want_dir
                                                               else "not a regular file")
            raise SessionError(f"{folder / name} is {what}; rlm refuses it (a copied session "
                               "could point it at any file or block readers): remove it, "
                               "or use a session you made")


def sessions_path(home: Path | None = None) -> Path:
    """Where sessions live; creates nothing (lookups must not leave directories behind)."""
    return (home or rlm_home()) / "sessions"


def sessions_root(home: Path | None = None) -> Path:
    """`sessions_path`, created (for writers)."""
    return private_dir(sessions_path(home))


SESSION_ID_MAX = 128
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_session_id(session_id: str) -> str:
    """`session_id` if it can be a session directory name, else a one-line SessionError.

    Letters, digits, '.', '_', '-' (not first), at most SESSION_ID_MAX characters: no path
    separators, no glob characters, nothing the file system could reject as too long."""
    if len(session_id) > SESSION_ID_MAX or not _SESSION_ID.fullmatch(session_id):
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "..."
        raise SessionError(
            f"{shown!r} is not a session id (letters, digits, '.', '_', '-'; at most "
            f"{SESSION_ID_MAX} characters); `rlm sessions` lists them, or give a session "
            "directory as a path (e.g. ./dir)"
        )
    return session_id


def session_dir(session_id: str, home: Path | None = None) -> Path:
    """Create the directory of a NEW session. Look existing ones up with
    `rlm.session.store.resolve_session_dir`, which never creates anything."""
    return private_dir(sessions_root(home) / check_session_id(session_id))


def write_private_atomic(path: Path, data: bytes, root: Path | None = None) -> None:
    """Write `data` to `path` atomically: a new temp file (random name, O_EXCL), fsync,
    rename within the directory's descriptor, fsync of the directory; mode 0600. Every
    component below `root` (default: the file's own directory) is opened without following
    a link (rlm.safeio): pass the session or working directory as `root` for a path in
    a directory a kernel may write."""
    safeio.write_atomic(Path(root) if root is not None else path.parent, path, data)


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def os_error_line(e: OSError) -> str:
    """One line for a file-system error a user can cause (read-only or foreign RLM_HOME,
    full disk), naming the file and the fix."""
    where = f" ({e.filename})" if e.filename else ""
    what = e.strerror or str(e)
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = f"set RLM_HOME to a directory you can write (now {rlm_home()})"
    elif e.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free some space, or set RLM_HOME to another disk (now {rlm_home()})"
    else:
        fix = f"check RLM_HOME (now {rlm_home()}), or set RLM_DEBUG=1 for the traceback"
    return f"{what}{where}; {fix}"
