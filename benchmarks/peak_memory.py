"""Peak memory of one call, measured in a fresh child process: the helpers
``bench_grad.py --parts memory`` and ``bench_volume.py``'s memory part share.

Each configuration runs in its own process (``run_child``), so that one
configuration's allocations and compiled code do not hide another's. The
child builds what it needs, compiles, then times one call under
``measure_call`` and prints its results as one ``@@``-prefixed JSON line
(``report``), which the parent reads back.

Peaks are /proc/self/status VmHWM, not ``ru_maxrss``: on Linux a child's
``ru_maxrss`` starts from its parent's peak (inherited across fork + exec),
which would hide everything below the parent's ~1 GiB. The call's own peak
is VmHWM after the call minus the RSS just before it, VmHWM being reset
through /proc/self/clear_refs after the compile.
"""
from __future__ import annotations

import json
import resource
import subprocess
import time
from typing import Any, Callable, Sequence

MARK = "@@"
OOM_TEXTS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "bad_alloc", "Cannot allocate memory",
             "MemoryError")


def mb(kb: float) -> float:
    return kb / 1024.0


def proc_status(field: str) -> float:
    """A /proc/self/status memory field in kB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")      # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def cap_address_space(gigabytes: float) -> None:
    """Cap this process's address space (0: no cap), so that a configuration
    that would exhaust the machine fails alone, as an out-of-memory error."""
    cap = int(gigabytes * (1 << 30))
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def measure_call(run: Callable[[], Any]) -> tuple[Any, dict]:
    """run() (which must return computed, not lazy, values) and its
    measurements: peak_mb (the process's peak so far, MiB), call_mb (the
    call's own peak above the RSS before it), time_s, cpu_s, ru_maxrss_mb."""
    before = mb(proc_status("VmHWM"))
    rss = mb(proc_status("VmRSS"))
    reset = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    result = run()
    out = {"time_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    hwm = mb(proc_status("VmHWM"))
    out["peak_mb"] = max(before, hwm)
    out["call_mb"] = hwm - rss if reset else float("nan")
    out["ru_maxrss_mb"] = mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return result, out


def failure(exc: BaseException) -> dict:
    """A child's failed configuration: the error, and whether it ran out of
    memory (XLA reports allocation failures as RESOURCE_EXHAUSTED)."""
    msg = f"{type(exc).__name__}: {exc}"
    return {"ok": False, "oom": isinstance(exc, MemoryError) or any(s in msg for s in OOM_TEXTS),
            "error": msg[:300]}


def report(out: dict) -> None:
    """The child's results, as the one line run_child reads back."""
    print(MARK + json.dumps(out), flush=True)


def run_child(cmd: Sequence[str], timeout: float, config: dict) -> dict:
    """Run the child command ``cmd`` and return ``config`` updated with what
    it reported (or why it reported nothing: a timeout, an out-of-memory
    kill, another failure), and wall_s, the child's whole wall time."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(config, ok=False, timeout=True, error=f"timeout after {timeout:.0f} s")
    wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if lines:
        return dict(config, **json.loads(lines[-1][len(MARK):]), wall_s=wall)
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    oom = p.returncode in (-9, -6, 137, 134) or any(s in p.stderr for s in OOM_TEXTS)
    return dict(config, ok=False, oom=oom, error=f"exit {p.returncode}: {err[:300]}", wall_s=wall)


def describe_failure(r: dict, cap: float) -> str:
    """One line for a configuration that did not run ("" if it did)."""
    if r.get("ok"):
        return ""
    if r.get("timeout"):
        return r["error"]
    if r.get("oom"):
        return f"OOM at max_depth {r['max_depth']}, spp {r['spp']} (cap {cap:g} GiB)"
    return "failed: " + r.get("error", "?")
