"""`rlm run TASK --live NB.ipynb` through Jupyter's real-time collaboration (issue 61,
part 2).

A real Jupyter server with the collaboration extension (jupyter-server-ydoc), started here
on 127.0.0.1 with its runtime, config and data dirs in tmp (so rlm's discovery finds this
server only), and a second shared-document client standing in for JupyterLab (`Peer`:
pycrdt's Provider and a YNotebook over the `websocket-client` library on a thread of its
own, written apart from rlm's client so the two do not share a bug). The run is the
user's, as in tests/test_live_notebook.py: `python -m rlm run ... --live NB` in a
subprocess whose first cell waits for a file the test creates once it has seen the mid-run
state; every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

pytest.importorskip("pycrdt", reason="the live extra's pycrdt: pip install -e '.[live]'")
pytest.importorskip("jupyter_ydoc", reason="the live extra's jupyter-ydoc: pip install -e '.[live]'")
pytest.importorskip("jupyter_server_ydoc",
                    reason="the test server's collaboration extension (jupyter-server-ydoc, dev)")
pytest.importorskip("websocket", reason="websocket-client (with jupyter_server), for the peer")

import websocket  # noqa: E402
from jupyter_ydoc import YNotebook  # noqa: E402
from pycrdt import Doc, Provider  # noqa: E402

from rlm.notebook.collab import CollabNotebook, server_for  # noqa: E402
from rlm.notebook.live import LIVE, fingerprint, plan  # noqa: E402
from tests.rlmcli import ANSWERED, call, script  # noqa: E402

TOKEN = "collab-test-token-5c1f0e9d8b7a6"
WAIT = ("import os, time\nprint('started', flush=True)\n"
        "while not os.path.exists('go'):\n    time.sleep(0.02)\nprint('done')")
REPLIES = [call(WAIT, "First I wait for the data."),
           call("x = 6 * 7\nprint(x)"),
           {"content": "FINAL(42)"}]
DEADLINE_S = 120  # how long a mid-run state may take to appear before the test fails


# ---------------------------------------------------------------- the server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _jupyter_env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and k not in ("RLM_JUPYTER_URL", "JUPYTER_TOKEN")}
    for name in ("runtime", "config", "data"):
        (base / name).mkdir(exist_ok=True)
        env[f"JUPYTER_{name.upper()}_DIR"] = str(base / name)
    return env


@contextlib.contextmanager
def _jupyter(base: Path):
    """A Jupyter server with the collaboration extension, its dirs under `base`."""
    root = base / "root"
    root.mkdir(parents=True)
    env = _jupyter_env(base)
    (base / "config" / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {"jupyter_server_fileid": True,
                                               "jupyter_server_ydoc": True}}}))
    port = _free_port()
    log = open(base / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
         f"--ServerApp.root_dir={root}"],
        env=env, cwd=base, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    end = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(url + "api/status", headers={"Authorization": f"token {TOKEN}"},
                             timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                pytest.fail("the Jupyter server did not start: "
                            + (base / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        yield {"url": url, "root": root, "env": env, "base": base, "proc": proc}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with _jupyter(tmp_path_factory.mktemp("jupyter")) as info:
        yield info


# ---------------------------------------------------------------- JupyterLab's stand-in
class _Socket:
    """pycrdt's Channel over websocket-client, whose blocking calls go to threads."""

    def __init__(self, ws: websocket.WebSocket):
        self.ws = ws

    @property
    def path(self) -> str:
        return "peer"

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        return await self.recv()

    async def recv(self) -> bytes:
        try:
            data = await asyncio.to_thread(self.ws.recv)
        except (websocket.WebSocketException, OSError):
            raise StopAsyncIteration from None
        if not data:
            raise StopAsyncIteration
        return data if isinstance(data, bytes) else data.encode()

    async def send(self, message: bytes) -> None:
        await asyncio.to_thread(self.ws.send_bytes, message)


class Peer:
    """A second client of the notebook's room: reads its cells, edits them."""

    def __init__(self, url: str, path: str):
        headers = {"Authorization": f"token {TOKEN}"}
        info = httpx.put(url + f"api/collaboration/session/{path}", headers=headers,
                         json={"format": "json", "type": "notebook"}, timeout=10).json()
        ws_url = "ws" + url.removeprefix("http") + \
            f"api/collaboration/room/json:notebook:{info['fileId']}?sessionId={info['sessionId']}"
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {TOKEN}"],
                                              timeout=30)
        self.ws.settimeout(None)  # connected: recv waits for the next message, however long
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.stop = None
        self.call(self._start(), 30)

    def call(self, work, timeout=10):
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    async def _start(self):
        self.doc = Doc()
        self.nb = YNotebook(self.doc)
        self.stop = asyncio.Event()
        provider = Provider(self.doc, _Socket(self.ws))
        ready = asyncio.Event()

        async def serve():
            async with provider:
                ready.set()
                await self.stop.wait()

        self.task = asyncio.ensure_future(serve())
        await ready.wait()
        await asyncio.wait_for(provider.synced.wait(), 20)

    def cells(self) -> list[dict]:
        async def read():
            return [self.nb.get_cell(i) for i in range(self.nb.cell_number)]

        return self.call(read())

    def edit(self, fn) -> None:
        async def run():
            with self.doc.transaction():
                fn(self.nb)

        self.call(run())

    def close(self) -> None:
        async def leave():
            self.stop.set()
            await asyncio.wait_for(self.task, 10)

        try:
            self.call(leave(), 15)
        finally:
            self.ws.close()
            self.loop.call_soon_threadsafe(self.loop.stop)


