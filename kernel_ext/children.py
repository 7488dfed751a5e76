"""Children beside the cell: `rlm_spawn` returns a handle at once; the child runs on the
host (its own session and kernel) while the cell goes on. Host side: rlm.agent.children.

    h = rlm_spawn("summarise the file", context=text, name="f1")
    h.status()        # {'state': 'running', 'tokens': ..., ...}
    h.result(60)      # the child's answer (TimeoutError after 60 s; RuntimeError if it failed)
    h.steer("use column B")   # reaches it before its next model call
    h.cancel()
    rlm_gather([h1, h2, ...])           # answers in the order given
    done, pending = rlm_wait(handles)   # as soon as any has ended (any=False: all)
    rlm_max_children()                  # the tree's slots: limit, in use, waiting, peak
    rlm_max_children(2)                 # fewer at once from now on (at most the user's)

A handle is plain data (the child's id and name): it pickles, so it survives a snapshot.
"""

from __future__ import annotations

import sys
from typing import Any

from kernel_ext import bridge, contract


class ChildError(RuntimeError):
    """A child that failed or was cancelled, where its answer would be (rlm_gather)."""

    _rlm_user_data = True  # snapshotted like the cell's own values

    def __init__(self, name: str, state: str, error: str | None, kind: str | None = None,
                 ) -> None:
        super().__init__(f"child {name!r} {state}: {error or 'no answer'}")
        self.name, self.state, self.error = name, state, error
        self.kind = kind  # budget | schema | cancelled | error

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChildError, (self.name, self.state, self.error, self.kind))


class Gathered(list):  # type: ignore[type-arg]
    """rlm_gather's answers, in the order of the handles; `partial` is True when the cell
    was interrupted before all ended (the unfinished ones are cancelled and hold a
    ChildError), `states` says how each ended."""

    partial: bool = False
    states: list[str]
    _rlm_user_data = True


class ChildHandle:
    _rlm_user_data = True  # plain data: snapshotted, and it works again after a restore

    def __init__(self, id: str, name: str) -> None:
        self.id = id
        self.name = name

    def status(self) -> dict[str, Any]:
        """state (queued/running/done/failed/cancelled), tokens, turns, seconds, error."""
        return bridge.request(contract.CHILD_STATUS, {"id": self.id})

    def result(self, timeout: float | None = None) -> Any:
        """The child's answer, waiting for it (TimeoutError after `timeout` seconds; a
        RuntimeError when it failed or was cancelled)."""
        view = bridge.request(contract.CHILD_RESULT, {"id": self.id, "timeout": timeout})  # ChildError
        # (.kind: budget | schema | cancelled | error) when it did not end with an answer
        if not view.get("done"):
            raise TimeoutError(f"child {self.name!r} is still {view.get('state')} after "
                               f"{timeout} s")
        return _answer(view)

    def cancel(self) -> bool:
        """Stop the child; False when it had already ended."""
        return bool(bridge.request(contract.CHILD_CANCEL, {"id": self.id}))

    def steer(self, text: str) -> None:
        """A message for the child, injected before its next model call."""
        bridge.request(contract.CHILD_STEER, {"id": self.id, "text": str(text)})

    def send(self, text: str) -> None:
        """A follow-up from the parent, queued for the child's next turn."""
        bridge.request(contract.CHILD_SEND, {"id": self.id, "text": str(text)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChildHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return (f"<child {self.name!r}: .status(), .result(timeout=None), .steer(text), "
                f".send(text), .cancel()>")


def _answer(view: dict[str, Any]) -> Any:
    if view.get("state") == "done":
        return view.get("result")
    raise ChildError(view.get("name", "?"), view.get("state", "?"), view.get("error"),
                     view.get("error_kind"))


def _ids(handles: Any) -> list[str]:
    if isinstance(handles, ChildHandle):
        handles = [handles]
    handles = list(handles)
    for h in handles:
        if not isinstance(h, ChildHandle):
            raise TypeError(f"expected handles from rlm_spawn, got {type(h).__name__}")
    return [h.id for h in handles]


def rlm_spawn(task: str, name: str | None = None, context: Any = None, schema: Any = None,
              model: str | None = None, isolation: str | None = None) -> ChildHandle:
    """Start a child agent on `task` (with optional `context`) and return its handle at
    once; the child runs beside this cell. `model`: one of the run's configured models.
    `schema`: a JSON schema its answer must match (the answer is then a dict/list).
    `isolation="worktree"`: it works in its own git worktree (outside git: a private copy of
    this directory); `isolation="copy"`: a private copy. Its changes are applied here when
    it finishes; a conflicting or unfinished one is kept (`.status()['isolation']` says
    how it went)."""
    from kernel_ext import child_context

    got = bridge.request(contract.CHILD_SPAWN, {"task": str(task), "name": name,
                                         "context": child_context.pack(context),
                                         "schema": schema, "model": model,
                                         "isolation": isolation})
    return ChildHandle(got["id"], got["name"])


def yield_section(label: str, item: Any) -> int:
    """In a child spawned with a schema: add `item` to the array `label` of the result
    (before final()); returns how many items `label` holds."""
    from kernel_ext.api import _jsonable

    return bridge.request(contract.CHILD_SECTION, {"label": str(label), "item": _jsonable(item)})


def rlm_gather(handles: Any, timeout: float | None = None,
               return_exceptions: bool = True) -> Gathered:
    """Every child's answer, in the order given. A failed child's place holds a
    ChildError (return_exceptions=False: the first one is raised). Interrupted: the
    unfinished children are cancelled and the answers so far come back with
    `.partial = True`."""
    ids = _ids(handles)
    interrupted = False
    try:
        got = bridge.request(contract.CHILD_GATHER, {"ids": ids, "timeout": timeout})
    except KeyboardInterrupt:
        interrupted = True
        got = bridge.request(contract.CHILD_GATHER, {"ids": ids, "wait": False})
    out = Gathered()
    out.partial = bool(got.get("partial"))
    out.states = [v.get("state") for v in got["children"]]
    for view in got["children"]:
        try:
            out.append(_answer(view))
        except ChildError as e:
            if not return_exceptions:
                raise
            out.append(e)
    if out.partial:
        ended = sum(s == "done" for s in out.states)
        rest = "were cancelled" if interrupted else f"are still running after {timeout} s"
        print(f"rlm_gather: partial: {ended} of {len(ids)} children finished; the rest {rest} "
              "(ChildError in their places)", file=sys.stderr, flush=True)  # before what the
        # cell prints next: unflushed, it reached the host in the middle of a later print
    return out


def rlm_max_children(n: int | None = None) -> dict[str, int]:
    """How many children (and batched prompts) may run at once in the session tree, and
    how many do: {'limit', 'in_use', 'waiting', 'peak'} (limit 0: unlimited). With `n`, the
    limit becomes `n` first (1 up to what the user allowed with --max-children)."""
    return bridge.request(contract.CHILD_LIMIT, {"n": n})


def rlm_wait(handles: Any, any: bool = True, timeout: float | None = None
             ) -> tuple[list[ChildHandle], list[ChildHandle]]:
    """(done, pending) once any child has ended (any=False: all of them), or at the
    timeout."""
    hs = [handles] if isinstance(handles, ChildHandle) else list(handles)
    got = bridge.request(contract.CHILD_WAIT, {"ids": _ids(hs), "any": any, "timeout": timeout})
    done = set(got["done"])
    return [h for h in hs if h.id in done], [h for h in hs if h.id not in done]
