"""`rlm_spawn(..., isolation=...)`: a child works on its own copy of the parent's files and
its changes come back when it finishes.

- `isolation="worktree"` in a git repository: `git worktree add --detach` of the repository
  that holds the parent's working directory, at HEAD, under the child's session directory,
  then the parent's working state laid over it: every tracked file changed or deleted since
  HEAD (staged or not) and every untracked file `.gitignore` does not exclude (data files
  the run wrote, changes applied earlier in the run). Ignored files are left out, as git
  leaves them out (virtualenvs, caches, build output): pass such data with `context=`, or
  spawn with isolation='copy'. At most COPY_MAX_FILES files and COPY_MAX_BYTES are laid
  over, else the spawn is refused naming the fix. That state is the child's baseline (`git
  write-tree`); the child's kernel starts in the same relative directory. Its changes
  against the baseline (`git add -A` + `git diff --cached --binary BASE`) are written to
  `children/<id>/changes.patch` and applied to the parent's working tree with `git apply`:
  "applied", "failed" (the patch is kept for the user, with git's reason) or "skipped" (no
  change); then the worktree is removed.
- `isolation="copy"`, and "worktree" outside a git repository: a private copy of the
  parent's working directory (regular files; at most COPY_MAX_FILES files and
  COPY_MAX_BYTES, else the spawn is refused naming the fix) under `children/<id>/copy`. A
  file the child changed, added or deleted comes back when the parent's file is still as it
  was copied ("applied"); one the parent changed meanwhile stays in the copy for the user
  ("failed", with the files named); no change: "skipped".

Only a child that finished brings its changes back; a failed or cancelled child's are kept
(the patch, or the copy) and reported so, never applied half-done. Nothing a child changed
in the parent's project memory (`.agent/`, by any path that reaches it: rlm.app.owned)
is applied: those changes are named in the outcome's `refused` and `detail`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.app.owned import Owned, refused_note
from rlm.errors import RlmError
from rlm.paths import write_private_atomic

COPY_MAX_FILES = 5_000
COPY_MAX_BYTES = 256 * 1024 * 1024
SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints"})
UNFINISHED = "the child did not finish: its changes were not applied"


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          timeout=120)
    if check and proc.returncode != 0:
        raise RlmError(f"git {' '.join(args[:2])} failed in {cwd}: "
                       f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


@dataclass
class Worktree:
    repo: Path  # the parent's repository root
    tree: Path  # the child's worktree
    cwd: Path  # the child's kernel's working directory (inside `tree`)
    patch: Path  # where its changes are written
    owned: Owned  # the parent's memory, from the repository root (never applied)
    base: str = "HEAD"  # the tree it started from: HEAD with the parent's working state

    def bring_back(self, finished: bool) -> dict[str, Any]:
        """Apply the child's changes to the parent's tree; the outcome, for the parent."""
        try:
            _git(self.tree, "add", "-A")
            changed = [f for f in _git(self.tree, "diff", "--cached", "--name-only", "-z",
                                       "--no-renames", self.base).stdout.split("\0") if f]
            files, refused = self.owned.split(changed)
            return _with_refused(self._apply(files, finished), refused, self.owned.owned)
        finally:
            _git(self.repo, "worktree", "remove", "--force", str(self.tree), check=False)

    def _apply(self, files: list[str], finished: bool) -> dict[str, Any]:
        if not files:
            return {"outcome": "skipped", "files": [], "detail": "the child changed no file"}
        write_private_atomic(self.patch, _git(
            self.tree, "diff", "--cached", "--binary", "--no-renames", self.base, "--",
            *(f":(literal){f}" for f in files)).stdout.encode())  # at most COPY_MAX_FILES
        if not finished:
            return {"outcome": "failed", "files": files, "patch": str(self.patch),
                    "detail": f"{UNFINISHED}; the patch is kept: `git apply {self.patch}`"}
        applied = _git(self.repo, "apply", "--whitespace=nowarn", str(self.patch),
                       check=False)
        if applied.returncode == 0:
            return {"outcome": "applied", "files": files, "patch": str(self.patch)}
        return {"outcome": "failed", "files": files, "patch": str(self.patch),
                "detail": (f"the patch does not apply to the parent's tree "
                           f"({applied.stderr.strip()[:300]}); it is kept: apply it by hand "
                           f"with `git apply --3way {self.patch}`")}


@dataclass
class PrivateCopy:
    src: Path  # the parent's working directory
    cwd: Path  # the copy: the child's kernel's working directory
    owned: Owned  # the parent's memory (never applied)
    digests: dict[str, str] = field(default_factory=dict)  # relative path -> sha256 at copy

    def bring_back(self, finished: bool) -> dict[str, Any]:
        now = _files(self.cwd)
        changed, refused = self.owned.split(sorted(
            r for r in set(now) | set(self.digests)
            if self.digests.get(r) != (_digest(self.cwd, r) if r in now else None)))
        out = _with_refused(self._apply(now, changed, finished), refused, self.owned.owned)
        if out["outcome"] in ("applied", "skipped") and not refused:
            shutil.rmtree(self.cwd, ignore_errors=True)
        elif "copy" not in out:
            out["copy"] = str(self.cwd)  # what was refused stays there for the user
        return out

    def _apply(self, now: list[str], changed: list[str], finished: bool) -> dict[str, Any]:
        if not changed:
            return {"outcome": "skipped", "files": [], "detail": "the child changed no file"}
        if not finished:
            return {"outcome": "failed", "files": changed, "copy": str(self.cwd),
                    "detail": f"{UNFINISHED}; they are kept in {self.cwd}"}
        kept = []
        for rel in changed:
            target = self.src / rel
            was = self.digests.get(rel)
            current = _digest(self.src, rel)
            if current != was or (os.path.lexists(target) and current is None):
                kept.append(rel)  # the parent changed it too: the user decides
                continue
            # both sides are directories a kernel writes: nothing is followed (rlm.safeio)
            if rel in now:
                _copy(self.cwd, self.src, rel)
            else:
                safeio.unlink(self.src, rel)
        if kept:
            return {"outcome": "failed", "files": changed, "copy": str(self.cwd),
                    "detail": (f"{len(kept)} file(s) changed in the parent's directory too "
                               f"while the child worked: {', '.join(kept[:10])}; the child's "
                               f"versions are kept in {self.cwd}; the others were applied")}
        return {"outcome": "applied", "files": changed}


Isolated = Worktree | PrivateCopy


def _with_refused(out: dict[str, Any], refused: list[str], owned: Path) -> dict[str, Any]:
    """The outcome, with the memory changes that were refused named in it."""
    if refused:
        note = refused_note(refused, owned)
        out["refused"] = refused
        out["detail"] = f"{out['detail']}; {note}" if out.get("detail") else note
    return out


def isolate(parent_cwd: Path, child_dir: Path, how: str = "worktree",
            memory: Path | None = None) -> Isolated:
    """The child's own copy: a git worktree (`worktree` in a repository) with the parent's
    working state, else a private copy of the working directory. `memory`: the parent's
    project memory directory, which the child's changes never reach (default: the
    working directory's `.agent`)."""
    memory = memory if memory is not None else Path(parent_cwd) / ".agent"
    if how == "worktree":
        top = _git(parent_cwd, "rev-parse", "--show-toplevel", check=False)
        if top.returncode == 0:
            repo = Path(top.stdout.strip())
            return worktree(repo, Path(parent_cwd), child_dir, Owned(repo, memory))
    return private_copy(Path(parent_cwd), child_dir / "copy", Owned(Path(parent_cwd), memory))


