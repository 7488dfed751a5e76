"""`--kernel provisioner:NAME` end to end through the CLI: a jupyter_client kernel
provisioner, registered by entry point (a dist-info on PYTHONPATH, as an installed
package registers it), chosen through the kernelspec's metadata.kernel_provisioner.

No cluster provisioner can run here (no Kubernetes, Docker, YARN or SSH hosts): the one
used is a LocalProvisioner subclass that marks the kernels it launches, so the test sees
that it, not jupyter_client's default, started them (first run and `rlm resume`, which
must use the recorded kind).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rlmcli import call

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[1]
NAME = "rlm-test-marking"

PROVISIONER = '''
from jupyter_client.provisioning import LocalProvisioner


class MarkingProvisioner(LocalProvisioner):
    """Launches like LocalProvisioner; every kernel it starts gets a marker in its env."""

    launched = 0

    async def pre_launch(self, **kwargs):
        kwargs = await super().pre_launch(**kwargs)
        MarkingProvisioner.launched += 1
        env = dict(kwargs.get("env") or {})
        env["RLM_TEST_PROVISIONED_BY"] = f"marking-{MarkingProvisioner.launched}"
        kwargs["env"] = env
        return kwargs
'''


def install_provisioner(site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    (site / "rlm_test_provisioner.py").write_text(PROVISIONER)
    dist = site / "rlm_test_provisioner-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlm-test-provisioner\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[jupyter_client.kernel_provisioners]\n{NAME} = rlm_test_provisioner:MarkingProvisioner\n")


def rlm(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    return subprocess.run([sys.executable, "-m", "rlm", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow  # two CLI processes (litellm import, kernel start, restore): ~60 s here
def test_provisioner_run_and_resume(tmp_path, _isolated_home):
    site = tmp_path / "site"
    install_provisioner(site)
    first = tmp_path / "first.json"
    first.write_text(json.dumps([
        call("import os\nmark = os.environ.get('RLM_TEST_PROVISIONED_BY')\nprint(mark)"),
        call("final(mark)"),
    ]))
    proc = rlm(["run", "which provisioner?", "--model", f"script:{first}",
                "--kernel", f"provisioner:{NAME}", "--json"], tmp_path, site)
    # an answer; the environment is not the task's data, so it reads unverified (exit 5,
    # issue 58): not this test's subject
    assert proc.returncode in (0, 5), proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] in ("answered", "unverified"), out
    assert out["final"] == "marking-1"
    session_dir = Path(out["session_path"]).parent if out.get("session_path") else None
    assert session_dir is not None
    log = (session_dir / "session.jsonl").read_text()
    assert f'"kernel":"provisioner:{NAME}"' in log  # recorded with the run options

    # resume: a new host process, no --kernel: the recorded kind starts the kernel again,
    # and the snapshot restores `mark` from the first kernel
    second = tmp_path / "second.json"
    second.write_text(json.dumps([
        call("import os\nprint(mark, os.environ.get('RLM_TEST_PROVISIONED_BY'))"),
        call("final(mark + ' ' + os.environ['RLM_TEST_PROVISIONED_BY'])"),
    ]))
    proc = rlm(["resume", out["session_id"], "again", "--model", f"script:{second}", "--json"],
               tmp_path, site)
    assert proc.returncode in (0, 5), proc.stderr
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again["final"] == "marking-1 marking-1"  # restored value; a new host's first launch


def test_unknown_provisioner_is_one_line(tmp_path):
    from rlm.config import Config
    from rlm.errors import KernelError
    from rlm.kernel import Kernel

    k = Kernel(tmp_path / "s", Config(kernel="provisioner:nope"))
    with pytest.raises(KernelError) as e:
        k.start()
    err = str(e.value)
    assert err.startswith("--kernel provisioner:nope: ") and "not been registered" in err, err
    assert "jupyter_client.kernel_provisioners" in err and "\n" not in err
