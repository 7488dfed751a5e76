"""A live notebook through Jupyter's real-time collaboration (issue 61, part 2).

When a Jupyter server with jupyter-collaboration serves the `--live` notebook, rlm joins
the notebook's room as one more client and edits the shared document (a YNotebook), so
JupyterLab shows rlm's cells as they come, without a reload; the server saves the file,
rlm never writes it. Otherwise the notebook file is written as in part 1
(rlm.notebook.livefile.NotebookFile).

- **Which server** (`server_for`): the one named by `RLM_JUPYTER_URL` (it may hold
  `?token=`, else `JUPYTER_TOKEN`; its root dir `RLM_JUPYTER_ROOT`, default the current
  directory), else a running one from the jpserver-*.json files in Jupyter's runtime dir
  (the files `jupyter_server.serverapp.list_running_servers()` reads: rlm reads them
  itself, as importing jupyter_server costs seconds and is not one of rlm's dependencies),
  the most specific root first; whose root holds the notebook's real path, which answers
  with the token and has the collaboration endpoint. The token goes only into requests'
  Authorization header: never a URL, a message, a file or the session (the token in use
  is also counted a secret, so the session log masks it should a cell print it).
- **The protocol** (read from jupyter_server_ydoc's handlers and pycrdt): PUT
  api/collaboration/session/PATH {"format": "json", "type": "notebook"} gives a fileId and
  a sessionId; the room is the websocket api/collaboration/room/json:notebook:FILEID
  ?sessionId=...; over it the Y sync protocol (pycrdt's `Provider`: sync steps 1 and 2,
  then an update message per transaction both ways). The document is jupyter_ydoc's
  YNotebook: cells a Y array of Y maps (source a Y text, metadata a Y map, outputs a Y
  array of maps whose stream text is a Y text).
- **The websocket client**: tornado's, because it is asyncio-native (pycrdt's Provider
  runs on anyio over asyncio, so one loop serves both with no thread per direction) and
  already installed with rlm (jupyter_client and ipykernel depend on it). websocket-client
  is blocking (a reader thread beside the loop); pycrdt-websocket's own client providers
  are gone from 0.16 (its provider moved into pycrdt, which is what is used here).
- **Threads**: LiveView calls from the run's threads; a pycrdt document is used on one
  thread only, so the client's asyncio loop runs on a daemon thread and every call waits
  for it with a timeout. A lost connection (or a loop that does not answer) sets `stale`
  with one line and the run goes on; nothing here can hang the run.
- **Concurrent edits**: ops are planned against `cells()`, and the user may edit the
  document before they apply; so they apply by cell id, not index (an insert goes after
  the cell planned before it, wherever that is now), and an update of one of rlm's cells
  whose source changed since `cells()` read it is dropped (the user's edit wins).

The client libraries (pycrdt, jupyter-ydoc) are the `live` extra and imported lazily: rlm
runs without them, writing the file, and says how to get them when a server could use them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx
import nbformat
from nbformat.v4 import new_notebook

from rlm import safeio
from rlm.notebook.export import _metadata
from rlm.notebook.livefile import (
    LIVE,
    LiveError,
    NotebookFile,
    Op,
    Sink,
    check_path,
    parse_notebook,
    source_of,
)
from rlm.session.entries import SessionHeader

URL_ENV, ROOT_ENV, TOKEN_ENV = "RLM_JUPYTER_URL", "RLM_JUPYTER_ROOT", "JUPYTER_TOKEN"
PROBE_S = 3.0  # a server that does not answer its status this fast is not used
CONNECT_S = 15.0  # the session request, the websocket and the first sync
CALL_S = 10.0  # a call into the client's loop (local work only: it never waits on the net)
CLOSE_S = 10.0  # the last changes sent and the room left
log = logging.getLogger(__name__)
T = TypeVar("T")


# ---------------------------------------------------------------- which server
@dataclass(frozen=True)
class ServerInfo:
    """A Jupyter server that serves the notebook. `state`: "collab" (it has the real-time
    collaboration endpoint), "plain" (it answers without it) or "refused" (the token)."""

    url: str  # its base URL, ending in "/", without the token
    root_dir: Path  # its real root dir
    token: str = field(repr=False)
    origin: str = ""  # where rlm learnt of it, for messages
    state: str = "collab"

    def relpath(self, path: Path) -> str:
        return Path(os.path.realpath(path)).relative_to(self.root_dir).as_posix()

    def api(self, *parts: str) -> str:
        return self.url + "/".join(quote(p, safe="/:") for p in parts)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}


def server_for(path: Path, environ: Mapping[str, str] | None = None,
               runtime_dir: Path | None = None) -> ServerInfo | None:
    """The Jupyter server that serves `path` (see the module's docstring), None when none
    does; one that answers without collaboration, or refuses the token, is returned with
    its `state` when no other serves it with collaboration."""
    env = os.environ if environ is None else environ
    real = Path(os.path.realpath(path))
    configured = list(_configured(env))
    running = sorted(_running(runtime_dir), key=lambda s: -len(s.root_dir.parts))
    fallback: ServerInfo | None = None
    for server in configured + running:
        if not real.is_relative_to(server.root_dir):
            continue
        state = _probe(server, real)
        if state == "collab":
            return server
        if state is not None and fallback is None:
            fallback = replace(server, state=state)
    return fallback


def _configured(env: Mapping[str, str]) -> Iterator[ServerInfo]:
    url = env.get(URL_ENV, "").strip()
    if not url:
        return
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    token = next((v for k, v in query if k == "token"), "") or env.get(TOKEN_ENV, "")
    if any(k == "token" for k, _ in query):
        from rlm.secrets import remember

        remember([token])  # a secret by where it came from: the session log masks it
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/", "", ""))
    root = Path(os.path.realpath(env.get(ROOT_ENV) or os.getcwd()))
    yield ServerInfo(base, root, token, origin=URL_ENV)


def _running(runtime_dir: Path | None) -> Iterator[ServerInfo]:
    """The servers of the jpserver-PID.json files whose process is alive (as jupyter_server's
    list_running_servers, without deleting anyone's file)."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = Path(jupyter_runtime_dir())
    with contextlib.suppress(OSError):
        for file in sorted(runtime_dir.glob("jpserver-*.json")):
            try:
                info = json.loads(safeio.read_bytes(runtime_dir, file.name, limit=1 << 20))
                pid, url, root = int(info["pid"]), str(info["url"]), str(info["root_dir"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if not _alive(pid):
                continue
            yield ServerInfo(url.rstrip("/") + "/", Path(os.path.realpath(root)),
                             str(info.get("token") or ""), origin=file.name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def _probe(server: ServerInfo, real: Path) -> str | None:
    """collab | plain | refused; None when nothing answers there."""
    try:
        with httpx.Client(timeout=PROBE_S, headers=server.headers(), trust_env=False) as http:
            status = http.get(server.api("api/status")).status_code
            if status in (401, 403):
                return "refused"
            if status != 200:
                return None
            # the session handler takes only PUT: 405 where it is, 404 where it is not
            found = http.get(server.api("api/collaboration/session", server.relpath(real)))
    except httpx.HTTPError:
        return None
    return "plain" if found.status_code == 404 else "collab"


# ---------------------------------------------------------------- which sink
def open_sink(path: Path, header: SessionHeader, say: Callable[[str], None]) -> Sink:
    """The shared document of the server that serves `path` with real-time collaboration,
    else the notebook file (with one line saying why, where a server was found)."""
    path = Path(os.path.abspath(path))
    check_path(path)
    server = server_for(path)
    if server is None:
        return NotebookFile(path, header)
    where = f"the Jupyter server at {server.url}"
    if server.state == "refused":
        say(f"{where} serves {path.name} but refused rlm's token: rlm writes the file, which "
            f"JupyterLab shows on reload; set {URL_ENV} to the server's URL with its "
            "?token= to watch it live")
        return NotebookFile(path, header)
    if server.state == "plain":
        say(f"{where} serves {path.name} without real-time collaboration: rlm writes the "
            "file, which JupyterLab shows on reload (install jupyter-collaboration on the "
            "server to watch the run live)")
        return NotebookFile(path, header)
    try:
        import jupyter_ydoc  # noqa: F401
        import pycrdt  # noqa: F401
        import tornado.websocket  # noqa: F401
    except ImportError as e:
        say(f"{where} serves {path.name} with real-time collaboration, but rlm lacks its "
            f"client library {e.name}: rlm writes the file, which JupyterLab shows on "
            "reload; `pip install -e '.[live]'` to watch the run live")
        return NotebookFile(path, header)
    try:
        sink = CollabNotebook(path, header, server)
    except LiveError as e:
        say(f"{e}: rlm writes the file instead, which JupyterLab shows on reload")
        return NotebookFile(path, header)
    say(f"{path.name} is live through {where}: JupyterLab shows rlm's cells as they come")
    return sink


# ---------------------------------------------------------------- the shared document
class CollabNotebook:
    """rlm as one client of the notebook's room (see the module's docstring); the sink
    interface of NotebookFile: `cells()`, `apply(ops)`, `stale`, `close()`."""

    def __init__(self, path: Path, header: SessionHeader, server: ServerInfo):
        self.path = Path(os.path.abspath(path))
        self.header, self.server = header, server
        from rlm.secrets import remember

        remember([server.token])  # whichever way it came: the session log masks it
        self.stale: str | None = None
        self.lost: str | None = None  # why the connection ended, once it has
        self._seen: list[tuple[str, str]] = []  # (id, source) of the cells `cells()` read
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="rlm-live-collab")
        self._serving: asyncio.Future[None] | None = None
        self._closing: asyncio.Event | None = None
        self._ws: Any = None
        self.doc: Any = None  # the pycrdt Doc and its YNotebook, once joined
        self.nb: Any = None
        self._thread.start()
        try:
            rel = server.relpath(self.path)
            st = check_path(self.path)
            if st is None:  # a new notebook: the server makes it (rlm writes no file)
                self._create(rel)
            else:  # a file that is not a notebook is refused before the run, as without
                parse_notebook(self.path, safeio.read_bytes(self.path.parent, self.path.name))
            file_id, session_id = self._session(rel)
            self._call(self._join(file_id, session_id), CONNECT_S)
        except BaseException as e:
            self.close()
            if isinstance(e, LiveError):
                raise
            if isinstance(e, concurrent.futures.TimeoutError | TimeoutError):
                e = TimeoutError(f"no answer within {CONNECT_S:g} s")
            raise LiveError(f"rlm could not join {self.path.name}'s room on the Jupyter "
                            f"server at {server.url} ({_why(e)})") from None

    # ------------------------------------------------ joining (HTTP in the caller's thread)
    def _create(self, rel: str) -> None:
        nb = new_notebook(metadata=_metadata(self.header))
        body = {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}
        self._http("PUT", self.server.api("api/contents", rel), body)

    def _session(self, rel: str) -> tuple[str, str]:
        data = self._http("PUT", self.server.api("api/collaboration/session", rel),
                          {"format": "json", "type": "notebook"})
        return str(data["fileId"]), str(data.get("sessionId") or "")

    def _http(self, method: str, url: str, body: Any) -> Any:
        with httpx.Client(timeout=CONNECT_S, headers=self.server.headers(),
                          trust_env=False) as http:
            r = http.request(method, url, json=body)
        if r.status_code >= 400:
            raise LiveError(f"the Jupyter server at {self.server.url} answered {r.status_code} "
                            f"to {method} {url.removeprefix(self.server.url)}")
        return r.json()

    # ------------------------------------------------ the client (on the loop's thread)
    async def _join(self, file_id: str, session_id: str) -> None:
        from jupyter_ydoc import YNotebook
        from pycrdt import Doc, Provider
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        ws_base = "ws" + self.server.url.removeprefix("http")
        room = f"json:notebook:{file_id}"
        url = ws_base + f"api/collaboration/room/{room}?" + urlencode({"sessionId": session_id})
        self._ws = await websocket_connect(
            HTTPRequest(url, headers=self.server.headers(), connect_timeout=CONNECT_S,
                        request_timeout=CONNECT_S), max_message_size=1 << 30)
        self.doc = Doc()
        self.nb = YNotebook(self.doc)
        self._closing = asyncio.Event()
        provider = Provider(self.doc, _Channel(self._ws, room, self._gone), log=log)
        entered: asyncio.Future[None] = self._loop.create_future()
        self._serving = asyncio.ensure_future(self._serve(provider, entered))
        await entered
        synced = asyncio.ensure_future(provider.synced.wait())
        await asyncio.wait({synced, self._serving}, timeout=CONNECT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        if not synced.done():
            synced.cancel()
            raise LiveError(f"rlm could not join {self.path.name}'s room on the Jupyter server "
                            f"at {self.server.url} ({self.lost or 'no sync within '}"
                            f"{'' if self.lost else f'{CONNECT_S:g} s'})")

    async def _serve(self, provider: Any, entered: asyncio.Future[None]) -> None:
        assert self._closing is not None
        try:
            async with provider:
                entered.set_result(None)
                await self._closing.wait()
        except Exception as e:  # noqa: BLE001 - whatever ended it: `lost` says it
            self._gone(_why(e))
            if not entered.done():
                entered.set_exception(e)

    def _gone(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
        if self._closing is not None:
            self._closing.set()

    def _call(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def _run(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return self._call(call(), CALL_S)

    # ------------------------------------------------ the sink
    def cells(self) -> list[Any]:
        return self._run(self._cells)

    def _cells(self) -> list[Any]:
        out = [self.nb.get_cell(i) for i in range(len(self.nb.ycells))]
        self._seen = [(str(self.nb.ycells[i].get("id")), source_of(c)) for i, c in
                      enumerate(out)]
        return out

    def apply(self, ops: Sequence[Op]) -> bool:
        """`ops`, planned against the last `cells()`, in one transaction; False (and
        `stale` set) once the connection is gone."""
        if self.stale is not None:
            return False
        if self.lost is None:
            try:
                self._run(lambda: self._apply(ops))
            except (concurrent.futures.TimeoutError, TimeoutError):
                self.lost = f"its client did not answer within {CALL_S:g} s"
        if self.lost is not None:
            self.stale = (f"the connection to the Jupyter server at {self.server.url} ended "
                          f"({self.lost}): rlm stopped updating {self.path.name}. The run goes "
                          f"on; its whole record afterwards: `rlm export {self.header.id} -o "
                          "OTHER.ipynb`")
            return False
        return True

    def _apply(self, ops: Sequence[Op]) -> None:
        planned = list(self._seen)  # the list the ops' indexes refer to, kept in step
        ycells = self.nb.ycells
        with self.doc.transaction(origin="rlm"):
            for op in ops:
                ids = [str(c.get("id")) for c in ycells]
                if op.kind == "insert":
                    before = planned[op.index - 1][0] if op.index > 0 else None
                    at = ids.index(before) + 1 if before in ids else \
                        (0 if before is None else len(ids))
                    _put(self.nb, at, op.cell)
                    planned.insert(op.index, (str(op.cell.get("id")), source_of(op.cell)))
                    continue
                key, source = planned[op.index]
                if op.kind == "delete":
                    del planned[op.index]
                    if key in ids and source_of(ycells[ids.index(key)].to_py()) == source:
                        del ycells[ids.index(key)]
                    continue
                planned[op.index] = (key, source_of(op.cell))
                if key not in ids:
                    continue  # the user deleted it meanwhile
                ycell = ycells[ids.index(key)]
                old = ycell.to_py()
                if source_of(old) != source:
                    continue  # the user edited it meanwhile: theirs
                if old.get("cell_type") != op.cell.get("cell_type"):
                    _put(self.nb, ids.index(key), op.cell, replace=True)
                else:
                    _update(self.nb, ycell, old, _plain(op.cell))

    def close(self) -> None:
        """Send what is left, leave the room, stop the client's thread (bounded waits)."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._leave(), CLOSE_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_S)
        if not self._thread.is_alive():
            self._loop.close()

    async def _leave(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._serving is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._serving), CLOSE_S / 2)
        if self._ws is not None and self.lost is None:
            self._ws.close(1000, "rlm's run ended")
            with contextlib.suppress(Exception):  # the server's close frame, briefly
                await asyncio.wait_for(self._ws.read_message(), 1.0)


class _Channel:
    """pycrdt's Channel over tornado's websocket client."""

    def __init__(self, ws: Any, path: str, gone: Callable[[str], None]):
        self.ws, self._path, self.gone = ws, path, gone

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self) -> _Channel:
        return self

    async def __anext__(self) -> bytes:
        return await self.recv()

    async def recv(self) -> bytes:
        message = await self.ws.read_message()
        if message is None:
            code, reason = self.ws.close_code, self.ws.close_reason
            self.gone(f"the server closed it ({code}){f': {reason[:200]}' if reason else ''}"
                      if code else "it dropped")
            raise StopAsyncIteration
        return message if isinstance(message, bytes) else message.encode()

    async def send(self, message: bytes) -> None:
        await self.ws.write_message(message, binary=True)


def _why(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return str(e) or type(e).__name__


# ---------------------------------------------------------------- cells in the document
def _plain(cell: Any) -> dict[str, Any]:
    """A notebook cell as plain JSON values (what a Y document holds)."""
    return json.loads(json.dumps(cell))


def _state(cell: Mapping[str, Any]) -> str:
    mark = (cell.get("metadata") or {}).get(LIVE) or {}
    return "running" if mark.get("status") == "running" else "idle"


def _put(nb: Any, at: int, cell: Any, *, replace: bool = False) -> None:
    """`cell` into the document at `at` (over the cell there, with `replace`)."""
    cell = _plain(cell)
    if replace:
        del nb.ycells[at]
    nb.ycells.insert(at, nb.create_ycell(cell))
    if cell.get("cell_type") == "code":  # JupyterLab shows a running cell as [*]
        nb.ycells[at]["execution_state"] = _state(cell)


def _youtput(output: dict[str, Any]) -> Any:
    from pycrdt import Map, Text

    output = dict(output)
    if output.get("output_type") == "stream":
        output["text"] = Text(source_of({"source": output.get("text", "")}))
    return Map(output)


def _update(nb: Any, ycell: Any, old: dict[str, Any], new: dict[str, Any]) -> None:
    """One of rlm's cells brought to `new` in place: only what differs, a running cell's
    printed text appended to, so JupyterLab's view of it just grows."""
    from pycrdt import Array, Map, Text

    if source_of(old) != source_of(new):
        ysource = ycell.get("source")
        if isinstance(ysource, Text):
            _set_text(ysource, source_of(new))
        else:
            ycell["source"] = Text(source_of(new))
    meta, ymeta = new.get("metadata") or {}, ycell.get("metadata")
    if not isinstance(ymeta, Map):
        ycell["metadata"] = Map(meta)
    elif (old.get("metadata") or {}) != meta:
        for key in [k for k in ymeta.keys() if k not in meta]:
            del ymeta[key]
        for key, value in meta.items():
            if (old.get("metadata") or {}).get(key) != value:
                ymeta[key] = value
    if new.get("cell_type") == "code":
        youts = ycell.get("outputs")
        outs = new.get("outputs") or []
        if not isinstance(youts, Array):
            ycell["outputs"] = Array([_youtput(o) for o in outs])
        elif (old.get("outputs") or []) != outs:
            _set_outputs(youts, old.get("outputs") or [], outs)
        for key in ("execution_count",):
            if old.get(key) != new.get(key):
                ycell[key] = new.get(key)
        if ycell.get("execution_state") != _state(new):
            ycell["execution_state"] = _state(new)
    if "attachments" in new and old.get("attachments") != new["attachments"]:
        ycell["attachments"] = new["attachments"]


def _set_outputs(youts: Any, old: list[Any], new: list[Any]) -> None:
    from pycrdt import Text

    keep = 0
    while keep < min(len(old), len(new)) and old[keep] == new[keep]:
        keep += 1
    if keep == len(old) - 1 and keep < len(new):  # the last stream output grew: append
        a, b = old[keep], new[keep]
        text_a, text_b = (source_of({"source": o.get("text", "")}) for o in (a, b))
        ytext = youts[keep].get("text") if a.get("output_type") == "stream" else None
        if isinstance(ytext, Text) and b.get("output_type") == "stream" and \
                a.get("name") == b.get("name") and text_b.startswith(text_a):
            ytext += text_b[len(text_a):]
            keep += 1
    if keep < len(youts):
        del youts[keep:]
    for output in new[keep:]:
        youts.append(_youtput(output))


def _set_text(ytext: Any, new: str) -> None:
    """A Y text changed to `new` by one deletion and one insertion (the common prefix and
    suffix kept), so a reader's cursor in it stays put. A Y text's indexes count UTF-8
    bytes: the cut is found on characters and given in bytes."""
    old = str(ytext)
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    at = len(old[:start].encode())
    gone = len(old[start:len(old) - end].encode())
    if gone:
        del ytext[at:at + gone]
    if len(new) - end > start:
        ytext.insert(at, new[start:len(new) - end])
