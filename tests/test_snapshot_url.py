"""Snapshots at a URL (`--snapshot-url`): the object-store layout of kernel_ext.object_store.

In-process tests use fsspec's `memory://` store (no server); the end-to-end ones run real
kernels and the `rlm` CLI against moto's standalone S3 server, started here on 127.0.0.1.
Nothing leaves the machine: the endpoint is set through AWS_ENDPOINT_URL and instance
metadata lookups are disabled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from bench.bench_snapshot_s3 import moto_server
from kernel_ext import object_store, snapshot
from kernel_ext import stores as store
from rlm.config import Config, snapshot_url_problem
from rlm.errors import ConfigError
from rlm.kernel import Kernel
from rlm.kernel.state import check_snapshot_url, session_state
from tests import rlmcli
from tests.rlmcli import call
from tests.snapshot_shell import new_kernel, run

pytestmark = pytest.mark.timeout(300)

KEY_ID = "AKIAMOTOTESTKEY12345"
SECRET = "moto-secret-Kq9vZ2xLw8RtY5pN3mB7cD1fG6hJ4"  # must appear in no byte under RLM_HOME


# ------------------------------------------------------------------ in-process, memory://
@pytest.fixture
def mem_shell(shell, monkeypatch):
    """The snapshot shell, snapshots going to a fresh memory:// location."""
    url = f"memory://bucket/{uuid.uuid4().hex}/session"
    monkeypatch.setenv("RLM_SNAPSHOT_URL", url)
    snapshot.uninstall(shell)
    snapshot.install(shell)
    shell.rlm_url = url
    yield shell
    st = store.open_store(url)
    st.fs.rm(st.root, recursive=True)


def objects(url: str) -> list[str]:
    st = store.open_store(url)
    return sorted(st._names())


def test_memory_store_round_trip_and_layout(mem_shell, tmp_path):
    run(mem_shell, "a = list(range(10))\nbig = bytes(3 * 1024 * 1024)")
    run(mem_shell, "c = {'k': 1}")
    names = objects(mem_shell.rlm_url)
    assert "manifest-00000002.json" in names and "g00000001-v1.bin" in names
    assert not any((tmp_path / "session" / "snapshot").iterdir())  # nothing on the local disk
    rep = new_kernel(mem_shell)
    assert rep["restored"] == ["a", "big", "c"] and rep["failed"] == []
    assert mem_shell.user_ns["big"] == bytes(3 * 1024 * 1024) and mem_shell.user_ns["a"][9] == 9


def test_reader_takes_the_newest_complete_manifest(mem_shell):
    run(mem_shell, "a = 1")
    st = store.open_store(mem_shell.rlm_url)
    # a later generation that never finished: data without a manifest, a torn manifest,
    # and a manifest object without the completeness marker
    st.fs.pipe_file(st._key("g00000007-v1.bin"), b"x" * 100)
    st.fs.pipe_file(st._key("manifest-00000008.json"), b'{"version": 2, "generation": 8, "ent')
    st.fs.pipe_file(st._key("manifest-00000009.json"), json.dumps(
        {"version": 2, "generation": 9, "entries": {"zz": {"kind": "pickle", "group": "9.0"}},
         "groups": {}}).encode())
    rep = new_kernel(mem_shell)
    assert rep["restored"] == ["a"] and rep["failed"] == []
    run(mem_shell, "b = 2")  # the next generation is above every object seen
    names = objects(mem_shell.rlm_url)
    assert "manifest-00000010.json" in names
    assert "g00000007-v1.bin" not in names  # unreferenced, older: collected
    assert {"manifest-00000008.json", "manifest-00000009.json"} <= set(names)  # kept: unreadable
    assert new_kernel(mem_shell)["restored"] == ["a", "b"]


def test_garbage_collection_keeps_the_previous_generation(mem_shell):
    for i in range(4):
        run(mem_shell, f"big = bytes([{i}]) * (2 * 1024 * 1024)")
    names = objects(mem_shell.rlm_url)
    manifests = [n for n in names if n.startswith("manifest-")]
    data = [n for n in names if n.endswith(".bin")]
    assert manifests == ["manifest-00000003.json", "manifest-00000004.json"]
    assert data == ["g00000003-v1.bin", "g00000004-v1.bin"]


