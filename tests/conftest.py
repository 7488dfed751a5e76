"""Shared fixtures. Every test gets its own RLM_HOME, model cache and user (XDG)
directories, and no provider keys: no test touches the real ~/.local/share/rlm or
~/.cache/rlm. Tests that need the real offline model take `local_model`: one cache for
the whole test session, so the 1.1 GB model is joined once per run, not once per test."""

from __future__ import annotations

import os
import shutil

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.isolation import isolate  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    home = isolate(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    yield home


@pytest.fixture(scope="session")
def joined_model_cache(tmp_path_factory):
    """A model cache holding the joined, verified offline model, shared by the whole test
    session (removed after: 1.1 GB)."""
    from rlm.llm.modelfile import ensure_model

    cache = tmp_path_factory.mktemp("model-cache")
    ensure_model(cache=cache)
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture
def local_model(joined_model_cache, monkeypatch):
    """Point RLM_MODEL_CACHE (this process and the subprocesses it starts) at the shared
    cache; returns the model file."""
    from rlm.llm.modelfile import MODEL_FILENAME

    monkeypatch.setenv("RLM_MODEL_CACHE", str(joined_model_cache))
    return joined_model_cache / MODEL_FILENAME


# What puts a test in the slow tier (`pytest -m slow`; plain `pytest` runs the rest): the
# real offline model, a kernel gateway or an object-store server started for it. A test
# asking for one of these fixtures is marked here, so a new one cannot slip into the fast
# tier; the soak and the other long tests carry `@pytest.mark.slow` themselves.
SLOW_FIXTURES = frozenset({"local_model", "joined_model_cache", "gateway", "s3"})


def pytest_xdist_auto_num_workers(config):
    """`-n auto` for the fast tier: one worker and a half per core. Its tests spend about a
    quarter of their time waiting on kernels and subprocesses (measured: 1.44 of 2 cores
    busy with 2 workers), so a third worker on 2 cores fills that. The slow tier keeps one
    per core: the offline model and the soak want theirs."""
    cores = os.cpu_count() or 1
    return max(2, cores * 3 // 2) if config.getoption("markexpr") == "not slow" else cores


def pytest_collection_modifyitems(items):
    """Every test on the real offline model runs on one xdist worker (`--dist loadgroup`
    in pyproject.toml): the 1.1 GB model is joined once per run, and two llama.cpp
    generations never compete for the same 2 cores. A test that needs one of
    SLOW_FIXTURES is in the slow tier."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "local_model" in fixtures:
            item.add_marker(pytest.mark.xdist_group("local_model"))
        if fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)


# one real kernel per module, its namespace fresh for each test (tests/kernels.py); the
# in-process IPython shell with snapshots installed (tests/snapshot_shell.py)
from tests.kernels import module_kernel, shared_kernel  # noqa: E402,F401
from tests.snapshot_shell import shell  # noqa: E402,F401
