"""What the loop tells a watching user while it works: the prompt's size before a model
call, the model's text and a running cell's output as they arrive (events, never printing).

Both streams go through a `StreamRedactor` (rlm.secrets): these events reach the terminal
and `worker-events.jsonl` one chunk at a time, and a key split across chunks, or cut by the
cap, must not reach them in pieces. Use the streams as context managers: the end hands on
what the redactor still holds. A native tool call's code goes out in whole lines
(`ModelCodeStream`), each redacted: a key never spans a line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm.events import CellOutput, Event, ModelCode, ModelText
from rlm.kernel.shaping import strip_ansi, trim_traceback
from rlm.kernel.types import Output
from rlm.secrets import StreamRedactor, known_secrets, redact_text

# streamed text per cell; past it one line says the rest comes with the cell's result (a
# 100 MB print must not flood the terminal or the worker's event file)
STREAM_CAP = 20_000


def prompt_tokens(messages: list[dict[str, Any]]) -> int | None:
    """The prompt's size in tokens, counted offline; None if it cannot be counted."""
    try:
        from rlm.llm.tokens import count_tokens

        return count_tokens(messages)
    except Exception:  # noqa: BLE001 - progress is best effort, never a failure
        return None


def output_text(out: Output, base: Path | None) -> tuple[str, str]:
    """(text, name) a user reads for one output as it arrives: stream text, a displayed
    value's text, an image's absolute path, the trimmed traceback."""
    if out.kind == "stream":
        return strip_ansi(out.text or ""), out.name or "stdout"
    if out.kind == "error":
        text, _ = trim_traceback(out.traceback or [f"{out.ename}: {out.evalue}"])
        return text + "\n", "error"
    images = [p for mime, p in (out.refs or {}).items() if mime.startswith("image/")]
    if images:
        return "".join(f"[image: {base / p if base else p}]\n" for p in images), "result"
    plain = (out.data or {}).get("text/plain")
    if isinstance(plain, str) and plain:
        return strip_ansi(plain if plain.endswith("\n") else plain + "\n"), "result"
    return "", "result"


class OutputStream:
    """An executor's `on_output` callback that emits CellOutput events (redacted across
    chunks, one redactor per stream name; bounded per cell, the cap applied to the
    redacted text so it never cuts a key)."""

    def __init__(self, emit: Callable[[Event], None], base: Path | None,
                 also: Callable[[Any], None] | None = None, cap: int = STREAM_CAP,
                 secrets: list[str] | None = None):
        self.emit, self.base, self.also, self.cap = emit, base, also, cap
        self.secrets = secrets
        self.sent = 0
        self._redactors: dict[str, StreamRedactor] = {}

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, out: Output) -> None:
        if self.also is not None:
            self.also(out)
        if self.sent > self.cap:
            return
        text, name = output_text(out, self.base)
        if name not in self._redactors:
            self._redactors[name] = StreamRedactor(self.secrets)
        self._send(self._redactors[name].feed(text), name)

    def close(self) -> None:
        """The end of the cell: what the redactors held back goes out."""
        for name, redactor in self._redactors.items():
            self._send(redactor.close(), name)
        self._redactors.clear()

    def _send(self, text: str, name: str) -> None:
        if not text or self.sent > self.cap:
            return
        if self.sent + len(text) > self.cap:
            text = text[: self.cap - self.sent] + ("\n[... more output: the cell's result "
                                                  "has the rest]\n")
            self.sent = self.cap + 1
        else:
            self.sent += len(text)
        self.emit(CellOutput(text, name))


class ModelCodeStream:
    """Native tool calls' code as it streams (the code decoded so far, given at each line's
    end: rlm.agent.steer.match.CallArguments): emits ModelCode with the lines completed
    since the last event of that call, redacted; `closed` gives the last line too."""

    def __init__(self, emit: Callable[[Event], None]) -> None:
        self.emit = emit
        self._secrets = known_secrets()
        self._sent: dict[int, int] = {}  # call index -> characters of its code sent

    def __call__(self, index: int, code: str, *, closed: bool = False) -> None:
        start = self._sent.get(index, 0)
        end = len(code) if closed else code.rfind("\n") + 1
        if end <= start:
            return
        self._sent[index] = end
        text = code[start:end].removesuffix("\n")
        if self._secrets:
            text = redact_text(text, self._secrets, patterns=False)
        self.emit(ModelCode(index, text.split("\n")))


class ModelTextStream:
    """A model call's `on_text` callback that emits ModelText events, redacted across
    deltas (a key the model writes arrives in several)."""

    def __init__(self, emit: Callable[[Event], None], secrets: list[str] | None = None):
        self.emit = emit
        self._redactor = StreamRedactor(secrets)

    def __enter__(self) -> ModelTextStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, delta: str) -> None:
        text = self._redactor.feed(delta)
        if text:
            self.emit(ModelText(text))

    def close(self) -> None:
        text = self._redactor.close()
        if text:
            self.emit(ModelText(text))
