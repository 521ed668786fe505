"""Kernel cache: a warm process loads object code from disk without compiling;
corrupt entries are detected and rebuilt; concurrent writers don't clash."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from jaxrender import ir
    from jaxrender.lowering import stats
    from jaxrender.primitives import launch

    def body(x, s):
        i = ir.item_index()
        v = x[i]
        n, acc = ir.while_loop(lambda st: st[0] < 5, lambda st: (st[0] + 1, st[1] * s.value + v), (0, v))
        return ir.sin(acc) + ir.cast(n, "f32")

    k = ir.trace(body, {"x": ir.In("f32"), "s": ir.Scalar("f32")}, {"y": ir.Out("f32")}, name="cache_probe")
    y = np.asarray(launch(k, (6,), x=np.arange(6, dtype=np.float32), s=np.float32(0.5))["y"])
    print(json.dumps({"stats": stats, "y": y.tolist()}))
""")


def run_worker(cache_dir: Path, extra_env: dict | None = None) -> dict:
    env = dict(os.environ, JAXRENDER_CACHE_DIR=str(cache_dir))
    env.pop("JAXRENDER_DISABLE_DISK_CACHE", None)
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*.o"))


def test_second_process_loads_from_disk(tmp_path):
    first = run_worker(tmp_path)
    assert first["stats"]["compiled"] == 1 and first["stats"]["disk_hits"] == 0
    assert len(entries(tmp_path)) == 1
    second = run_worker(tmp_path)
    assert second["stats"]["compiled"] == 0 and second["stats"]["disk_hits"] == 1
    assert second["y"] == first["y"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entry_is_recompiled(tmp_path, damage):
    good = run_worker(tmp_path)
    (entry,) = entries(tmp_path)
    blob = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        b = bytearray(blob)
        b[-100] ^= 0xFF
        entry.write_bytes(bytes(b))
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(blob)))
    else:
        entry.write_bytes(b"")
    again = run_worker(tmp_path)
    assert again["stats"]["compiled"] == 1 and again["stats"]["disk_hits"] == 0
    assert again["y"] == good["y"]
    # The rewritten entry is valid again.
    third = run_worker(tmp_path)
    assert third["stats"]["disk_hits"] == 1 and third["stats"]["compiled"] == 0


def test_concurrent_processes_share_the_cache(tmp_path):
    env = dict(os.environ, JAXRENDER_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["y"] == results[0]["y"] for r in results)
    assert len(entries(tmp_path)) == 1
    assert not list(tmp_path.rglob(".tmp-*"))  # no half-written files left
    later = run_worker(tmp_path)
    assert later["stats"]["compiled"] == 0 and later["stats"]["disk_hits"] == 1


def test_unwritable_cache_dir_still_works(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    res = run_worker(blocker / "cache")
    assert res["stats"]["compiled"] == 1


def test_disabled_disk_cache(tmp_path):
    res = run_worker(tmp_path, {"JAXRENDER_DISABLE_DISK_CACHE": "1"})
    assert res["stats"]["compiled"] == 1
    assert entries(tmp_path) == []


def test_key_depends_on_code_not_on_values(tmp_path):
    """Same structure with other runtime values: one entry; a structural change: a new one."""
    run_worker(tmp_path)
    changed = WORKER.replace("st[0] < 5", "st[0] < 6")
    env = dict(os.environ, JAXRENDER_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", changed], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["stats"]["compiled"] == 1
    assert len(entries(tmp_path)) == 2


def test_key_depends_on_pipeline_codegen_target_and_lanes(monkeypatch):
    """Everything the machine code is a function of is in the key: the
    optimisation pipeline, the code generator version, the target, lanes."""
    from jaxrender import ir
    from jaxrender.lowering import cpu
    k = ir.trace(lambda x: x[ir.item_index()] * 2.0, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="key_probe")
    base, shared = cpu.kernel_key(k, 0, 8), cpu.shared_key(8)
    assert cpu.kernel_key(k, 0, 8) == base
    assert len({shared, cpu.shared_key(16), base}) == 3
    assert len({base, cpu.kernel_key(k, 1, 8), cpu.kernel_key(k, 0, 4)}) == 3
    monkeypatch.setitem(cpu.PIPELINE, "function", cpu.PIPELINE["function"][:-1])
    assert cpu.kernel_key(k, 0, 8) != base
    monkeypatch.undo()
    monkeypatch.setattr(cpu, "CODEGEN_VERSION", cpu.CODEGEN_VERSION + "x")
    assert cpu.kernel_key(k, 0, 8) != base
    monkeypatch.undo()
    monkeypatch.setattr(cpu.llvm, "get_host_cpu_name", lambda: "some-other-cpu")
    cpu._host_description.cache_clear()        # (asked of LLVM once per process)
    try:
        assert cpu.kernel_key(k, 0, 8) != base
        assert cpu.shared_key(8) != shared
    finally:
        monkeypatch.undo()
        cpu._host_description.cache_clear()
