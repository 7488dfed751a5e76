"""The `kernel` setting and the kernel_ext package, without a gateway: parsing, one-line
errors from the CLI, the env a gateway kernel gets, the versions that must agree."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kernel_ext
import rlm
from rlm.app import RunOptions
from rlm.config import Config, KernelKind, kernel_kind, load_config
from rlm.errors import ConfigError
from rlm.kernel.gateway import decode_frame, remote_env
from rlm.kernel.kinds import kernel_notes

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_kinds_parse():
    assert kernel_kind("local") == KernelKind("local")
    assert kernel_kind("gateway:http://127.0.0.1:8888/") == KernelKind(
        "gateway", url="http://127.0.0.1:8888")
    assert kernel_kind("gateway:https://eg.example:8443/base#python_k8s") == KernelKind(
        "gateway", url="https://eg.example:8443/base", name="python_k8s")
    assert kernel_kind("provisioner:kubernetes-provisioner") == KernelKind(
        "provisioner", name="kubernetes-provisioner")
    assert Config().kernel == "local"


@pytest.mark.parametrize("spec, words", [
    ("remote", "not a kernel kind"),
    ("local:x", "not a kernel kind"),
    ("gateway:127.0.0.1:8888", "http(s)://HOST"),
    ("gateway:ftp://h", "http(s)://HOST"),
    ("gateway:http://u:secretpw@h:1", "RLM_GATEWAY_TOKEN"),
    ("gateway:http://h:1/?token=abc", "RLM_GATEWAY_TOKEN"),
    ("provisioner:", "provisioner name"),
    ("provisioner:a b", "provisioner name"),
])
def test_bad_kernel_values_are_one_line(spec, words):
    with pytest.raises(ConfigError) as e:
        Config(kernel=spec)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert "secretpw" not in str(e.value).replace(spec, "")


def test_what_a_gateway_cannot_do_is_refused_once_clearly():
    with pytest.raises(ConfigError, match="--memory-cap is not available with --kernel gateway"):
        Config(kernel="gateway:http://h:1", memory_cap_bytes=2 * 1024**3)
    with pytest.raises(ConfigError, match="--sandbox is not available with --kernel gateway"):
        Config(kernel="gateway:http://h:1", sandbox=True)
    note, _snapshots = kernel_notes(Config(kernel="gateway:http://h:1#spec"))
    assert "no memory cap or sandbox from rlm" in note and "(kernelspec spec)" in note
    assert kernel_notes(Config(sandbox=False)) == []  # a local kernel: no kind note


def test_a_gateway_without_a_snapshot_url_is_told_where_snapshots_land(tmp_path):
    """The kernel gets this host's snapshot path, which names a directory on the gateway's
    machine: the user is told so at start (a Notice from kernel_notes), and how to fix it."""
    notes = kernel_notes(Config(kernel="gateway:http://h:1"))
    (where,) = [n for n in notes if "snapshots" in n]
    assert "on the gateway's machine" in where and "not on this machine" in where
    assert "--snapshot-url" in where
    # what the kernel is given is indeed this host's path
    assert remote_env(tmp_path, Config(kernel="gateway:http://h:1"))[
        "KERNEL_RLM_SNAPSHOT_DIR"] == str(tmp_path / "snapshot")
    with_url = kernel_notes(Config(kernel="gateway:http://h:1", snapshot_url="memory://b/p"))
    assert not [n for n in with_url if "snapshots" in n]
    assert len(with_url) == 1


def test_config_file_key_and_recorded_run_option(tmp_path, monkeypatch):
    cfg_file = tmp_path / "rlm.toml"
    cfg_file.write_text('kernel = "gateway:http://10.0.0.5:8888"\n')
    monkeypatch.setenv("RLM_CONFIG", str(cfg_file))
    assert load_config().kernel == "gateway:http://10.0.0.5:8888"
    # the flag is a recorded override: resume / the worker build the same kind
    recorded = RunOptions(overrides={"kernel": "provisioner:p1"})
    again = RunOptions().over(RunOptions.from_dict(recorded.to_dict()))
    assert again.config().kernel == "provisioner:p1"
    cfg_file.write_text('kernel = "cloud"\n')
    with pytest.raises(ConfigError, match="not a kernel kind"):
        load_config()


def test_cli_bad_kernel_flag_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run([sys.executable, "-m", "rlm", "run", "hi", "--model",
                           "script:/nonexistent.json", "--kernel", "gateway:localhost:8888"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and "--kernel 'gateway:localhost:8888'" in err, err
    assert len(err.splitlines()) == 1, err


def test_remote_env_sends_kernel_ext_settings_only(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_GATEWAY_TOKEN", "tok-1234567890")
    monkeypatch.setenv("RLM_SNAPSHOT_API_TOKEN", "tok-0987654321")
    monkeypatch.setenv("HOME_ONLY_VAR", "x")
    env = remote_env(tmp_path, Config())
    assert env["KERNEL_RLM_SESSION_DIR"] == str(tmp_path)
    assert env["KERNEL_RLM_SNAPSHOT_DIR"] == str(tmp_path / "snapshot")
    assert all(k.startswith("KERNEL_") for k in env)
    assert "tok-" not in repr(env) and "HOME_ONLY_VAR" not in repr(env)


def test_kernel_ext_adopts_gateway_env():
    env = {"KERNEL_RLM_SESSION_DIR": "/s", "KERNEL_MPLBACKEND": "agg", "RLM_SNAPSHOT_DIR": "/own",
           "KERNEL_RLM_SNAPSHOT_DIR": "/sent", "KERNEL_OTHER": "x"}
    kernel_ext.adopt_gateway_env(env)
    assert env["RLM_SESSION_DIR"] == "/s" and env["MPLBACKEND"] == "agg"
    assert env["RLM_SNAPSHOT_DIR"] == "/own"  # the kernel's own setting wins
    assert "OTHER" not in env


def test_websocket_frames_text_and_binary():
    assert decode_frame('{"channel": "iopub", "a": 1}') == {"channel": "iopub", "a": 1}
    body = b'{"channel": "iopub", "b": 2}'
    buf = b"\x00\x01"
    header = (2).to_bytes(4, "big") + (12).to_bytes(4, "big") + (12 + len(body)).to_bytes(4, "big")
    assert decode_frame(header + body + buf) == {"channel": "iopub", "b": 2}


def test_kernel_ext_package_is_versioned_with_rlm():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ext = tomllib.loads((ROOT / "packaging" / "kernel-ext" / "pyproject.toml").read_text())
    assert root["project"]["version"] == rlm.__version__ == kernel_ext.__version__
    assert ext["project"]["name"] == "rlm-kernel-ext"
    assert ext["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kernel_ext.__version__"}
    # the image gets the host's reviewed ranges for what kernel_ext imports
    host = set(root["project"]["dependencies"])
    assert set(ext["project"]["dependencies"]) <= host
    assert "rlm[remote]" in root["project"]["optional-dependencies"]["dev"]