def test_unpicklable_names_are_rebuilt_from_cell_records_in_the_store(mem_shell):
    run(mem_shell, "import sqlite3\nn = 5\nconn = sqlite3.connect(':memory:')")
    cells = store.open_store(mem_shell.rlm_url)._names(object_store.CELLS_DIR)
    assert cells == ["c00000001.json"]
    new_kernel(mem_shell)
    out = json.loads(snapshot.rebuild_json(mem_shell))
    assert "conn" in out["rebuilt"] and mem_shell.user_ns["n"] == 5
    mem_shell.user_ns["conn"].close()


def test_a_file_url_gets_the_local_layout_under_the_session_id(shell, tmp_path, monkeypatch):
    where = tmp_path / "shared"
    monkeypatch.setenv("RLM_SNAPSHOT_URL", f"file://{where}/sess1")
    snapshot.uninstall(shell)
    snapshot.install(shell)
    run(shell, "a = [1, 2, 3]")
    assert (where / "sess1" / "manifest.json").is_file()  # fsync + rename swap, as on disk
    assert new_kernel(shell)["restored"] == ["a"]


def test_a_url_from_the_config_file_is_pinned_to_the_session(tmp_path, monkeypatch):
    from rlm import app

    (tmp_path / "s.json").write_text(json.dumps(["done"]))
    (tmp_path / "rlm.toml").write_text(f'snapshot_url = "file://{tmp_path}/snaps"\n')
    from rlm import trust

    trust.allow_file(tmp_path / "rlm.toml")  # a project file sets it only with consent
    with app.SessionRun.new("run", "t", app.RunOptions(
            overrides={"model": f"script:{tmp_path}/s.json"}), build=False) as run:
        assert run.session is not None
        recorded = app.recorded_options(run.session)
    (tmp_path / "rlm.toml").unlink()  # a later config without it: the session keeps its URL
    assert recorded is not None and recorded.overrides["snapshot_url"] == f"file://{tmp_path}/snaps"
    with app.SessionRun.open("resume", run.session.id, build=False) as reopened:
        assert reopened.config is not None
        assert reopened.config.snapshot_url == f"file://{tmp_path}/snaps"


# ---------------------------------------------------------------- config and errors
@pytest.mark.parametrize("url, words", [
    ("s3://AKIA:secret@bucket/p", "credentials do not belong in the URL"),
    ("bucket/prefix", "is not a URL like s3://"),
    ("s3://bucket/p?key=1", "no ?query"),
])
def test_bad_snapshot_urls_are_refused_with_one_line(url, words):
    assert words in (snapshot_url_problem(url) or "")
    with pytest.raises(ConfigError, match="--snapshot-url"):
        Config(snapshot_url=url)


def test_a_url_with_credentials_never_reaches_the_session_log(tmp_path):
    proc = rlmcli.rlm("run", "hi", "--model", "script:x.json",
                      "--snapshot-url", "s3://AKIAXX:hunter2hunter2@bucket/p", cwd=tmp_path)
    assert proc.returncode != 0 and "credentials do not belong in the URL" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    home = Path(os.environ["RLM_HOME"])
    assert not home.exists() or b"hunter2" not in b"".join(
        p.read_bytes() for p in home.rglob("*") if p.is_file())


def test_missing_backend_says_what_to_install():
    with pytest.raises(ConfigError, match=r"gcsfs is not installed where this runs: pip install gcsfs"):
        check_snapshot_url("gs://bucket/prefix")


