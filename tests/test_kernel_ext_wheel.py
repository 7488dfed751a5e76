"""The rlm-kernel-ext wheel (packaging/kernel-ext), installed where rlm is not, serves
rlm's kernel: built offline, installed into a fresh venv that holds only kernel_ext's
dependencies (no rlm), then driven by the host: start, cells, snapshot, restart, restore.
This is what a remote kernel's image gets (`pip install rlm-kernel-ext==<version>`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from rlm import __version__
from rlm.config import Config
from rlm.kernel import Kernel

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("kext")
    # built from a copy: setuptools writes build/ and an .egg-info into the tree it builds,
    # so building in the checkout wrote there, and two runs at once could share them
    src = tmp / "src"
    (src / "packaging" / "kernel-ext").mkdir(parents=True)
    shutil.copy(ROOT / "packaging" / "kernel-ext" / "pyproject.toml", src / "packaging" / "kernel-ext")
    shutil.copytree(ROOT / "kernel_ext", src / "kernel_ext",
                    ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                            "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
                            str(src / "packaging" / "kernel-ext")], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("rlm_kernel_ext-*.whl")
    venv.EnvBuilder(with_pip=False).create(tmp / "v")
    python = tmp / "v" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    # kernel_ext's dependencies (ipykernel, dill) from this environment; a path line in a
    # .pth does not run that directory's own .pth files, so rlm's editable install is not seen
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    return python, wheel


def test_the_wheel_holds_every_kernel_ext_module_and_nothing_of_the_host(wheel_env):
    _, wheel = wheel_env
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {f"kernel_ext/{p.name}" for p in (ROOT / "kernel_ext").glob("*.py")}
    assert modules <= names
    assert not [n for n in names if n.startswith("rlm/")]
    assert f"rlm_kernel_ext-{__version__}.dist-info/METADATA" in names


def test_installed_alone_it_imports_without_rlm_and_reports_our_version(wheel_env, tmp_path):
    python, _ = wheel_env
    code = ("import json, kernel_ext, importlib.util\n"
            "print(json.dumps([json.loads(kernel_ext.handshake())['version'], kernel_ext.__file__,"
            " importlib.util.find_spec('rlm') is None]))")
    out = subprocess.run([str(python), "-c", code], cwd=tmp_path, check=True,
                         capture_output=True, text=True).stdout
    version, where, no_rlm = __import__("json").loads(out)
    assert version == __version__ and str(python.parents[1]) in where and no_rlm


def test_the_host_drives_a_kernel_that_has_only_the_wheel(wheel_env, tmp_path, monkeypatch):
    import rlm.kernel.runtime as runtime

    python, _ = wheel_env
    # as on a remote image: the host's own kernel_ext is not on the kernel's path
    monkeypatch.setattr(runtime, "_KERNEL_EXT_ROOT", str(tmp_path / "nothing-here"))
    k = Kernel(tmp_path / "s", Config(home=tmp_path, kernel_python=str(python)))
    try:
        k.start()
        where = k.execute("import kernel_ext\nprint(kernel_ext.__file__)").shaped
        assert str(python.parents[1]) in where
        assert k.execute("rows = {'North': [3, 4], 'South': [5]}").ok
        k.snapshot_now()
        report = k.restart("test: a new kernel from the same image")
        assert "rows" in report.restored
        assert k.execute("sum(map(sum, rows.values()))").shaped == "12\n"
    finally:
        k.stop()
