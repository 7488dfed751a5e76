"""Where things live on disk, and the rule that they are private to the user.

Layout under RLM_HOME (default ./.rlm):

    sessions/<id>/session.jsonl     append-only log (rlm.session.store)
    sessions/<id>/snapshot/         per-variable kernel snapshot (kernel_ext.snapshot)
    sessions/<id>/artifacts/        full cell outputs, images, rich mime payloads
    sessions/<id>/runtime/          kernel connection file
    sessions/<id>/children/<id>/    child sessions of rlm_query
    sessions/<id>/scheduled-jobs.json
    models/                         the joined offline model file
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def rlm_home() -> Path:
    return Path(os.environ.get("RLM_HOME") or ".rlm").absolute()


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it owner-only."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.chmod(path, PRIVATE_DIR)
    return path


def sessions_root(home: Path | None = None) -> Path:
    return private_dir((home or rlm_home()) / "sessions")


def session_dir(session_id: str, home: Path | None = None) -> Path:
    return private_dir(sessions_root(home) / session_id)


def write_private_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: temp file, fsync, rename; mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
