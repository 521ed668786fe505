"""Finding the two pieces of NVIDIA's toolkit the GPU backend uses.

* ``libdevice.10.bc``: NVIDIA's math library as LLVM bitcode, linked into
  every GPU kernel (``sinf``, ``logf``, ...). Required to generate PTX.
* ``ptxas``: the PTX assembler. Optional: the CUDA driver compiles PTX
  itself when a module is loaded; ptxas is used by the tests (assemble
  every megakernel for sm_80 / sm_90 and read its register and spill
  counts) and by :func:`assemble`.

Both are searched, in order, in ``$JAXRENDER_LIBDEVICE`` / ``$JAXRENDER_PTXAS``
(a file), ``$CUDA_HOME``, ``$CUDA_PATH``, the directory above a ``ptxas`` on
``$PATH``, ``/usr/local/cuda``, and the ``nvidia-cuda-nvcc-cu12`` wheel
(``nvidia/cuda_nvcc/{bin/ptxas, nvvm/libdevice/libdevice.10.bc}``, which
``pip install jaxrender[test]`` installs). Nothing here needs a GPU.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

LIBDEVICE_REL = Path("nvvm") / "libdevice" / "libdevice.10.bc"
PTXAS_REL = Path("bin") / "ptxas"


class ToolkitError(RuntimeError):
    """A piece of the CUDA toolkit the GPU backend needs was not found."""


def _wheel_roots() -> list[Path]:
    roots = []
    for pkg in ("nvidia.cuda_nvcc", "nvidia.cu13", "nvidia.cu12"):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            roots += [Path(p) for p in spec.submodule_search_locations]
    return roots


def toolkit_roots() -> list[Path]:
    """Candidate toolkit directories, most specific first."""
    roots = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    on_path = shutil.which("ptxas")
    if on_path:
        roots.append(Path(on_path).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    roots += _wheel_roots()
    seen, out = set(), []
    for r in roots:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def _find(env: str, rel: Path) -> Path | None:
    explicit = os.environ.get(env)
    if explicit:
        p = Path(explicit)
        return p if p.is_file() else None
    for root in toolkit_roots():
        p = root / rel
        if p.is_file():
            return p
    return None


def libdevice_path() -> Path | None:
    return _find("JAXRENDER_LIBDEVICE", LIBDEVICE_REL)


def ptxas_path() -> Path | None:
    p = _find("JAXRENDER_PTXAS", PTXAS_REL)
    if p is None and not os.environ.get("JAXRENDER_PTXAS"):
        which = shutil.which("ptxas")
        p = Path(which) if which else None
    if p is not None and not os.access(p, os.X_OK):
        return None
    return p


_HINT = ("install the CUDA toolkit (and set $CUDA_HOME) or `pip install nvidia-cuda-nvcc-cu12`")


def require_libdevice() -> Path:
    p = libdevice_path()
    if p is None:
        raise ToolkitError(f"libdevice.10.bc (NVIDIA's math library) not found; {_HINT}, "
                           "or point $JAXRENDER_LIBDEVICE at the file")
    return p


def require_ptxas() -> Path:
    p = ptxas_path()
    if p is None:
        raise ToolkitError(f"ptxas not found; {_HINT}, or point $JAXRENDER_PTXAS at it")
    return p


@functools.lru_cache(maxsize=None)
def _read(path: str, mtime_ns: int) -> bytes:
    return Path(path).read_bytes()


def libdevice_bytes() -> bytes:
    p = require_libdevice()
    return _read(str(p), p.stat().st_mtime_ns)


@dataclass(frozen=True)
class PtxasReport:
    """What ``ptxas -v`` says about one kernel."""
    registers: int
    stack_frame: int        # bytes of local memory per thread
    spill_stores: int       # bytes
    spill_loads: int        # bytes
    cmem: int               # bytes of constant bank 0 (kernel parameters)
    log: str


_REG = re.compile(r"Used (\d+) registers")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def assemble(ptx: str, sm: str, extra: tuple[str, ...] = ()) -> tuple[bytes, PtxasReport]:
    """Assemble ``ptx`` for ``sm`` (e.g. ``"sm_90"``) with ptxas -O3 -v;
    returns the cubin and ptxas' resource report. Raises ToolkitError with
    ptxas' message when it rejects the PTX."""
    exe = require_ptxas()
    with tempfile.TemporaryDirectory(prefix="jaxrender-ptxas-") as d:
        src, out = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        proc = subprocess.run([str(exe), f"-arch={sm}", "-O3", "-v", *extra, "-o", str(out), str(src)],
                              capture_output=True, text=True, timeout=1800)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise ToolkitError(f"ptxas -arch={sm} rejected the PTX:\n{log[-4000:]}")
        cubin = out.read_bytes()

    def num(rx, k=1):
        m = rx.search(log)
        return int(m.group(k)) if m else 0
    return cubin, PtxasReport(num(_REG), num(_STACK, 1), num(_STACK, 2), num(_STACK, 3), num(_CMEM), log)
