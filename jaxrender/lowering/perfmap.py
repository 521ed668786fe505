"""Names for the machine code of loaded CPU kernels in Linux ``perf``.

``perf`` attributes samples in code it has no file for through
``/tmp/perf-<pid>.map`` (one line per function: start address and size in
hex, then its name). With ``JAXRENDER_PERF_MAP=1`` every kernel (and the
shared BVH traversal routines) that :func:`jaxrender.lowering.cpu.load_object`
links appends its functions there, named ``jaxrender:<label>:<symbol>``,
so that ``perf report --sort sym`` tells a kernel's body (``worker``) from
its ray queries. The functions and their sizes come from the object
code's ELF symbol table; the addresses from the engine that loaded it.

Example::

    JAXRENDER_PERF_MAP=1 perf record -F 999 python render_a_lot.py
    perf report --no-children --sort sym    # jaxrender:path_smooth_1bsdf_splat5:worker 41.8% ...
"""
from __future__ import annotations

import os
import struct

ENV = "JAXRENDER_PERF_MAP"
_SHT_SYMTAB = 2
_STT_FUNC = 2


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def functions(obj: bytes) -> list[tuple[str, int]]:
    """(name, size in bytes) of each function with a size in the ELF64
    little-endian object code ``obj``."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != _SHT_SYMTAB or entsize == 0:
            continue
        strtab_offset = sections[link][4]
        for k in range(size // entsize):
            name_at, info, _, _, _, sym_size = struct.unpack_from("<IBBHQQ", obj, offset + k * entsize)
            if info & 0xF == _STT_FUNC and sym_size > 0:
                start = strtab_offset + name_at
                out.append((obj[start:obj.index(b"\0", start)].decode(), sym_size))
    return out


def record(engine, obj: bytes, label: str) -> None:
    """Append the functions of ``obj``, loaded by the MCJIT ``engine``, to
    this process's perf map (where :func:`enabled`)."""
    lines = []
    for name, size in functions(obj):
        address = engine.get_function_address(name)
        if address:
            lines.append(f"{address:x} {size:x} jaxrender:{label}:{name}\n")
    with open(f"/tmp/perf-{os.getpid()}.map", "a") as fh:
        fh.writelines(lines)
