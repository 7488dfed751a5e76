"""Join + verify of the offline model file, on small fake parts (fast) and the real one (slow)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from rlm.errors import ModelError
from rlm.llm import modelfile


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three small parts standing in for the 22 wheels; the expected hash is theirs."""
    chunks = [os.urandom(1000), os.urandom(5000), b"tail"]
    parts = []
    for i, data in enumerate(chunks, 1):
        p = tmp_path / "site" / f"part{i:02d}.bin"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        parts.append(p)
    joined = b"".join(chunks)
    monkeypatch.setattr(modelfile, "part_paths", lambda: parts)
    monkeypatch.setattr(modelfile, "MODEL_SHA256", hashlib.sha256(joined).hexdigest())
    monkeypatch.setattr(modelfile, "CHUNK", 777)  # force several reads per part
    return parts, joined


def test_join_creates_verified_file_and_sidecar(tmp_path, fake_parts):
    _, joined = fake_parts
    seen = []
    path = modelfile.ensure_model(cache=tmp_path / "cache", on_progress=lambda d, t: seen.append((d, t)))
    assert path == tmp_path / "cache" / modelfile.MODEL_FILENAME
    assert path.read_bytes() == joined
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    side = json.loads(path.with_name(path.name + ".sha256").read_text())
    assert side["sha256"] == modelfile.MODEL_SHA256
    assert side["size"] == len(joined)
    assert seen[-1] == (len(joined), len(joined))
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".part")]
    assert leftovers == []


def test_second_call_skips_rehash_via_sidecar(tmp_path, fake_parts, monkeypatch):
    home = tmp_path / "home"
    modelfile.ensure_model(home)

    def boom(*a, **k):
        raise AssertionError("re-hashed although size and mtime match the sidecar")

    monkeypatch.setattr(modelfile, "sha256_file", boom)
    monkeypatch.setattr(modelfile, "part_paths", boom)  # and did not re-join
    modelfile.ensure_model(home)


def test_changed_file_is_rehashed_and_rejected(tmp_path, fake_parts):
    home = tmp_path / "home"
    path = modelfile.ensure_model(home)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, new mtime
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError) as e:
        modelfile.ensure_model(home)
    msg = str(e.value)
    assert "sha256 mismatch" in msg
    assert f"Delete {path}" in msg and "pip install" in msg
    assert not path.with_name(path.name + ".sha256").exists()  # stale sidecar removed


def test_corruption_with_same_size_and_mtime_is_caught_once_sidecar_is_gone(tmp_path, fake_parts):
    home = tmp_path / "home"
    path = modelfile.ensure_model(home)
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # a forged mtime fools the sidecar...
    modelfile.ensure_model(home)
    path.with_name(path.name + ".sha256").unlink()  # ...but never a real hash
    with pytest.raises(ModelError, match="sha256 mismatch"):
        modelfile.ensure_model(home)


def test_touch_without_change_rehashes_and_refreshes_sidecar(tmp_path, fake_parts, monkeypatch):
    home = tmp_path / "home"
    path = modelfile.ensure_model(home)
    os.utime(path, ns=(1, 1_000_000_000))
    calls = []
    real = modelfile.sha256_file
    monkeypatch.setattr(modelfile, "sha256_file", lambda p, cb=None: calls.append(p) or real(p, cb))
    modelfile.ensure_model(home)
    modelfile.ensure_model(home)
    assert calls == [path]  # hashed once after the change, sidecar trusted after that


def test_bad_parts_are_refused_and_nothing_is_left(tmp_path, fake_parts):
    parts, _ = fake_parts
    parts[1].write_bytes(b"x" * 5000)
    home = tmp_path / "home"
    with pytest.raises(ModelError, match="reinstall"):
        modelfile.ensure_model(home)
    assert sorted(p.name for p in (tmp_path / "model-cache").iterdir()) == [".join.lock"]