# ------------------------------------------------------------------ moto S3 server
@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory):
    """A moto standalone S3 server on a free 127.0.0.1 port, ready when its socket accepts
    (bench/bench_snapshot_s3.py starts it the same way)."""
    pytest.importorskip("s3fs")
    with moto_server(str(tmp_path_factory.mktemp("moto") / "moto.log")) as endpoint:
        yield endpoint


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    """AWS env pointing at the moto server (inherited by kernels and CLI subprocesses), a
    fresh bucket; returns an s3fs filesystem and the bucket's name."""
    import s3fs

    for k, v in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": KEY_ID,
                 "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    bucket = f"b{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    return fs, bucket


def no_credentials_under(home: Path) -> None:
    for p in home.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            assert SECRET.encode() not in data and KEY_ID.encode() not in data, p


def rlm(*args: str) -> subprocess.CompletedProcess:
    return rlmcli.rlm(*args, cwd=Path.cwd(), check=True, timeout=280)


def test_crash_restores_from_the_bucket_and_state_reads_it(s3, tmp_path):
    fs, bucket = s3
    script = tmp_path / "s.json"
    (Path.cwd() / "x.txt").write_text("41")  # the task's data: a verified answer reads it
    script.write_text(json.dumps([
        call("x = int(open('x.txt').read())\nrows = list(range(100_000))\n"
             "blob = bytes(range(256)) * 8192"),
        call("import os\nos._exit(1)"),
        call("final(x + 1 + len(rows) - 100_000 + (blob == bytes(range(256)) * 8192) - 1)"),
    ]))
    out = rlm("run", "go", "--model", f"script:{script}", "--snapshot-url",
              f"s3://{bucket}/runs", "--json")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["final"] == "42", res
    sid, log = res["session_id"], Path(res["session_path"])
    entries = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    restarts = [e["cell"]["restart"] for e in entries
                if e["type"] == "message" and (e.get("cell") or {}).get("restart")]
    assert len(restarts) == 1 and {"x", "rows", "blob"} <= set(restarts[0]["restored"])
    told = [e["message"]["content"] for e in entries if (e.get("cell") or {}).get("restart")]
    assert "restored 3 name(s)" in told[0]  # the model is told what came back
    session_dir = log.parent
    assert not any((session_dir / "snapshot").glob("*"))  # the host's disk holds no snapshot
    keys = fs.ls(f"{bucket}/runs/{sid}", detail=False)
    assert any(k.rsplit("/", 1)[-1].startswith("manifest-") for k in keys)
    assert any(k.endswith("-v1.bin") for k in keys)  # blob (2 MiB) is an object of its own

    state = json.loads(rlm("state", sid, "--json").stdout)
    assert state["source"] == "snapshot" and f"s3://{bucket}/runs/{sid}" in state["detail"]
    by_name = {n["name"]: n for n in state["names"]}
    assert by_name["x"]["restorable"] and by_name["rows"]["bytes"] > 100_000

    # resume without the flag: the URL recorded with the run options is used again
    again = tmp_path / "again.json"
    again.write_text(json.dumps([call("final(x)")]))
    res2 = json.loads(rlm("resume", sid, "x?", "--model", f"script:{again}", "--json")
                      .stdout.strip().splitlines()[-1])
    assert res2["final"] == "41"
    entries = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    on_start = [e for e in entries if e.get("custom_type") == "kernel_restored"]
    assert on_start and {"x", "rows", "blob"} <= set(on_start[-1]["data"]["restored"])
    assert not any((session_dir / "snapshot").glob("*"))
    no_credentials_under(Path(os.environ["RLM_HOME"]))


BLOCKER = """
import threading
class Blocker(list):
    def __reduce_ex__(self, protocol):
        open({marker!r}, 'w').close()   # the snapshot is writing this generation now
        threading.Event().wait()        # ... and never finishes it
big = bytes(2 * 1024 * 1024)            # smaller: written to the bucket first
stuck = Blocker([bytes(8 * 1024 * 1024)])
"""


def test_a_kill_during_a_snapshot_leaves_the_previous_manifest(s3, tmp_path):
    fs, bucket = s3
    url = f"s3://{bucket}/k"
    session = tmp_path / "sess"
    marker = tmp_path / "writing"
    with Kernel(session, Config(snapshot_url=url, interrupt_grace_s=1.0)) as k:
        assert k.execute("a = 'kept'").status == "ok"
        prefix = f"{bucket}/k/{session.name}"
        assert [p.rsplit("/", 1)[-1] for p in fs.ls(prefix, detail=False, refresh=True)
                if "manifest-" in p] == ["manifest-00000001.json"]

        def kill_when_writing() -> None:
            while not marker.exists():
                threading.Event().wait(0.01)
            os.kill(k.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_writing)
        killer.start()
        res = k.execute(BLOCKER.format(marker=str(marker)), timeout=120)
        killer.join()
        assert res.status == "died" and res.restart is not None
        assert res.restart.restored == ["a"]
        names = [p.rsplit("/", 1)[-1] for p in fs.ls(prefix, detail=False, refresh=True)]
        assert "g00000002-v1.bin" in names  # the new generation was half written ...
        assert "manifest-00000002.json" not in names  # ... and never became current
        assert k.execute("print(a)").shaped == "kept\n"
        assert k.execute("b = 2").status == "ok"
        names = [p.rsplit("/", 1)[-1] for p in fs.ls(prefix, detail=False, refresh=True)]
        assert "manifest-00000003.json" in names and "g00000002-v1.bin" not in names
    state = session_state(session, snapshot_url=url)
    assert state["source"] == "snapshot"
    assert {n["name"] for n in state["names"]} >= {"a", "b"}
    assert not (session / "snapshot").exists()
    no_credentials_under(session)


def test_missing_credentials_say_what_to_set(s3, monkeypatch):
    _, bucket = s3
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError, match="no credentials .* set AWS_ACCESS_KEY_ID and "
                                          "AWS_SECRET_ACCESS_KEY"):
        check_snapshot_url(f"s3://{bucket}/nocreds-{uuid.uuid4().hex}")


