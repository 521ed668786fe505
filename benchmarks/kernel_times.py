"""Where a jitted call's time goes, kernel by kernel (JAX's profiler).

    from kernel_times import kernel_times
    for label, ms in kernel_times(jax.jit(f), x):
        print(f"{ms:8.2f} ms  {label}")

On a GPU the times are the device's (CUPTI records each kernel, tagged with
the HLO instruction that launched it); on the CPU an FFI call runs its
kernel inside the instruction, so the host's event for that instruction is
the kernel's time. jaxrender's FFI calls are labelled with their kernel's
name (``path_adjoint_prb_bsdf_data_1bsdf_splat5``), XLA's own work with its
instruction's name.
"""
from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import tempfile

_TARGET = re.compile(r"%?([\w.\-]+) = .*custom-call\(.*custom_call_target=\"([^\"]+)\"")
_HASH = re.compile(r"_[0-9a-f]{20}$")


def _kernel_name(target: str) -> str:
    """A jaxrender FFI target's kernel name: the target less its backend
    prefix and cache-key suffix."""
    name = _HASH.sub("", target)
    for prefix in ("jaxrender_cuda_", "jaxrender_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def kernel_times(fn, *args, calls: int = 2) -> list[tuple[str, float]]:
    """``(label, milliseconds per call)`` for each kernel of ``fn(*args)``
    (``fn`` a ``jax.jit`` function), longest first, averaged over ``calls``
    profiled calls after an unprofiled one."""
    import jax
    hlo = fn.lower(*args).compile().as_text()
    labels = {}
    for line in hlo.splitlines():
        m = _TARGET.search(line)
        if m:
            labels[m.group(1)] = _kernel_name(m.group(2))
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
        (path,) = glob.glob(f"{tmp}/**/perfetto_trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    process = {e["pid"]: e.get("args", {}).get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    # a GPU computation's kernels are device events (CUPTI) tagged with their
    # HLO instruction; a CPU one's run inside the host's event of that name
    device = [e for e in spans if "gpu" in process.get(e["pid"], "").lower()]
    on_device = any(e.get("args", {}).get("hlo_op") in labels for e in device)
    totals = collections.Counter()
    for e in device if on_device else spans:
        op = e.get("args", {}).get("hlo_op", e["name"]) if on_device else e["name"]
        if on_device or op in labels:
            totals[labels.get(op, op)] += e.get("dur", 0.0)
    return [(label, us / 1e3 / calls) for label, us in totals.most_common()]
