"""The store of system prompts' model states kept between runs (rlm.llm.local_prefix),
on its own: what is written, what is found, what is passed over. The real model's use of
it is in tests/test_local_model.py (slow)."""

from __future__ import annotations

import os

from rlm.llm.local_prefix import (
    MAX_FILES,
    MIN_TOKENS,
    Prefix,
    PrefixStore,
    _header,
    identity,
)

IDENT = "a" * 64
SYSTEM = list(range(100, 100 + 120))


def test_a_kept_state_is_found_by_the_longest_shared_start_and_only_whole(tmp_path):
    store = PrefixStore(tmp_path / "cache" / "local-prefix")
    assert store.find(IDENT, SYSTEM) == (0, None)  # nothing kept yet, no dir
    store.keep(IDENT, Prefix(SYSTEM, b"state-bytes" * 100))
    store.keep(IDENT, Prefix(SYSTEM[:70], b"shorter" * 10))
    n, got = store.find(IDENT, [*SYSTEM, 7, 8, 9])
    assert n == len(SYSTEM) and got == Prefix(SYSTEM, b"state-bytes" * 100)
    # another prompt sharing 80 tokens: the longer state still shares the most
    assert store.find(IDENT, [*SYSTEM[:80], 1, 2])[0] == 80
    assert store.find(IDENT, SYSTEM[: MIN_TOKENS - 1]) == (0, None)  # too short a start
    assert store.find("b" * 64, SYSTEM) == (0, None)  # another model's
    assert oct(store.root.stat().st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in store.root.iterdir()} == {"0o600"}


def test_a_damaged_state_a_symlink_or_a_short_prefix_is_never_used(tmp_path):
    store = PrefixStore(tmp_path / "kept")
    store.keep(IDENT, Prefix(SYSTEM[: MIN_TOKENS - 1], b"x"))  # not worth a file
    assert not store.root.exists()
    store.keep(IDENT, Prefix(SYSTEM, b"0123456789" * 50))
    (kept,) = store.root.iterdir()
    kept.write_bytes(kept.read_bytes()[:-1] + b"!")  # one byte changed
    assert store.find(IDENT, SYSTEM) == (0, None)
    kept.write_bytes(kept.read_bytes()[:-10])  # torn
    assert store.find(IDENT, SYSTEM) == (0, None)
    kept.unlink()
    elsewhere = tmp_path / "elsewhere.state"
    elsewhere.write_bytes(b"{}\n")
    os.symlink(elsewhere, kept)
    assert store.find(IDENT, SYSTEM) == (0, None)
    linked = PrefixStore(tmp_path / "linked")
    os.symlink(tmp_path / "target", linked.root)
    linked.keep(IDENT, Prefix(SYSTEM, b"y"))  # refused (never written through), silently
    assert not (tmp_path / "target").exists()


def test_at_most_max_files_are_kept_the_least_recently_used_going(tmp_path):
    store = PrefixStore(tmp_path)
    starts = [[k, *SYSTEM] for k in range(MAX_FILES + 2)]
    for i, tokens in enumerate(starts):
        before = set(store.root.iterdir())
        store.keep(IDENT, Prefix(tokens, bytes([i])))
        for p in set(store.root.iterdir()) - before:  # kept at time 1000 + i
            os.utime(p, (1_000 + i, 1_000 + i))
    left = sorted(_header(p)["tokens"] for p in store.root.iterdir())
    assert left == sorted(starts[2:])  # the two least recently used went
    assert store.find(IDENT, starts[-1])[1] == Prefix(starts[-1], bytes([MAX_FILES + 1]))


def test_identity_names_the_model_file_as_it_is_now(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    first = identity(model, 8192, "0.3.9")
    assert first == identity(model, 8192, "0.3.9")
    assert first != identity(model, 4096, "0.3.9") != identity(model, 8192, "0.3.10")
    model.write_bytes(b"other weights")
    assert identity(model, 8192, "0.3.9") != first
