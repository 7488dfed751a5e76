"""Tests run as another user import what they need from paths that user can read
(issue 40 item 13: from a clone under a 0700 directory, tests that handed the clone's
path to nobody failed with `No module named 'rlm'`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from as_nobody import DROP_PRIVILEGES, TESTS, as_nobody, reachable, readable


def test_only_as_nobody_drops_privileges():
    """Every test that runs something as another user goes through tests/as_nobody.py,
    which hands that user readable mirrors instead of this checkout's paths."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name == "as_nobody.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in DROP_PRIVILEGES:
                offenders.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert offenders == []


def test_a_package_under_a_private_directory_is_imported_by_nobody(tmp_path):
    """A package under a 0700 directory (a clone in root's home) is importable by nobody
    through its mirror; the original stays private."""
    private = tmp_path / "private"
    pkg = private / "clone" / "probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 'imported as ' + __import__('getpass').getuser()\n")
    os.chmod(private, 0o700)
    assert not reachable(private / "clone")
    mirror = readable(private / "clone")
    assert mirror != (private / "clone").resolve() and reachable(mirror)
    argv = as_nobody([sys.executable, "-c", "import probe_pkg; print(probe_pkg.VALUE)"])
    out = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(mirror)}, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "imported as nobody", out.stderr[-2000:]
    assert oct(os.stat(private).st_mode & 0o777) == "0o700"
    assert Path(mirror, "probe_pkg", "__init__.py").samefile(pkg / "__init__.py")  # linked