def test_missing_bucket_says_create_it(s3):
    with pytest.raises(ConfigError, match="does not exist .*create it first"):
        check_snapshot_url(f"s3://nobucket{uuid.uuid4().hex[:8]}/p")


def test_a_kernel_without_credentials_says_so_and_writes_nothing(s3, shell, monkeypatch):
    fs, bucket = s3
    run(shell, "a = 1")  # a local snapshot first: the shell fixture's dir
    monkeypatch.setenv("RLM_SNAPSHOT_URL", f"s3://{bucket}/nocreds/s")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    rep = new_kernel(shell)
    assert rep["restored"] == [] and "no credentials" in rep["failed"][0]["reason"]
    assert "AWS_ACCESS_KEY_ID" in rep["failed"][0]["reason"]
    res = shell.run_cell("b = 2")
    assert res.success  # the cell is not broken by its snapshot failing
    assert "no credentials" in (snapshot._get(shell).last_error or "")
    assert not fs.exists(f"{bucket}/nocreds")


def test_a_credential_copied_into_a_variable_is_masked_in_the_bucket(s3, tmp_path):
    """Before: the host scrubbed secrets out of every local file, but a snapshot at a URL
    kept a pickled credential in cleartext in the bucket (issue 17)."""
    fs, bucket = s3
    k = Kernel(tmp_path / "s", Config(home=tmp_path, snapshot_url=f"s3://{bucket}/r"))
    try:
        k.start()
        res = k.execute("import os\nleaked = os.environ['AWS_SECRET_ACCESS_KEY']\n"
                        "kept = [1, 2, 3]\nprint(len(leaked))")
        assert res.ok and res.shaped.strip() == str(len(SECRET))
        keys = [p for p in fs.find(f"{bucket}/r") if not p.endswith("/")]
        assert any("-small.bin" in p for p in keys)
        blobs = {p: fs.cat_file(p) for p in keys}
        for piece in (SECRET, SECRET[:16], SECRET[-16:]):
            assert not [p for p, b in blobs.items() if piece.encode() in b], piece
        k.restart("test: restore from the scrubbed bucket")  # the pickles still load
        assert k.execute("print(kept, len(leaked), set(leaked))").shaped.strip() == \
            f"[1, 2, 3] {len(SECRET)} {{'*'}}"
    finally:
        k.stop()
    assert json.loads((tmp_path / "s" / ".scrubbed-objects").read_text())["generation"] >= 1