def worktree(repo: Path, parent_cwd: Path, child_dir: Path, owned: Owned) -> Worktree:
    """A worktree at HEAD with the parent's working state laid over it (module doc)."""
    skip = child_dir.parent.parent  # the parent's session, when it lies in the repository
    changed, untracked = _working_state(repo, skip)
    _check_size(repo, changed + untracked, "the parent's uncommitted changes and untracked "
                "files", "commit them or add what the child does not need to .gitignore, "
                "or spawn with isolation='copy' or without isolation")
    tree = child_dir / "worktree"
    tree.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "add", "--detach", str(tree), "HEAD")
    try:
        for rel in changed + untracked:
            if _digest(repo, rel) is not None:  # a regular file (links are not followed)
                _copy(repo, tree, rel)
            elif not os.path.lexists(repo / rel):  # deleted since HEAD
                safeio.unlink(tree, rel)
        _git(tree, "add", "-A")
        base = _git(tree, "write-tree").stdout.strip()
    except BaseException:
        _git(repo, "worktree", "remove", "--force", str(tree), check=False)
        raise
    rel_cwd = parent_cwd.resolve().relative_to(repo.resolve())
    return Worktree(repo=repo, tree=tree, cwd=tree / rel_cwd,
                    patch=child_dir / "changes.patch", owned=owned, base=base)