# ---------------------------------------------------------------- the run
def _start(tmp: Path, server: dict, nb: str, replies: list) -> subprocess.Popen:
    model = script(tmp / "replies.json", replies)
    env = {**server["env"], "RLM_HOME": str(tmp / "home")}
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rlm", "run", "compute it", "--live", nb, "--model", model],
        cwd=server["root"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until(what: str, check, proc: subprocess.Popen | None = None):
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    err = ""
    if proc is not None:
        proc.kill()
        err = ": " + proc.communicate()[1][-3000:]
    pytest.fail(f"no {what} within {DEADLINE_S} s{err}")


def _ours(cells: list[dict]) -> list[dict]:
    return [c for c in cells if LIVE in c.get("metadata", {})]


def _running(peer: Peer):
    cells = [c for c in _ours(peer.cells()) if c["metadata"][LIVE].get("status") == "running"]
    return cells[0] if cells else None


def _text(cell: dict) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def test_a_jupyterlab_client_sees_the_run_live_and_keeps_its_edits(server, tmp_path):
    root = server["root"]
    name = "shared.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Mine", id="mine-1"),
                                       new_code_cell("y = 1", id="mine-2")]), root / name)
    peer = Peer(server["url"], name)
    try:
        proc = _start(tmp_path, server, name, REPLIES)
        # the first cell appears before the run ends, marked running, then with its output
        running = _until("rlm's first cell, running", lambda: _running(peer), proc)
        assert running["source"] == WAIT and running["outputs"] in ([], running["outputs"])
        running = _until("the running cell's first output",
                         lambda: (c := _running(peer)) and "started" in _text(c) and c, proc)
        assert _text(running) == "started\n"
        cells = peer.cells()
        assert [c["id"] for c in cells[:2]] == ["mine-1", "mine-2"]
        assert cells[2]["source"] == "**Task:** compute it"

        # the user, mid-run: a new cell of theirs at the end, an edit to one of theirs
        def edit(nb):
            nb.append_cell({"cell_type": "markdown", "source": "typed while it ran",
                            "metadata": {}, "id": "typed"})
            nb.set_cell(1, source="y = 2  # changed while it ran")

        peer.edit(edit)
        assert proc.poll() is None  # all of it before the run ends
        (root / "go").touch()
        out, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode in ANSWERED, err
        assert "is live through the Jupyter server" in err

        # the final answer, its cells complete, the user's edits kept
        final = _until("the final answer", lambda: any(
            c["source"].startswith("**Final answer:** 42") for c in peer.cells()))
        assert final
        cells = peer.cells()
        by_id = {c["id"]: c for c in cells}
        assert by_id["mine-2"]["source"] == "y = 2  # changed while it ran"
        assert by_id["typed"]["source"] == "typed while it ran"
        assert [c["id"] for c in cells[:2]] == ["mine-1", "mine-2"]
        ours = _ours(cells)
        assert not any(c["metadata"][LIVE].get("status") for c in ours)
        code = [c for c in ours if c["cell_type"] == "code"]
        assert [c["source"] for c in code] == [WAIT, "x = 6 * 7\nprint(x)"]
        assert _text(code[0]) == "started\ndone\n"
        # where the user typed it, right after the cell that was running; rlm's later cells
        # go after it (never above a cell the user may still be typing in)
        at = [c["id"] for c in cells].index("typed")
        assert cells[at - 1]["source"] == WAIT
        assert cells[-1]["source"].startswith("**Final answer:** 42")

        # the server saved the shared document: the file on disk has it too
        _until("the server's save", lambda: "**Final answer:** 42" in (root / name).read_text())
        on_disk = nbformat.read(root / name, as_version=4)
        assert {c.id: c.source for c in on_disk.cells}["typed"] == "typed while it ran"

        # the token reached only the server: in no file of the run and not in the notebook
        assert TOKEN not in (root / name).read_text()
        for path in (tmp_path / "home").rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path
    finally:
        peer.close()


