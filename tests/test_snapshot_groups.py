"""Co-variable groups (in-process, fast): names that share objects are stored together and
come back sharing them; a mutation through any name or through a container re-snapshots
the group; version-1 manifests still restore."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_ext import snapshot
from kernel_ext.namespace import co_groups, reachable_ids
from kernel_ext.reach_index import ReachIndex
from tests.snapshot_shell import (  # the `shell` fixture comes from conftest
    manifest,
    new_kernel,
    run,
)


def test_reach_and_groups_are_union_find_over_shared_objects():
    a = [1]
    ns = {"a": a, "b": a, "c": {"x": a}, "n": 5, "s": "text", "other": [1], "t": (1, 2)}
    reach = {k: reachable_ids(v, ns) for k, v in ns.items()}
    assert reach["n"].ids == set() and reach["s"].ids == set()  # atoms are no identity
    assert co_groups(reach) == [["a", "b", "c"], ["n"], ["other"], ["s"], ["t"]]


_POOL = [[i] for i in range(6)]  # objects names may share


@given(st.lists(st.tuples(st.sampled_from("abcdefg"), st.lists(st.integers(0, 5), max_size=3)),
                min_size=1, max_size=25))
@settings(max_examples=150, deadline=None)
def test_the_index_keeps_the_groups_union_find_gives_as_names_are_rebound(steps):
    """Names rebound one after another (each to a list holding some shared objects, or to
    nothing shared): after each step, the groups of any names equal co_groups' groups."""
    ns: dict[str, object] = {}
    index = ReachIndex()
    for name, picks in steps:
        ns[name] = [_POOL[i] for i in picks]
        index.update(name, ns[name], ns)
        reach = {k: reachable_ids(v, ns) for k, v in ns.items()}
        whole = co_groups(reach)
        for k in ns:
            assert index.groups_of([k]) == [g for g in whole if k in g]
        assert index.groups_of(ns) == whole
    for name in list(ns)[::2]:
        del ns[name]
    index.keep_only(ns)
    if ns:
        assert index.groups_of(ns) == co_groups({k: reachable_ids(v, ns) for k, v in ns.items()})


def test_aliases_container_and_cycle_keep_identity(shell):
    run(shell, "a = [1]\nb = a\nc = {'x': a}\nring = []\nring.append(ring)\nholder = {'r': ring}\n"
               "alone = [7]")
    groups = {tuple(g["members"]) for g in manifest(shell)["groups"].values()}
    assert ("a", "b", "c") in groups and ("holder", "ring") in groups and ("alone",) in groups
    report = new_kernel(shell)
    assert report["failed"] == [] and {"a", "b", "c", "ring", "holder"} <= set(report["restored"])
    run(shell, "assert b is a and c['x'] is a\na.append(2)\nassert b == [1, 2] and c['x'] == [1, 2]\n"
               "assert ring[0] is ring and holder['r'] is ring")


def test_mutation_through_a_container_member_is_snapshotted(shell):
    run(shell, "lst = [1]\nd = {'k': lst}")
    run(shell, "lst.append(2)")  # the cell never names d
    report = new_kernel(shell)
    assert report["failed"] == []
    assert shell.user_ns["d"] == {"k": [1, 2]} and shell.user_ns["d"]["k"] is shell.user_ns["lst"]


def test_mutation_through_the_container_reaches_the_member(shell):
    run(shell, "lst = [1]\nd = {'k': lst}")
    run(shell, "d['k'].append(3)")  # the cell never names lst
    new_kernel(shell)
    assert shell.user_ns["lst"] == [1, 3] and shell.user_ns["d"]["k"] is shell.user_ns["lst"]


def test_numpy_views_come_back_as_views(shell):
    pytest.importorskip("numpy")
    run(shell, "import numpy as np\narr = np.arange(12.0).reshape(3, 4)\nrow = arr[1]\n"
               "rev = arr[::-1, ::2]\ncopy = arr.copy()")
    new_kernel(shell)
    run(shell, "assert np.shares_memory(row, arr) and np.shares_memory(rev, arr)\n"
               "assert not np.shares_memory(copy, arr)\n"
               "arr[1, 0] = -5.0\nassert row[0] == -5.0 and rev[1, 0] == -5.0 and copy[1, 0] == 4.0\n"
               "assert rev.tolist() == arr[::-1, ::2].tolist()")


def test_dataframe_alias_dict_and_column_view(shell):
    pytest.importorskip("pandas")
    run(shell, "import numpy as np, pandas as pd\n"
               "df = pd.DataFrame({'a': np.arange(5.0), 'b': np.arange(5.0) * 2})\n"
               "df2 = df\nbox = {'frame': df}\ncol = df['a']")
    shared_before = shell.run_cell("np.shares_memory(col.values, df['a'].values)").result
    new_kernel(shell)
    run(shell, "assert df2 is df and box['frame'] is df\n"
               "df.loc[0, 'b'] = 99.0\nassert df2.loc[0, 'b'] == 99.0")
    assert shell.run_cell("np.shares_memory(col.values, df['a'].values)").result == shared_before