def _working_state(repo: Path, skip: Path) -> tuple[list[str], list[str]]:
    """(tracked files changed or deleted since HEAD, untracked files not ignored), relative
    to `repo`, nothing under `skip`."""
    def listed(*args: str) -> list[str]:
        return [f for f in _git(repo, *args).stdout.split("\0") if f]

    try:
        under = skip.resolve().relative_to(repo.resolve()).as_posix() + "/"
    except ValueError:
        under = None
    changed = listed("diff", "--name-only", "-z", "--no-renames", "HEAD")
    untracked = listed("ls-files", "-z", "--others", "--exclude-standard")
    keep = [f for f in changed + untracked if under is None or not f.startswith(under)]
    return [f for f in changed if f in keep], [f for f in untracked if f in keep]


def _check_size(root: Path, files: list[str], what: str, fix: str) -> None:
    sizes = [os.lstat(root / r).st_size for r in files if os.path.isfile(root / r)]
    if len(sizes) > COPY_MAX_FILES or sum(sizes) > COPY_MAX_BYTES:
        raise RlmError(f"isolation: {what} in {root} come to {len(sizes)} files, "
                       f"{sum(sizes) / 1e6:.0f} MB, more than a child's copy takes "
                       f"({COPY_MAX_FILES} files, {COPY_MAX_BYTES // 2**20} MB): {fix}")


def private_copy(src: Path, dest: Path, owned: Owned | None = None) -> PrivateCopy:
    files = _files(src, skip=dest)
    size = sum((src / r).stat().st_size for r in files)
    if len(files) > COPY_MAX_FILES or size > COPY_MAX_BYTES:
        raise RlmError(f"isolation: the working directory {src} holds {len(files)} files, "
                       f"{size / 1e6:.0f} MB, more than a private copy takes "
                       f"({COPY_MAX_FILES} files, {COPY_MAX_BYTES // 2**20} MB): make it a git "
                       "repository (isolation='worktree' then shares its objects), or spawn "
                       "from a smaller directory, or without isolation")
    out = PrivateCopy(src=src, cwd=dest, owned=owned or Owned(src, src / ".agent"))
    safeio.make_dirs(dest.parent, dest.name)
    for rel in files:
        _copy(src, dest, rel)
        out.digests[rel] = _digest(dest, rel) or ""
    return out


def _copy(src: Path, dest: Path, rel: str) -> None:
    """`src/rel` to `dest/rel` with its mode and times, neither side followed through a
    link below its root (a kernel writes both: rlm.safeio)."""
    fd = safeio.open_file(src, rel)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        data = f.read()
    safeio.write_atomic(dest, rel, data, mode=st.st_mode & 0o777, durable=False,
                        create_dirs=True)
    with contextlib.suppress(OSError):
        with safeio.parent_dir(dest, rel) as (d, name):
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=d, follow_symlinks=False)


def _files(root: Path, skip: Path | None = None) -> list[str]:
    """Regular files under `root` (relative, posix), symlinks and SKIP_DIRS left out."""
    out = []
    skip_r = skip.resolve() if skip is not None else None
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not (here / d).is_symlink()
                   and (skip_r is None or (here / d).resolve() != skip_r)]
        for name in names:
            p = here / name
            if p.is_file() and not p.is_symlink():
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


def _digest(root: Path, rel: str) -> str | None:
    """sha256 of the regular file `root/rel`, None when there is none there (missing, a
    link, a FIFO: never followed)."""
    try:
        fd = safeio.open_file(root, rel)
    except (OSError, ValueError):
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
