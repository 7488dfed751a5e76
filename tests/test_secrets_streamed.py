"""Issue 15.3: no secret reaches disk, even in pieces.

Cell output and model text arrive in chunks, and several places cut text (the streamed
output's cap, head + tail shaping, the event file's field limit). A key split across two
chunks, or cut by a cap, must not land on disk in any file: not whole, and not as a run of
16 or more characters that begins or ends it (`rlm.secrets.MIN_PIECE`)."""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

from rlm.agent.progress import STREAM_CAP, ModelTextStream, OutputStream
from rlm.config import scaled_output_budget
from rlm.events import CellOutput, Event, ModelText
from rlm.kernel.shaping import split_budget
from rlm.kernel.types import Output
from rlm.longrun.events_file import MAX_FIELD_CHARS, EventsFile, event_record
from rlm.secrets import MIN_PIECE, REDACTED, StreamRedactor, redact_text, scrub_file
from tests.rlmcli import ANSWERED

ENCODINGS = ("utf-8", "utf-16-le", "utf-32-le")


def _rand(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


def _key() -> str:
    return f"sk-test-{_rand(40)}"


def call(code: str, content: str = "") -> dict:
    return {"content": content, "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def _pieces(key: str) -> list[str]:
    """What must not be on disk: the key, its first and its last MIN_PIECE characters
    (any longer prefix or suffix holds one of these)."""
    return [key, key[:MIN_PIECE], key[-MIN_PIECE:]]


def _leaks(root: Path, key: str) -> list[str]:
    needles = [(p, enc, p.encode(enc)) for p in _pieces(key) for enc in ENCODINGS]
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            data = (Path(dirpath) / name).read_bytes()
            found += [f"{dirpath}/{name}: {p!r} ({enc})" for p, enc, b in needles if b in data]
    return found


# -- a real run --------------------------------------------------------------------------

def test_a_key_split_across_chunks_or_cut_by_the_stream_cap_reaches_no_file(_isolated_home,
                                                                             tmp_path):
    """`rlm run` with the key in its environment (so rlm knows it): the model's text
    carries the key across its 16-character stream deltas, one cell prints it in two
    flushes split mid-key, one prints 19,990 characters then the key so that the streamed
    output's cap cuts it, one so that the head + tail shaping of the model's copy cuts it; the
    session is exported. No file under RLM_HOME holds the key
    or a 16-character prefix or suffix of it, in UTF-8, UTF-16 or UTF-32."""
    key = _key()
    hexed = key.encode().hex()  # the cells' code does not hold the key: only what they print
    pad = STREAM_CAP - 10  # the streamed output's cap falls 10 characters into the key
    head, _tail = split_budget(scaled_output_budget(128_000))  # a script: model's window
    replies = [
        call(f"k = bytes.fromhex({hexed!r}).decode()\n"
             "print(k[:20], end='', flush=True)\nprint(k[20:])",
             content=f"{'Checking the key':16}{key} now."),  # deltas split at 16, 32, ...
        call(f"print('x' * {pad} + k)"),
        call(f"print('h' * {head - 20} + k + 'y' * 30000)"),  # head + tail shaping cuts it
        call("print('done')\nfinal('done')"),
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    env = dict(os.environ, OPENAI_API_KEY=key, RLM_HOME=str(_isolated_home))
    run = subprocess.run([sys.executable, "-m", "rlm", "run", "show the key", "--model",
                          f"script:{script}", "--json"], env=env, capture_output=True,
                         text=True, timeout=240, cwd=tmp_path)
    assert run.returncode in ANSWERED, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["final"] == "done"
    export = subprocess.run([sys.executable, "-m", "rlm", "export", "last", "-o",
                             str(_isolated_home / "run.ipynb")], env=env, capture_output=True,
                            text=True, timeout=240, cwd=tmp_path)
    assert export.returncode == 0, export.stderr[-3000:]

    session = Path(result["session_path"]).parent
    events = [json.loads(line) for line in
              (session / "worker-events.jsonl").read_text().splitlines()]
    streamed = "".join(e["text"] for e in events if e["event"] == "CellOutput")
    assert f"{REDACTED}\n" in streamed and "x" * 1000 in streamed  # both cells streamed
    # the cap cuts redacted text: not even the 10 characters before it are there
    assert key[:10] not in (session / "worker-events.jsonl").read_text()
    said = "".join(e["delta"] for e in events if e["event"] == "ModelText")
    assert said.startswith(f"Checking the key{REDACTED} now.")
    assert list((session / "artifacts").glob("cell-*.txt"))  # the long output was spooled
    assert (_isolated_home / "run.ipynb").is_file()
    assert _leaks(_isolated_home, key) == []


# -- the streaming redactor ----------------------------------------------------------------

def test_a_stream_split_anywhere_is_redacted_as_if_it_came_whole():
    """Every way of cutting a text holding two keys into three chunks gives, joined, the
    redaction of the whole text, and no chunk handed on holds a piece of a key."""
    k1, k2 = _key(), f"ghp_{_rand(36)}"
    text = f"a {k1} b\nc {k2}{k1[:30]}"  # k1 cut off at the end: 30 chars of its start
    whole = redact_text(text, [k1, k2], patterns=False)
    assert k1[:MIN_PIECE] not in whole and whole.count(REDACTED) == 3
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 7):
            r = StreamRedactor([k1, k2])
            out = [r.feed(text[:i]), r.feed(text[i:j]), r.feed(text[j:]), r.close()]
            assert "".join(out) == whole, (i, j)
            assert not any(p in o for o in out for k in (k1, k2) for p in _pieces(k)), (i, j)


def test_the_redactor_holds_back_only_what_could_be_part_of_a_key():
    """Live output stays live: text that cannot be the start of a key is handed on at once;
    the key's first characters wait for the next chunk."""
    key = "sk-test-" + "A" * 40
    r = StreamRedactor([key])
    assert r.feed("step 1\n") == "step 1\n"
    assert r.feed("then sk-te") == "then "
    assert r.feed("st-" + "A" * 40 + "\n") == f"{REDACTED}\n"
    assert r.feed("sk-") == ""
    assert r.close() == "sk-"  # the end: what is held goes out (too short to be a piece)
    assert StreamRedactor([]).feed("sk-te") == "sk-te"  # no secrets: nothing is held


def test_output_stream_redacts_across_chunks_and_at_the_cap():
    key = _key()
    events: list[Event] = []
    with OutputStream(events.append, None, secrets=[key]) as stream:
        stream(Output(kind="stream", name="stdout", text="x" * 10 + key[:20]))
        stream(Output(kind="stream", name="stdout", text=key[20:] + "\n"))
        # unredacted, the cap would fall 24 characters into the key
        stream(Output(kind="stream", name="stdout", text="y" * (STREAM_CAP - 83) + key + "z" * 99))
    text = "".join(e.text for e in events if isinstance(e, CellOutput))
    assert text.startswith("x" * 10 + REDACTED + "\n")
    assert "[... more output: the cell's result has the rest]" in text
    assert not any(p in text for p in _pieces(key))


def test_model_text_deltas_are_redacted_across_deltas():
    key = _key()
    events: list[Event] = []
    with ModelTextStream(events.append, secrets=[key]) as on_text:
        for i in range(0, len(key) + 20, 16):
            on_text((f"{'said:':16}{key}  thanks")[i:i + 16])
    text = "".join(e.delta for e in events if isinstance(e, ModelText))
    assert text == f"{'said:':16}{REDACTED}  thanks"
    assert not any(p in e.delta for e in events if isinstance(e, ModelText) for p in _pieces(key))


# -- cut-off keys ----------------------------------------------------------------------

def test_a_cut_off_key_is_masked_from_sixteen_characters():
    key = _key()
    cut = f"head {key[:MIN_PIECE]}|{key[-MIN_PIECE:]} tail {key[:MIN_PIECE - 1]} {key}."
    out = redact_text(cut, [key], patterns=False)
    assert out == f"head {REDACTED}|{REDACTED} tail {key[:MIN_PIECE - 1]} {REDACTED}."


def test_scrub_masks_cut_off_keys_in_place_same_length(tmp_path):
    key = _key()
    parts = [b"<", key[:20].encode(), b"|", key[-17:].encode("utf-16-le"), b"|",
             key[:30].encode("utf-32-le"), b"|", key[:MIN_PIECE - 1].encode(), b">"]
    path = tmp_path / "data.bin"
    path.write_bytes(b"".join(parts))
    assert scrub_file(path, [key]) == 3
    masked = [b"<", b"*" * 20, b"|", ("*" * 17).encode("utf-16-le"), b"|",
              ("*" * 30).encode("utf-32-le"), b"|", key[:MIN_PIECE - 1].encode(), b">"]
    assert path.read_bytes() == b"".join(masked)


def test_the_event_files_field_limit_never_cuts_a_key(tmp_path, monkeypatch):
    """`worker-events.jsonl` bounds long fields: the key is redacted before the cut, so no
    piece of it survives however short."""
    key = _key()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    text = "x" * (MAX_FIELD_CHARS - 10) + key
    path = tmp_path / "worker-events.jsonl"
    EventsFile(path).append(event_record(CellOutput(text, "stdout")), 0.0)
    assert key[:10] not in path.read_text()


def test_scrub_masks_a_non_ascii_secret_same_length(tmp_path):
    """A secret with non-ASCII characters is longer in bytes than in characters: the mask
    is as long as its bytes (a shorter one could not be written in place at all)."""
    key = "pässwörd-" + _rand(20) + "-ünïcode"
    path = tmp_path / "data.bin"
    path.write_bytes(b"<" + key.encode() + b"|" + key[:MIN_PIECE].encode("utf-16-le") + b">")
    assert scrub_file(path, [key]) == 2
    size = len(key.encode())
    assert path.read_bytes() == (b"<" + b"*" * size + b"|"
                                 + ("*" * MIN_PIECE).encode("utf-16-le") + b">")
