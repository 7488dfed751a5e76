"""The host's questions to a running kernel, answered by kernel_ext without a cell.

`KernelQueries` is the part of `Kernel` (rlm.kernel.kernel) that asks: values described
(`describe`), where a value or a term is in the kernel's data (`where_value`,
`how_written`, `where_text`), the user's names (`list_namespace`: on a subshell while a
cell runs, else from the last snapshot, and says so), the files the user's code read and
modified (`file_ops`), candidates run against a forked namespace (`trial`) and a snapshot
taken now (`snapshot_now`). Each is one `kernel_ext.contract.Call` evaluated silently
through `Kernel._expression` (no history, no snapshot hook); the kernel's lifecycle,
execution and restore stay in rlm.kernel.kernel.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol

from kernel_ext import contract
from rlm.config import Config
from rlm.errors import KernelBusy, KernelDied
from rlm.kernel.interrupting import CellInterrupt
from rlm.kernel.kinds import Runtime
from rlm.kernel.state import snapshot_fallback
from rlm.kernel.subshell import RuntimeLister, SubshellUnavailable, busy_reason

TRIAL_PARALLEL = 2  # kernel_ext.trial.PARALLEL: children a kernel runs at once
TRIAL_SLACK_S = 10.0  # fork, collection and the reply, per round of trials and once more


class QueryHost(Protocol):
    """What the queries read of the `Kernel` they are part of."""

    session_dir: Path
    config: Config
    _rt: Runtime | None
    _shell_lock: threading.RLock
    _int: CellInterrupt
    _lister: RuntimeLister

    def _expression(self, expr: str, timeout: float) -> str: ...

    def _exit_text(self, rc: int) -> str: ...

    def _busy_listing(self, timeout: float) -> dict[str, Any]: ...


class KernelQueries:
    """Host -> kernel queries over `_expression` (mixed into `Kernel`)."""

    def describe(self: QueryHost, names: list[str] | None = None, timeout: float = 30.0
                 ) -> list[dict[str, str]]:
        """Type, size and a short preview of kernel values (kernel_ext.describe), silently."""
        expr = contract.DESCRIBE.expression(list(names) if names is not None else None)
        return list(json.loads(self._expression(expr, timeout)))

    def where_value(self: QueryHost, key: str, timeout: float = 5.0) -> list[dict[str, str]]:
        """The text columns of the kernel's DataFrames holding the value `key`
        (kernel_ext.columns.where_value): table, column, value."""
        return list(json.loads(self._expression(contract.WHERE_VALUE.expression(key), timeout)))

    def how_written(self: QueryHost, filters: list[tuple[str, str, str]], timeout: float = 5.0
                    ) -> list[dict[str, Any]]:
        """How the text columns a filter compared are written (kernel_ext.columns)."""
        expr = contract.HOW_WRITTEN.expression([list(f) for f in filters])
        return list(json.loads(self._expression(expr, timeout)))

    def where_text(self: QueryHost, terms: list[str], timeout: float = 5.0) -> list[dict[str, Any]]:
        """The lines of the kernel's texts holding each term (kernel_ext.texts)."""
        expr = contract.WHERE_TEXT.expression(list(terms))
        return list(json.loads(self._expression(expr, timeout)))

    def list_namespace(self: QueryHost, timeout: float = 5.0) -> dict[str, Any]:
        """User names with type and size; KernelDied if dead. While a cell runs the kernel
        answers on a subshell; failing that the names come from the last snapshot, with
        `"source": "snapshot"` and a `note` saying so (KernelBusy when there is none)."""
        if self._rt is None or self._rt.poll() is not None:
            rc = self._rt.poll() if self._rt is not None else None
            raise KernelDied(self._exit_text(rc) if rc is not None else "the kernel is not running")
        if self._int.running or not self._shell_lock.acquire(blocking=False):
            return self._busy_listing(timeout)
        try:
            return json.loads(self._expression(contract.SNAPSHOT_NAMESPACE.expression(), timeout))
        finally:
            self._shell_lock.release()

    def _busy_listing(self: QueryHost, timeout: float) -> dict[str, Any]:
        rt = self._rt
        if rt is None:
            raise KernelBusy("the kernel is restarting; try again when it is up")
        try:
            return self._lister.namespace(rt, timeout)
        except SubshellUnavailable as e:
            why = busy_reason(e)
        fallback = snapshot_fallback(self.session_dir, why, self.config.snapshot_url)
        if fallback is None:
            raise KernelBusy(f"{why}, and no snapshot exists yet; try again when the cell ends")
        return {"names": fallback["names"], "source": "snapshot", "note": fallback["note"]}

    def file_ops(self: QueryHost, timeout: float = 5.0) -> dict[str, list[str]]:
        """Files the user's code read and modified ({"read": [...], "modified": [...]}).
        KernelBusy at once while a cell runs (a compaction then goes on without them)."""
        if self._int.running:
            raise KernelBusy("a cell is running; file operations are known when it ends")
        return json.loads(self._expression(contract.FILE_OPS.expression(), timeout))

    def trial(self: QueryHost, codes: list[str], timeout: float = 30.0, cap: int = 4000
              ) -> list[dict[str, Any]]:
        """Run each code against a forked copy of the namespace (kernel_ext.trial); one
        result per code, in order: {status, output, final, error, seconds}. Nothing a
        candidate does to the namespace stays; files it writes do. Holds the shell lock,
        so no cell runs meanwhile; the deadline covers every trial (two at a time)."""
        codes = [str(c) for c in codes]
        if not codes:
            return []
        rounds = -(-len(codes) // TRIAL_PARALLEL)
        deadline = rounds * (timeout + TRIAL_SLACK_S) + TRIAL_SLACK_S
        expr = contract.TRIAL.expression(codes, float(timeout), int(cap))
        return list(json.loads(self._expression(expr, deadline)))

    def snapshot_now(self: QueryHost, timeout: float = 120.0) -> dict[str, Any]:
        """Force a snapshot now; returns kernel_ext.snapshot's summary."""
        return json.loads(self._expression(contract.SNAPSHOT_NOW.expression(), timeout))
