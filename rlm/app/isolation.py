"""`rlm_spawn(..., isolation="worktree")`: a child works in its own git worktree and its
changes come back to the parent's tree as a patch.

- `isolate(parent_cwd, child_dir)`: `git worktree add --detach` of the repository that
  holds the parent's working directory, at HEAD, under the child's session directory; the
  child's kernel starts in the same relative directory of it.
- `bring_back(iso)`: the child's changes (`git add -A` + `git diff --cached --binary HEAD`)
  as `children/<id>/changes.patch`, applied to the parent's working tree with `git apply`
  (--3way when the index allows it): "applied", "failed" (the patch is kept for the user,
  with git's reason) or "skipped" (no change); then the worktree is removed.

The parent's uncommitted changes are not in the child's worktree (it starts at HEAD).
Outside a git repository the spawn is refused, naming the fix.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm.errors import RlmError


@dataclass
class Isolated:
    repo: Path  # the parent's repository root
    tree: Path  # the child's worktree
    cwd: Path  # the child's kernel's working directory (inside `tree`)
    patch: Path  # where its changes are written


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          timeout=120)
    if check and proc.returncode != 0:
        raise RlmError(f"git {' '.join(args[:2])} failed in {cwd}: "
                       f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def isolate(parent_cwd: Path, child_dir: Path) -> Isolated:
    top = _git(parent_cwd, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise RlmError(f"isolation='worktree' needs the parent's working directory "
                       f"({parent_cwd}) in a git repository: run `git init` there and commit, "
                       "or spawn without isolation")
    repo = Path(top.stdout.strip())
    tree = child_dir / "worktree"
    tree.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "add", "--detach", str(tree), "HEAD")
    rel = Path(parent_cwd).resolve().relative_to(repo.resolve())
    return Isolated(repo=repo, tree=tree, cwd=tree / rel, patch=child_dir / "changes.patch")


def bring_back(iso: Isolated) -> dict[str, Any]:
    """Apply the child's changes to the parent's tree; the outcome, reported to the parent."""
    try:
        _git(iso.tree, "add", "-A")
        files = _git(iso.tree, "diff", "--cached", "--name-only", "HEAD").stdout.split()
        if not files:
            return {"outcome": "skipped", "files": [], "detail": "the child changed no file"}
        iso.patch.write_text(_git(iso.tree, "diff", "--cached", "--binary", "HEAD").stdout)
        applied = _git(iso.repo, "apply", "--whitespace=nowarn", str(iso.patch), check=False)
        if applied.returncode == 0:
            return {"outcome": "applied", "files": files, "patch": str(iso.patch)}
        return {"outcome": "failed", "files": files, "patch": str(iso.patch),
                "detail": (f"the patch does not apply to the parent's tree "
                           f"({applied.stderr.strip()[:300]}); it is kept: apply it by hand "
                           f"with `git apply --3way {iso.patch}`")}
    finally:
        _git(iso.repo, "worktree", "remove", "--force", str(iso.tree), check=False)
