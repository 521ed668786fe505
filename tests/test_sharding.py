"""Rendering across devices: the kernel launches partitioned by XLA (views
of a vmap, or one image's rows via ``render(mesh=...)``) give the
one-device images bit for bit and the same gradients, each device launching
on its own shard with no all-gather; and the multi-host recipe
(``examples/multiview_sharded.py``) runs as two processes of one machine.
Each check runs in its own process: XLA fixes the device count at start."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("XLA_FLAGS", None)
    return env


def _checks(n: int) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "sharding_checks.py"), str(n)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("devices", [2, 4])
def test_sharded_renders_equal_one_device_and_launch_per_shard(devices):
    r = _checks(devices)
    # One image split by rows: the same pixels and tangents bit for bit,
    # the image left sharded, each device launching one shard.
    assert r["pixels_identical"] and r["pixels_jvp_identical"] and r["pixels_sharded"]
    np.testing.assert_allclose(r["pixels_grad"][1], r["pixels_grad"][0], rtol=1e-5)
    assert r["pixels_launch_rows"] and all(n == 1 for n in r["pixels_launch_rows"]), r["pixels_launch_rows"]
    assert r["pixels_all_gathers"] == 0
    # 2 views per device: each device launches its two (not all 2N), the
    # scene buffers are not gathered, the shared gradient is all-reduced.
    assert r["views_identical"] and r["views_sharded"]
    np.testing.assert_allclose(r["views_grad"][1], r["views_grad"][0], rtol=1e-5)
    assert r["views_launch_rows"] and all(n == 2 for n in r["views_launch_rows"]), r["views_launch_rows"]
    assert r["views_all_gathers"] == 0 and r["views_all_reduces"] >= 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _example(*args: str, timeout: int = 600) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "examples" / "multiview_sharded.py"), "--views", "4",
                             "--res", "12", "--spp", "2", "--target-spp", "8", "--steps", "3", *args],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _losses(out: str) -> list:
    return [float(m) for m in re.findall(r"loss ([0-9.e+-]+)", out)]


def test_multihost_recipe_two_processes_match_one_process():
    """Two processes with one CPU device each, joined by jax.distributed on
    localhost, optimise exactly as one process with two devices."""
    try:
        port = _free_port()
    except OSError as exc:
        pytest.skip(f"cannot bind a localhost port for the coordinator: {exc}")
    coord = f"localhost:{port}"
    procs = [_example("--devices", "1", "--coordinator", coord, "--num-processes", "2", "--process-id", str(i))
             for i in range(2)]
    outs = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, stderr[-3000:]
        outs.append(stdout)
    single = _example("--devices", "2")
    stdout, stderr = single.communicate(timeout=600)
    assert single.returncode == 0, stderr[-3000:]
    ref = _losses(stdout)
    assert len(ref) == 3
    for i, out in enumerate(outs):
        assert f"process {i} device" in out
        np.testing.assert_allclose(_losses(out), ref, rtol=1e-5)
