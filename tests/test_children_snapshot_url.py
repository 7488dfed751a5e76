"""A child's snapshots go where its parent's go (`--snapshot-url`): a child spawned from a
parent's cell (`rlm_spawn`, `rlm_query`) runs with its parent's config, so its kernel's
per-variable snapshots land in the same store, under the child's own session id, and
nothing of them on the host's disk under the child's session.

Real kernels (the parent's and the child's), scripted models from script files, the agent
built by the composition root (`SessionRun`); the store is a `file://` URL on this
machine (kernel_ext.stores gives it the local layout: `<url>/<session id>/
manifest.json`), so what each kernel wrote is read back from disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_ext import stores
from rlm import app
from rlm.kernel.state import session_state
from tests.rlmcli import call, rlm, script

pytestmark = pytest.mark.timeout(240)


def session_run(parent: str, child: str, **overrides) -> app.SessionRun:
    options = app.RunOptions(overrides={"model": parent, "sub_model": child, **overrides})
    return app.SessionRun.new("run", "go", options)


def snapshot_names(where: Path) -> set[str]:
    """The variables the snapshot at `where` (a session's folder in the store) holds."""
    manifest, err = stores.open_store(str(where)).read_manifest()
    assert err is None and manifest is not None, (where, err)
    return set(manifest["entries"])


def header(session_dir: Path) -> dict:
    return json.loads((session_dir / "session.jsonl").read_text().splitlines()[0])


SPAWN = ("h = rlm_spawn('keep a value', name='keeper')\n"
         "answer = rlm_gather([h])[0]\nprint(answer)")
QUERY = "answer = rlm_query('keep a value')\nprint(answer)"


@pytest.mark.parametrize("how", [SPAWN, QUERY], ids=["rlm_spawn", "rlm_query"])
def test_a_childs_snapshots_go_to_its_parents_snapshot_url(tmp_path, how):
    store = tmp_path / "store"
    store.mkdir()  # a file:// store is a directory that exists (check_snapshot_url)
    url = f"file://{store}"
    child = script(tmp_path / "child.json", [
        call("kept_by_child = {'n': 7, 'rows': list(range(1000))}"),
        call("final(str(kept_by_child['n']))"),
    ])
    parent = script(tmp_path / "parent.json", [
        call("kept_by_parent = 'p'\n" + how),
        call("final(answer)"),
    ])
    with session_run(parent, child, snapshot_url=url) as run:
        events = run.drive("go")
        assert run.session is not None and run.config is not None
        assert run.config.snapshot_url == url
        parent_dir = run.session.dir
    assert events[-1].final == "7"  # the child ran and answered

    (child_dir,) = (parent_dir / "children").iterdir()
    assert header(child_dir)["parent_session"] == parent_dir.name  # the child's own session
    # one folder per session in the store: the parent's and the child's, by session id
    assert {p.name for p in store.iterdir()} == {parent_dir.name, child_dir.name}
    assert "kept_by_child" in snapshot_names(store / child_dir.name)
    assert "kept_by_parent" not in snapshot_names(store / child_dir.name)
    assert "kept_by_parent" in snapshot_names(store / parent_dir.name)
    assert "kept_by_child" not in snapshot_names(store / parent_dir.name)
    # the child's kernel wrote nothing of its snapshot under its session on the host
    assert not any((child_dir / "snapshot").glob("*"))
    assert not any((parent_dir / "snapshot").glob("*"))

    # the child's session state reads from the store, with the parent's URL
    state = session_state(child_dir, snapshot_url=url)
    assert state["source"] == "snapshot", state
    by_name = {n["name"]: n for n in state["names"]}
    assert by_name["kept_by_child"]["restorable"] and "kept_by_parent" not in by_name
    # and `rlm state` on the child's directory finds that store by itself (the child
    # records no options: its root's URL is used)
    shown = rlm("state", str(child_dir), cwd=tmp_path).stdout
    assert "kept_by_child" in shown and "kept_by_parent" not in shown, shown