def test_a_new_notebook_is_made_by_the_server_and_a_token_in_the_url_is_kept_secret(
        server, tmp_path):
    root = server["root"]
    name = "new.ipynb"
    replies = [{"content": "FINAL(7)"}]
    env = {**server["env"], "RLM_HOME": str(tmp_path / "home"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "nowhere"),  # not discovered: configured
           "RLM_JUPYTER_URL": f"{server['url']}?token={TOKEN}", "RLM_JUPYTER_ROOT": str(root)}
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "rlm", "run", "seven", "--live", name, "--model",
         script(tmp_path / "r.json", replies)],
        cwd=root, env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode in (*ANSWERED, 3), proc.stderr
    assert "is live through the Jupyter server" in proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout
    _until("the server's save", lambda: (root / name).exists()
           and "**Final answer:** 7" in (root / name).read_text())
    assert TOKEN not in (root / name).read_text()
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_a_lost_server_stops_the_view_in_one_line_and_the_run_goes_on(tmp_path):
    with _jupyter(tmp_path / "jupyter") as own:
        name = "gone.ipynb"
        nbformat.write(new_notebook(), own["root"] / name)
        peer = Peer(own["url"], name)
        try:
            proc = _start(tmp_path, own, name, REPLIES)
            _until("rlm's first cell, running", lambda: _running(peer), proc)
        finally:
            peer.close()
        own["proc"].kill()  # the server is gone mid-run
        own["proc"].wait()
        (own["root"] / "go").touch()
        out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode in ANSWERED, err
    lines = [line for line in err.splitlines() if "connection to the Jupyter server" in line]
    assert len(lines) == 1 and "rlm export" in lines[0] and TOKEN not in err


# ---------------------------------------------------------------- discovery, on its own
def _jpserver(runtime: Path, url: str, root: Path, token: str = TOKEN) -> None:
    runtime.mkdir(parents=True, exist_ok=True)
    (runtime / f"jpserver-{os.getpid()}.json").write_text(json.dumps(
        {"url": url, "token": token, "root_dir": str(root), "pid": os.getpid(),
         "base_url": "/", "hostname": "127.0.0.1", "port": 1, "secure": False}))


def test_discovery_finds_the_server_whose_root_holds_the_notebook(server, tmp_path):
    nb = server["root"] / "sub" / "x.ipynb"
    runtime = tmp_path / "runtime"
    _jpserver(runtime, server["url"], server["root"])
    found = server_for(nb, environ={}, runtime_dir=runtime)
    assert found is not None and found.state == "collab" and found.url == server["url"]
    assert TOKEN not in repr(found)
    # a notebook outside its root: none
    assert server_for(tmp_path / "x.ipynb", environ={}, runtime_dir=runtime) is None
    # the wrong token: found, refused (the file sink, with a line saying why)
    _jpserver(runtime, server["url"], server["root"], token="wrong-token-0000")
    assert server_for(nb, environ={}, runtime_dir=runtime).state == "refused"


def test_discovery_of_a_server_that_is_not_there_falls_back_to_the_file(tmp_path):
    runtime = tmp_path / "runtime"
    _jpserver(runtime, f"http://127.0.0.1:{_free_port()}/", tmp_path)  # nothing listens
    nb = tmp_path / "x.ipynb"
    assert server_for(nb, environ={}, runtime_dir=runtime) is None
    (runtime / f"jpserver-{os.getpid()}.json").unlink()
    (runtime / "jpserver-999999999.json").write_text(json.dumps(  # a process long gone
        {"url": "http://127.0.0.1:1/", "token": "", "root_dir": str(tmp_path),
         "pid": 999999999}))
    assert server_for(nb, environ={}, runtime_dir=runtime) is None
    assert (runtime / "jpserver-999999999.json").exists()  # not rlm's to delete
    # configured, but nothing answers there: the file
    env = {"RLM_JUPYTER_URL": f"http://127.0.0.1:{_free_port()}/?token=abc",
           "RLM_JUPYTER_ROOT": str(tmp_path)}
    assert server_for(nb, environ=env, runtime_dir=runtime) is None


