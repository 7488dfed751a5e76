"""One real kernel shared by a module's tests that need a kernel but not a fresh one.

A test takes the fixture `shared_kernel` (conftest makes it known everywhere): it gets its
module's kernel with its namespace as it was when the kernel had
started, so names a test bound are gone and names it rebound are back. Tests whose subject
is a kernel's start, death, restart, first cell or process keep a kernel of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlm.config import Config
from rlm.kernel import Kernel
from tests.isolation import isolate

# kept on the shell object, not in the namespace it restores
BASELINE = "get_ipython()._rlm_tests_baseline = dict(get_ipython().user_ns)"
RESET = ("get_ipython().user_ns.clear() or "
         "get_ipython().user_ns.update(get_ipython()._rlm_tests_baseline)")


@contextmanager
def shared(tmp: Path, **config: Any) -> Iterator[Kernel]:
    """A started kernel on the session dir tmp/"s" with Config(home=tmp, **config), in the
    isolation every test has (tests/isolation.py), its starting namespace recorded."""
    with pytest.MonkeyPatch.context() as mp:
        isolate(tmp, mp)
        with Kernel(tmp / "s", Config(home=tmp, **config)) as k:
            res = k.execute(BASELINE)
            assert res.status == "ok", res.shaped
            yield k


def fresh(k: Kernel) -> Kernel:
    """The kernel's namespace back to what it was when it had started."""
    res = k.execute(RESET)
    assert res.status == "ok", res.shaped
    return k


@pytest.fixture(scope="module")
def module_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    # working in the whole base temp dir: the sandbox shows a kernel its working directory
    # only, and the module's tests hand it files under their own tmp_path
    with shared(tmp_path_factory.mktemp("shared-kernel"),
                kernel_cwd=str(tmp_path_factory.getbasetemp())) as k:
        yield k


@pytest.fixture
def shared_kernel(module_kernel: Kernel) -> Kernel:
    return fresh(module_kernel)
