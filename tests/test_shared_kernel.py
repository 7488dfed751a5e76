"""The shared kernel fixture (tests/kernels.py) gives each test the namespace the kernel
started with: what one test binds or rebinds cannot reach the next."""

from __future__ import annotations

from tests.kernels import fresh


def test_fresh_drops_new_names_and_brings_rebound_ones_back(shared_kernel):
    k = shared_kernel
    assert k.execute("leak = [1, 2]\nnp = 'not numpy'\nprint(np)").shaped == "not numpy\n"
    fresh(k)
    assert "NameError" in k.execute("leak").shaped
    assert k.execute("print(np.__name__)").shaped == "numpy\n"
    assert "leak" not in {r["name"] for r in k.list_namespace()["names"]}