class _Plain(http.server.BaseHTTPRequestHandler):
    """A Jupyter server without the collaboration extension, as far as rlm asks it."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/api/status" else 404)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_a_server_without_collaboration_means_the_file_and_one_line(tmp_path):
    """A server that answers but has no collaboration endpoint (404): the file sink, with
    one line saying JupyterLab will need a reload."""
    from rlm.notebook.collab import open_sink
    from rlm.notebook.live import NotebookFile
    from rlm.session.entries import SessionHeader

    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        env = {"RLM_JUPYTER_URL": f"http://127.0.0.1:{plain.server_port}/",
               "RLM_JUPYTER_ROOT": str(tmp_path), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
        found = server_for(tmp_path / "nb.ipynb", environ=env, runtime_dir=tmp_path / "rt")
        assert found is not None and found.state == "plain"
        said: list[str] = []
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            sink = open_sink(tmp_path / "nb.ipynb", SessionHeader(model="m"), said.append)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        assert isinstance(sink, NotebookFile) and (tmp_path / "nb.ipynb").exists()
        assert len(said) == 1 and "reload" in said[0] and "jupyter-collaboration" in said[0]
    finally:
        plain.shutdown()
        plain.server_close()


# ---------------------------------------------------------------- ops on a shared document
class _Local(CollabNotebook):
    """The sink's document work without a server (its loop's calls made inline)."""

    def __init__(self, cells: list[dict]):
        self.doc = Doc()
        self.nb = YNotebook(self.doc)
        self.nb.set({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
        self.lost = self.stale = None
        self._seen = []

    def _run(self, fn):
        return fn()


def _mine(key: str, source: str, session: str = "S") -> dict:
    cell = new_code_cell(source, id=key)
    cell.metadata[LIVE] = {"session": session, "id": key}
    return cell


def test_ops_apply_by_cell_id_over_edits_made_since_they_were_planned():
    doc = _Local([new_markdown_cell("mine", id="u"), _mine("a", "1"), _mine("b", "2")])
    current = doc.cells()
    ours = [_mine("a", "1"), _mine("b", "2 changed"), _mine("c", "3")]
    written = {k: fingerprint(c) for k, c in (("a", _mine("a", "1")), ("b", _mine("b", "2")))}
    ops = plan(current, ours, "S", written)
    # meanwhile the user inserts two cells at the top and edits nothing of rlm's
    doc.nb.ycells.insert(0, doc.nb.create_ycell({"cell_type": "markdown", "source": "new 1",
                                                 "metadata": {}, "id": "n1"}))
    doc.nb.ycells.insert(0, doc.nb.create_ycell({"cell_type": "markdown", "source": "new 2",
                                                 "metadata": {}, "id": "n2"}))
    assert doc.apply(ops)
    cells = doc.cells()
    assert [c["id"] for c in cells] == ["n2", "n1", "u", "a", "b", "c"]
    assert cells[4]["source"] == "2 changed" and cells[5]["source"] == "3"
    # an update planned, then the user edits that cell: their edit wins
    ours[2] = _mine("c", "3 then 4")
    ops = plan(doc.cells(), ours, "S", {**written, "b": fingerprint(ours[1]),
                                        "c": fingerprint(_mine("c", "3"))})
    doc.nb.set_cell(5, source="the user's 3")
    assert doc.apply(ops)
    assert doc.cells()[5]["source"] == "the user's 3"


def test_a_running_cells_output_grows_in_place():
    doc = _Local([new_markdown_cell("mine", id="u")])
    run = _mine("a", "print(1)")
    run.metadata[LIVE]["status"] = "running"
    run.outputs = [new_output("stream", name="stdout", text="one\n")]
    doc.apply(plan(doc.cells(), [run], "S", {}))
    ytext = doc.nb.ycells[1]["outputs"][0]["text"]
    assert doc.nb.ycells[1]["execution_state"] == "running"  # JupyterLab's [*]
    grown = copy.deepcopy(run)
    grown.outputs[0].text = "one\ntwo\n"
    doc.apply(plan(doc.cells(), [grown], "S", {"a": fingerprint(run)}))
    assert str(ytext) == "one\ntwo\n"  # the same Y text, appended to
    done = copy.deepcopy(grown)
    del done.metadata[LIVE]["status"]
    done.execution_count = 1
    doc.apply(plan(doc.cells(), [done], "S", {"a": fingerprint(run)}))
    cell = doc.cells()[1]
    assert cell["execution_count"] == 1 and "status" not in cell["metadata"][LIVE]
    assert doc.nb.ycells[1]["execution_state"] == "idle"


def test_without_the_client_libraries_the_file_and_how_to_get_them(server, monkeypatch):
    from rlm.notebook.collab import open_sink
    from rlm.notebook.live import NotebookFile
    from rlm.session.entries import SessionHeader

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", server["env"]["JUPYTER_RUNTIME_DIR"])
    monkeypatch.delenv("RLM_JUPYTER_URL", raising=False)
    monkeypatch.setitem(sys.modules, "pycrdt", None)  # `import pycrdt` fails
    said: list[str] = []
    sink = open_sink(server["root"] / "nolib.ipynb", SessionHeader(model="m"), said.append)
    assert isinstance(sink, NotebookFile)
    assert len(said) == 1 and "pip install -e '.[live]'" in said[0] and "pycrdt" in said[0]
