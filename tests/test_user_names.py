"""The user's names kept between cells (kernel_ext.user_names): each scan reports what the
namespace's user names changed since the last one, exactly as asking afresh would."""

from __future__ import annotations

import random

from kernel_ext.namespace import is_user_value
from kernel_ext.user_names import UserNames


def _afresh(ns: dict, hidden: dict, before: dict[str, int]) -> tuple[set[str], set[str], dict]:
    now = {k: id(v) for k, v in ns.items() if is_user_value(k, v, hidden)}
    return {k for k, i in now.items() if before.get(k) != i}, before.keys() - now.keys(), now


def test_every_scan_reports_what_asking_afresh_reports():
    rng = random.Random(32)
    hidden = {"get_ipython": print, "hid": "kernel's"}
    ns: dict = {"get_ipython": print, "hid": "kernel's", "In": [], "_": None}
    names, before = UserNames(), {}
    pool = [f"v{i}" for i in range(12)]
    for step in range(400):
        for _ in range(rng.randint(0, 4)):
            op, k = rng.randrange(6), rng.choice(pool)
            if op == 0:
                ns[k] = [step]  # a new object
            elif op == 1 and ns:
                ns[k] = ns[rng.choice(list(ns))]  # an alias (or a hidden or internal object)
            elif op == 2:
                ns.pop(k, None)
            elif op == 3:
                ns[f"_i{step}"] = f"cell {step}"  # IPython's history: never the user's
                ns["_"] = ns.get(k)
            elif op == 4:
                ns["hid"] = rng.choice(["kernel's", hidden["hid"], [step]])  # rebound by the user, or not
            else:
                ns[k] = rng.choice([1, True, None, "s"])  # shared immutables
        changed, deleted = names.scan(dict(ns), hidden)
        want_changed, want_deleted, before = _afresh(ns, hidden, before)
        assert (changed, deleted) == (want_changed, want_deleted), step
        assert names.ids == before
        for k in before:
            assert names.sharing({k}) == {m for m, i in before.items() if i == before[k]}


def test_what_was_not_saved_is_reported_again():
    ns = {"a": [1], "b": [2], "gone": [3]}
    names = UserNames()
    names.scan(dict(ns), {})
    ns["a"] = [4]
    del ns["gone"]
    assert names.scan(dict(ns), {}) == ({"a"}, {"gone"})
    names.mark_dirty({"a", "gone"})  # the write failed
    assert names.scan(dict(ns), {}) == ({"a"}, {"gone"})
    assert names.scan(dict(ns), {}) == (set(), set())


def test_a_restored_name_is_known_bound():
    value = [1, 2]
    names = UserNames()
    names.bind("r", value)
    assert names.scan({"r": value}, {}) == (set(), set())
    assert names.sharing({"r"}) == {"r"}