def test_missing_part_packages_say_how_to_install(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(modelfile.resources, "files", missing)
    with pytest.raises(ModelError) as e:
        modelfile.part_paths()
    assert "the offline model is not installed: pip install 'rlm[local]'" in str(e.value)


def test_user_gguf_checks(tmp_path):
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF" + b"\0" * 100)
    assert modelfile.check_user_model(str(good)) == good
    with pytest.raises(ModelError, match="does not exist"):
        modelfile.check_user_model(str(tmp_path / "nope.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\3\4 not a model")
    with pytest.raises(ModelError, match="not a GGUF"):
        modelfile.check_user_model(str(bad))
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    assert modelfile.check_user_model(f"{good}#sha256={digest}") == good
    with pytest.raises(ModelError, match="sha256 mismatch"):
        modelfile.check_user_model(f"{good}#sha256={'0' * 64}")
    with pytest.raises(ModelError, match="#sha256="):
        modelfile.check_user_model(f"{good}#md5=abc")
    assert list(good.parent.glob("*.sha256")) == []  # never writes next to the user's file


def test_one_model_per_user_whatever_the_home(tmp_path, fake_parts, monkeypatch):
    """Issue 14.6: every RLM_HOME / working directory used to get its own 1.1 GB copy."""
    joins = []
    real_join = modelfile.join_parts
    monkeypatch.setattr(modelfile, "join_parts", lambda *a, **k: joins.append(a) or real_join(*a, **k))
    (tmp_path / "project-a").mkdir()
    first = modelfile.ensure_model(tmp_path / "project-a" / ".rlm")
    monkeypatch.chdir(tmp_path / "project-a")
    second = modelfile.ensure_model(tmp_path / "project-b" / ".rlm")
    assert first == second == tmp_path / "model-cache" / modelfile.MODEL_FILENAME  # RLM_MODEL_CACHE
    assert len(joins) == 1
    assert not (tmp_path / "project-a" / ".rlm" / "models").exists()
    assert not (tmp_path / "project-b" / ".rlm" / "models").exists()


def _old_join(fake_parts, folder):
    """A model joined the old way, into `<home>/models/` with its sidecar."""
    parts, joined = fake_parts
    folder.mkdir(parents=True)
    old = folder / modelfile.MODEL_FILENAME
    modelfile.join_parts(parts, old, modelfile.MODEL_SHA256)
    return old, joined


@pytest.mark.parametrize("where", ["rlm_home", "old_default"])
def test_model_joined_in_an_old_home_is_moved_not_joined_again(tmp_path, fake_parts, monkeypatch,
                                                               where):
    home = tmp_path / "home"
    base = home if where == "rlm_home" else tmp_path / ".rlm"  # the old default: ./.rlm
    old, joined = _old_join(fake_parts, base / "models")

    def boom(*a, **k):
        raise AssertionError("joined or re-hashed although a verified model existed")

    monkeypatch.setattr(modelfile, "part_paths", boom)
    monkeypatch.setattr(modelfile, "sha256_file", boom)  # its sidecar moved along with it
    path = modelfile.ensure_model(home)
    assert path == tmp_path / "model-cache" / modelfile.MODEL_FILENAME
    assert path.read_bytes() == joined
    assert not old.exists() and not old.with_name(old.name + ".sha256").exists()


def test_old_model_on_another_file_system_is_used_in_place(tmp_path, fake_parts, monkeypatch):
    home = tmp_path / "home"
    old, _ = _old_join(fake_parts, home / "models")

    def cross_device(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(modelfile.os, "rename", cross_device)
    monkeypatch.setattr(modelfile, "part_paths", lambda: pytest.fail("joined again"))
    assert modelfile.ensure_model(home) == old
    assert old.is_file()


def test_user_gguf_sidecars_live_in_the_model_cache(tmp_path):
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF" + b"\0" * 100)
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    modelfile.check_user_model(f"{good}#sha256={digest}", tmp_path / "home")
    assert len(list((tmp_path / "model-cache" / "verified").glob("*.sha256"))) == 1
    assert not (tmp_path / "home").exists()


@pytest.mark.slow
def test_real_parts_join_to_the_published_hash(tmp_path):
    try:
        modelfile.part_paths()
    except ModelError:
        pytest.fail("the [local] extra is not installed; CI must install it")
    path = modelfile.ensure_model(cache=tmp_path / "cache")
    assert path.stat().st_size == 1117320768
    path.with_name(path.name + ".sha256").unlink()
    modelfile.verify(path, modelfile.MODEL_SHA256)  # a full independent re-hash
