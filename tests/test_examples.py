"""The examples run as a user runs them: as scripts against the installed package, from any
working directory, without touching ``sys.path`` (a user copying one should see no such
line)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "examples", "quickstart.py")


def test_quickstart_does_not_edit_sys_path():
    with open(QUICKSTART) as f:
        assert "sys.path" not in f.read()


def test_quickstart_runs_as_a_script_from_elsewhere(tmp_path):
    env = dict(os.environ, ACCEL_BACKEND="interpreter")
    res = subprocess.run([sys.executable, QUICKSTART], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "backend: interpreter" in res.stdout and "check_grad" in res.stdout
