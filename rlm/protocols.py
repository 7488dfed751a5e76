"""The typed seams between layers: what the agent loop needs from an executor and a session
log, and the hook types of its policy chain (rlm.chain). Structural (`typing.Protocol`): `rlm.kernel.Kernel` and
`rlm.notebook.inprocess.InProcessExecutor` implement `Executor` without inheriting from it;
`rlm.session.store.SessionStore` implements `SessionLog`. A conformance test checks both.
The run decision (S1: `Continue | End | Compact`) is here too: goals, the autonomous
policy, stuck detection and the overflow guard decide; the loop carries the decision out.

This module sits at the session layer: it imports only vocabulary from below (entry and
result types), so any layer above may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlm.errors import RlmError
from rlm.kernel.types import CellResult, Output, RestoreReport
from rlm.session.entries import Entry, SessionHeader

# fn(method, params) -> JSON-able reply; raising sends an error reply to the kernel
BridgeHandler = Callable[[str, dict[str, Any]], Any]
OnOutput = Callable[[Output], None]


@runtime_checkable
class Executor(Protocol):
    """Where the model's cells run: a kernel process, or the notebook's own shell."""

    @property
    def pid(self) -> int | None: ...

    def execute(self, code: str, timeout: float | None = None,
                on_output: OnOutput | None = None) -> CellResult: ...

    def interrupt(self) -> None: ...

    def restart(self, cause: str = "restart requested") -> RestoreReport: ...

    def is_alive(self) -> bool: ...

    def list_namespace(self, timeout: float = 5.0) -> dict[str, Any]: ...

    def describe(self, names: list[str] | None = None,
                 timeout: float = 30.0) -> list[dict[str, str]]: ...

    def set_bridge_handler(self, fn: BridgeHandler | None) -> None: ...

    def stop(self) -> None: ...


@runtime_checkable
class Trials(Protocol):
    """An executor that can run candidate cells against isolated copies of its namespace
    (rlm.kernel.Kernel: forked children of the kernel process, a gateway's kernel too, on
    its own machine). Apart from `Executor`: the in-process `%%rlm` executor runs in the
    user's own kernel and does not fork it; a caller checks `isinstance(executor, Trials)`."""

    def trial(self, codes: list[str], timeout: float = 30.0,
              cap: int = 4000) -> list[dict[str, Any]]: ...


@runtime_checkable
class ValueLookup(Protocol):
    """An executor that reads its DataFrames' text columns (kernel_ext.columns): which hold
    a value (the note after `KeyError: 'F9'`), how a column a filter compared is
    written (the note after a filter that selected nothing), and which lines of its texts
    hold a term (the note after a search that found nothing)."""

    def where_value(self, key: str, timeout: float = 5.0) -> list[dict[str, str]]: ...

    def how_written(self, filters: list[tuple[str, str, str]], timeout: float = 5.0
                    ) -> list[dict[str, Any]]: ...

    def where_text(self, terms: list[str], timeout: float = 5.0) -> list[dict[str, Any]]: ...


def started(executor: Executor | None) -> Executor:
    """An agent's executor, once the agent has started (None before: a programmer error)."""
    if executor is None:
        raise RlmError("the agent is not started: use it as a context manager or call start()")
    return executor


@runtime_checkable
class StartableExecutor(Executor, Protocol):
    """An executor the agent starts itself (the session's kernel: start restores its
    snapshot and says what came back)."""

    def start(self) -> RestoreReport: ...


@runtime_checkable
class SessionLog(Protocol):
    """The append-only session log the loop writes to and projects context from."""

    header: SessionHeader
    path: Path | None

    @property
    def id(self) -> str: ...

    @property
    def dir(self) -> Path | None: ...

    @property
    def leaf_id(self) -> str | None: ...

    def append(self, entry: Entry, durable: bool = True) -> Entry: ...

    def sync_soon(self) -> None: ...

    def branch(self, leaf: str | None = None) -> Sequence[Entry]: ...

    def get(self, entry_id: str) -> Entry: ...

    def set_leaf(self, entry_id: str | None) -> None: ...

    def messages(self, *, system_prompt: str, native_tools: bool) -> list[dict[str, Any]]: ...

    def projection_of(self, branch: Sequence[Entry], *, system_prompt: str,
                      native_tools: bool) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


# -- the loop's hooks (rlm.agent.loop.Agent implements LoopHost) ---------------------------

Handler = Callable[[dict[str, Any]], Any]


# -- the run decision (S1): what a policy that steers the run hands the loop -------------
@dataclass(frozen=True)
class Continue:
    """Go on: `prompt` becomes the next user message (origin "continuation"). `work`: the
    prompt refused an answer whose fix is work (a gate failing, a file wrong), so the next
    reply must run a cell (rlm.agent.policy `AnswerPolicy.continued`)."""

    prompt: str
    work: bool = False


@dataclass(frozen=True)
class End:
    """End the run now, as `reason` (`final`, `limit:stalled`, `stuck`, `error`, ...) with
    `detail` (one line for the user and the log); `report`: the stuck detector's figures."""

    reason: str
    detail: str | None = None
    report: dict[str, Any] | None = None


@dataclass(frozen=True)
class Compact:
    """The context was relieved: retry the model call once (overflow)."""


RunDecision = Continue | End | Compact
# the stages' policy types are the chain's (rlm.chain: given a LoopHost)