def test_unpicklable_member_splits_the_group_and_says_so(shell):
    run(shell, "gen = (i for i in range(3))\nkeep = [1]\nboth = {'g': gen, 'k': keep}")
    entries = manifest(shell)["entries"]
    assert entries["gen"]["kind"] == "skipped" and entries["both"]["kind"] == "skipped"
    assert entries["keep"]["kind"] == "pickle" and "identity between them not kept" in entries["keep"]["split"]
    report = new_kernel(shell)
    assert "keep" in report["restored"] and shell.user_ns["keep"] == [1]


def test_version_1_manifest_is_migrated_on_load(shell):
    run(shell, "x = [1, 2]\ny = {'k': 'v'}")
    m = manifest(shell)
    v1_entries = {}
    for name, e in m["entries"].items():
        g = m["groups"][e.pop("group")]
        assert g["single"]
        e.update({k: g[k] for k in ("file", "offset", "length", "parts")})
        v1_entries[name] = e
    v1 = {k: v for k, v in m.items() if k != "groups"} | {"version": 1, "entries": v1_entries}
    with open(os.path.join(snapshot._get(shell).path, "manifest.json"), "w") as fh:
        json.dump(v1, fh)
    report = new_kernel(shell)
    assert report["restored"] == ["x", "y"] and report["failed"] == []
    run(shell, "x.append(3)")
    assert manifest(shell)["version"] == 2 and shell.user_ns["y"] == {"k": "v"}
    new_kernel(shell)
    assert shell.user_ns["x"] == [1, 2, 3] and shell.user_ns["y"] == {"k": "v"}


def test_rebinding_a_member_leaves_the_others_restorable(shell):
    run(shell, "a = [1]\nb = a")
    run(shell, "b = 'other'")
    run(shell, "a.append(2)")
    new_kernel(shell)
    assert shell.user_ns["a"] == [1, 2] and shell.user_ns["b"] == "other"


def test_unpicklable_members_leave_the_rest_of_the_group_together(shell):
    run(shell, "gen = (i for i in range(3))\na = [1]\nb = a\nholder = {'g': gen, 'a': a}")
    entries = manifest(shell)["entries"]
    assert entries["holder"]["kind"] == "skipped" and entries["gen"]["kind"] == "skipped"
    assert entries["a"]["group"] == entries["b"]["group"] and "split" not in entries["a"]
    new_kernel(shell)
    assert shell.user_ns["b"] is shell.user_ns["a"]


def test_shared_singletons_do_not_chain_unrelated_names(shell):
    pd = pytest.importorskip("pandas")
    assert pd is not None
    run(shell, "import pandas as pd, logging, functools\n"
               "f1 = pd.DataFrame({'a': [1.0]})\nf2 = pd.DataFrame({'a': [2.0]})\n"
               "na_list = [pd.NA]\nlog = logging.getLogger('x')\np1 = functools.partial(int, base=2)\n"
               "p2 = functools.partial(float)")
    groups = [g["members"] for g in manifest(shell)["groups"].values()]
    assert all(len(m) == 1 for m in groups), groups


def test_kept_groups_and_their_bytes_follow_every_cell(shell):
    """The groups a generation keeps are found from the names it writes again, not from
    every entry: after each cell (aliases made and broken, a group split, names deleted)
    every stored group is named by an entry, every entry's group is stored, and the bytes
    counted are the stored groups' bytes; what is on disk says the same."""
    cells = ["a = [1]\nb = a\nc = {'x': a}", "big = list(range(5000))", "b = [2]",
             "c = None", "del a", "d = {'k': big}\ne = big", "del big", "e = 5\nd = 6",
             "f = [f'{i}' for i in range(50)]\ng = f", "del f, g, b"]
    for code in cells:
        run(shell, code)
        snap = snapshot._get(shell)
        named = {e["group"] for e in snap.entries.values() if "group" in e}
        assert named == set(snap.groups), code
        assert snap.used == sum(int(g.get("bytes", 0)) for g in snap.groups.values()), code
        on_disk = manifest(shell)
        assert on_disk["entries"] == snap.entries and on_disk["groups"] == snap.groups, code


def test_a_new_name_sharing_with_a_restored_one_is_stored_with_it(shell):
    """Restored names are in no reach index until a cell names them: a new name that
    shares one of their objects must still find them (else the two come back apart)."""
    run(shell, "d = {'k': [1, 2]}")
    assert new_kernel(shell)["failed"] == []
    run(shell, "import sys\nn = [sys.modules[__name__].d['k']]")  # the cell names no `d`
    new_kernel(shell)
    assert shell.user_ns["n"][0] is shell.user_ns["d"]["k"]
