"""perf's map of the loaded CPU kernels' functions (lowering/perfmap.py)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.lowering import cpu, perfmap


def test_object_code_functions_and_the_perf_map(monkeypatch):
    """With JAXRENDER_PERF_MAP=1 loading a kernel appends its functions to
    /tmp/perf-<pid>.map: the handler at the address the kernel is called at,
    its worker with the size the object's symbol table gives."""
    monkeypatch.setenv(perfmap.ENV, "1")
    path = f"/tmp/perf-{os.getpid()}.map"
    existed = os.path.exists(path)
    seen = os.path.getsize(path) if existed else 0
    scale = float(np.float32(1.0 + (time.time_ns() % 1000003) * 1e-9))   # (a kernel no cache holds)

    def body(x):
        return {"y": ir.sin(x[ir.item_index()]) * scale}
    kernel = ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="perfmap_probe")
    compiled = cpu.compile_kernel(kernel)
    with open(path) as fh:
        fh.seek(seen)
        entries = {name: (int(a, 16), int(n, 16)) for a, n, name in (line.split() for line in fh)}
    if not existed:
        os.remove(path)
    handler = entries[f"jaxrender:{kernel.name}:jaxrender_handler"]
    assert handler[0] == compiled.handler_address and handler[1] > 0
    _, obj = cpu.object_code(kernel)
    sizes = dict(perfmap.functions(obj))
    assert entries[f"jaxrender:{kernel.name}:worker"][1] == sizes["worker"] > 0


def test_functions_refuses_what_is_not_elf64():
    with pytest.raises(ValueError, match="ELF64"):
        perfmap.functions(b"MZ\x90\x00" + bytes(60))
