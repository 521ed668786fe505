"""The CUDA FFI handler and its registration, checked on the CPU.

* Every offset and constant the generated handler uses is derived here
  independently from XLA's ``c_api.h`` (a small C struct-layout calculator
  for x86-64).
* The handler's LLVM IR verifies and compiles for the host for every test
  kernel and megakernel.
* Called by real XLA:CPU, the handler asks XLA for its stream through the
  API table and returns XLA's answer ("no GPU context") as a Python error.
* ``cuda.compile_kernel`` with a mocked runtime: PTX is loaded into every
  device (target = the oldest device's), the driver and function tables are
  filled, the target is registered for platform "CUDA", a second request is
  a memory hit.
* Through the CPU emulation of the GPU path (tests/gpu_emulation.py) with a
  mock driver: the calls the handler makes (stream context, zeroing the
  accumulators, grid, the error word) and its error paths.
"""
from __future__ import annotations

import ctypes
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import llvmlite.binding as llvm
import numpy as np
import pytest

from jaxrender import ir
from jaxrender.kernels.integrators import PathIntegrator
from jaxrender.lowering import cuda, cuda_ffi, emulate, ffi, ptx
from jaxrender.primitives import kernel_call as kc
from jaxrender.primitives import launch

import test_codegen_lanes
import test_control_flow
import test_ir_ops
import test_scatter_dispatch
from gpu_emulation import emulated_gpu, runtime

# ---------------------------------------------------------------------------
# 1. The ABI, from the header
# ---------------------------------------------------------------------------

HEADER = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"


class CLayout:
    """Offsets and sizes of the structs in c_api.h on x86-64 (LP64)."""

    EIGHT = {"size_t", "int64_t", "uint64_t", "intptr_t", "uintptr_t"}
    FOUR = {"int", "int32_t", "uint32_t", "unsigned", "XLA_FFI_Handler_Traits"}

    def __init__(self, text: str):
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        self.enums = set(re.findall(r"typedef enum\s*\{[^}]*\}\s*(\w+)\s*;", text, re.S))
        self.enums |= set(re.findall(r"enum\s+(\w+)\s*\{", text))
        self.bodies = {m.group(1): m.group(2) for m in
                       re.finditer(r"struct\s+(\w+)\s*\{(.*?)\}\s*\w*\s*;", text, re.S)}
        self._cache: dict = {}

    def fields(self, name: str) -> list[tuple[str, str, bool]]:
        """(field, type, is_pointer) in order."""
        out = []
        for decl in self.bodies[name].split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            m = re.fullmatch(r"_XLA_FFI_API_STRUCT_FIELD\((\w+)\)", decl)
            if m:
                out.append((m.group(1), "fnptr", True))
                continue
            m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
            if m:
                out.append((m.group(1), "fnptr", True))
                continue
            m = re.fullmatch(r"(?:const )?(?:struct )?(\w+)\s*(\*?)\s*(\*?)\s*(\w+)", decl.replace(" *", "*").replace("*", " * ").strip())
            assert m, f"cannot parse {decl!r} in {name}"
            out.append((m.group(4), m.group(1), bool(m.group(2))))
        return out

    def size_align(self, typ: str, pointer: bool) -> tuple[int, int]:
        if pointer:
            return 8, 8
        if typ in self.EIGHT:
            return 8, 8
        if typ in self.FOUR or typ in self.enums:
            return 4, 4
        if typ in self.bodies:
            lay = self.layout(typ)
            return lay["__size__"], lay["__align__"]
        raise KeyError(typ)

    def layout(self, name: str) -> dict:
        if name in self._cache:
            return self._cache[name]
        off, align, out = 0, 1, {}
        for fname, typ, ptr_ in self.fields(name):
            s, a = self.size_align(typ, ptr_)
            off = (off + a - 1) // a * a
            out[fname] = off
            out[fname + ".__end__"] = off + s
            off += s
            align = max(align, a)
        out["__size__"] = (off + align - 1) // align * align
        out["__align__"] = align
        self._cache[name] = out
        return out

    def struct_size(self, name: str, last: str) -> int:
        """XLA_FFI_STRUCT_SIZE: offsetof(last) + sizeof(last)."""
        return self.layout(name)[last + ".__end__"]


@pytest.fixture(scope="module")
def c():
    return CLayout(HEADER.read_text())


def test_call_frame_layout(c):
    f = c.layout("XLA_FFI_CallFrame")
    assert (f["extension_start"], f["api"], f["ctx"], f["stage"], f["args"], f["rets"], f["attrs"]) == \
        (8, 16, 24, 32, 40, 80, 120)
    for s in ("XLA_FFI_Args", "XLA_FFI_Rets"):
        lay = c.layout(s)
        assert (lay["size"], lay["types"]) == (16, 24)
        assert lay["args" if s == "XLA_FFI_Args" else "rets"] == 32
    a = c.layout("XLA_FFI_Attrs")
    assert (a["size"], a["types"], a["names"], a["attrs"]) == (16, 24, 32, 40)
    arr = c.layout("XLA_FFI_Array")
    assert (arr["dtype"], arr["size"], arr["data"]) == (0, 8, 16)
    b = c.layout("XLA_FFI_Buffer")
    assert (b["dtype"], b["data"], b["rank"], b["dims"]) == (16, 24, 32, 40)


def test_api_table_and_argument_structs(c):
    api = c.layout("XLA_FFI_Api")
    assert api["XLA_FFI_Error_Create"] == cuda_ffi.API_ERROR_CREATE == 48
    assert api["XLA_FFI_Stream_Get"] == cuda_ffi.API_STREAM_GET == 80
    sg = c.layout("XLA_FFI_Stream_Get_Args")
    assert (sg["ctx"], sg["stream"]) == (16, 24)
    assert c.struct_size("XLA_FFI_Stream_Get_Args", "stream") == cuda_ffi.STREAM_GET_ARGS_SIZE
    ec = c.layout("XLA_FFI_Error_Create_Args")
    assert (ec["message"], ec["errc"]) == (16, 24)
    assert c.struct_size("XLA_FFI_Error_Create_Args", "errc") == ffi.ERROR_CREATE_ARGS_SIZE
    meta = c.layout("XLA_FFI_Metadata")
    ver = c.layout("XLA_FFI_Api_Version")
    assert meta["api_version"] + ver["major_version"] == 24
    assert meta["api_version"] + ver["minor_version"] == 28
    assert meta["traits"] == 32
    assert c.layout("XLA_FFI_Metadata_Extension")["metadata"] == 24
    # Renamed XLA_FFI_InternalExtension in jaxlib 0.11, same layout.
    base = "XLA_FFI_Extension_Base" if "XLA_FFI_Extension_Base" in c.bodies else "XLA_FFI_InternalExtension"
    assert c.layout(base)["type"] == 8


def test_enum_values():
    text = HEADER.read_text()
    assert re.search(r"XLA_FFI_AttrType_ARRAY\s*=\s*(\d+)", text).group(1) == str(cuda_ffi.ATTR_ARRAY)
    assert re.search(r"XLA_FFI_DataType_S64\s*=\s*(\d+)", text).group(1) == str(cuda_ffi.DTYPE_S64)
    assert re.search(r"XLA_FFI_ExecutionStage_EXECUTE\s*=\s*(\d+)", text).group(1) == str(cuda_ffi.STAGE_EXECUTE)
    assert re.search(r"XLA_FFI_Error_Code_INVALID_ARGUMENT\s*=\s*(\d+)", text).group(1) == \
        str(ffi.ERRC_INVALID_ARGUMENT)


def test_driver_signatures_match_cuda_h():
    """Where a toolkit header is at hand, the driver functions the handler
    calls have the argument counts the handler passes."""
    from jaxrender.lowering import toolkit
    hdr = next((r / "include" / "cuda.h" for r in toolkit.toolkit_roots()
                if (r / "include" / "cuda.h").is_file()), None)
    if hdr is None:
        pytest.skip("cuda.h not found (no CUDA toolkit)")
    text = hdr.read_text(errors="replace")
    for name, params in cuda_ffi.DRIVER_FUNCTIONS:
        m = re.search(rf"CUresult CUDAAPI {name}\(([^)]*)\)", text)
        assert m, name
        assert len(m.group(1).split(",")) == len(params), name


# ---------------------------------------------------------------------------
# 2. The handler compiles for the host
# ---------------------------------------------------------------------------

HANDLER_KERNELS = {
    "kitchen_sink": test_codegen_lanes.kitchen_sink, "float_ops": test_ir_ops.float_kernel,
    "loop_with_checks": test_control_flow.loop_with_cond_kernel,
    "vector_accum": test_scatter_dispatch.vector_accum_kernel,
    "path": lambda: PathIntegrator().primal_kernel(),
    "adjoint_prb": lambda: PathIntegrator().adjoint_kernel(("bsdf_data", "emitter_radiance"), "prb"),
}


@pytest.mark.parametrize("name", sorted(HANDLER_KERNELS))
@pytest.mark.parametrize("nb", [0, 2])
def test_handler_verifies_and_compiles(name, nb):
    k = HANDLER_KERNELS[name]()
    text = cuda_ffi.generate_handler_ir(k, nb, llvm.get_process_triple())
    mod = llvm.parse_assembly(text)
    mod.verify()
    obj = cuda.handler_object(k, nb)
    h = cuda.load_handler(obj)
    assert h.address and h.driver_table and h.function_table and h.function_count
    assert ctypes.c_int64.from_address(h.function_count).value == 0
    assert cuda_ffi.has_error_buffer(k) == bool(k.messages)


# ---------------------------------------------------------------------------
# 3. Real XLA asks... and answers
# ---------------------------------------------------------------------------

def _double():
    return ir.trace(lambda x: x[ir.item_index()] * 2.0, {"x": ir.In("f32")}, {"y": ir.Out("f32")},
                    name="double_it")


def _call_direct(ck, k, x, launch_shape=None, rows=()):
    launch_shape = launch_shape or (len(x),)
    info = kc._launch_info(k, [x.shape], launch_shape, rows, (), ((),), 1)
    outs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in kc._out_avals(k, launch_shape, rows, ())]
    return cuda.ffi_call(ck, outs, info, jnp.asarray(info.view(np.int32)), jnp.asarray(x))


def test_xla_cpu_answers_the_stream_request_with_an_error():
    """XLA:CPU has no stream: the handler's XLA_FFI_Stream_Get call (API slot
    80, args struct with the execution context) returns XLA's error, which the
    handler hands back; nothing reaches the driver."""
    rt = emulate.EmulatedRuntime(xla_stream=True, name_suffix="_xla_stream")
    k = _double()
    ck = cuda.compile_kernel(k, 0, runtime_=rt)
    with pytest.raises(Exception, match="(?i)gpu context"):
        np.asarray(_call_direct(ck, k, np.arange(4, dtype=np.float32))[0])
    assert rt.driver.calls == []


# ---------------------------------------------------------------------------
# 4. Registration with a mocked runtime
# ---------------------------------------------------------------------------

class RecordingRuntime:
    """Two fake GPUs (compute capability 9.0 and 8.6)."""
    xla_stream = True
    name_suffix = "_recording"

    def __init__(self):
        self.loads, self.registered = [], []

    def devices(self):
        return [0, 1]

    def compute_capability(self, ordinal):
        return [(9, 0), (8, 6)][ordinal]

    def load(self, image, ordinal, symbol, source=None):
        self.loads.append((image, ordinal, symbol))
        return 0x1000 + ordinal, 0x2000 + ordinal, f"module{ordinal}"

    def driver_addresses(self):
        return {name: 0x100 + k for k, (name, _) in enumerate(cuda_ffi.DRIVER_FUNCTIONS)}

    def register(self, name, address):
        self.registered.append((name, address))


def test_compile_kernel_loads_every_device_and_fills_the_tables():
    rt = RecordingRuntime()
    k = _double()
    ck = cuda.compile_kernel(k, 0, runtime_=rt)
    assert ck.sm == 86  # the oldest device's target; its PTX runs on the newer one
    assert [(o, s) for _, o, s in rt.loads] == [(0, ptx.KERNEL_SYMBOL), (1, ptx.KERNEL_SYMBOL)]
    image = rt.loads[0][0]
    assert image.endswith(b"\0") and b".target sm_86" in image and b".entry jaxrender_kernel" in image
    assert rt.registered == [(ck.target_name, ck.handler.address)]
    assert ck.target_name.startswith("jaxrender_cuda_double_it_")
    drv = (ctypes.c_void_p * len(cuda_ffi.DRIVER_FUNCTIONS)).from_address(ck.handler.driver_table)
    assert list(drv) == [0x100 + k for k in range(len(cuda_ffi.DRIVER_FUNCTIONS))]
    assert ctypes.c_int64.from_address(ck.handler.function_count).value == 2
    table = (ctypes.c_void_p * 4).from_address(ck.handler.function_table)
    assert list(table) == [0x1000, 0x2000, 0x1001, 0x2001]
    assert ck.modules == ["module0", "module1"]
    hits = cuda.stats["memory_hits"]
    assert cuda.compile_kernel(k, 0, runtime_=rt) is ck
    assert cuda.stats["memory_hits"] == hits + 1 and len(rt.loads) == 2


def test_driver_runtime_registers_for_the_cuda_platform(monkeypatch):
    seen = []
    monkeypatch.setattr(jax.ffi, "register_ffi_target",
                        lambda name, fn, platform, api_version: seen.append((name, platform, api_version)))
    cuda.DriverRuntime.register(object.__new__(cuda.DriverRuntime), "jaxrender_probe", 0x1234)
    assert seen == [("jaxrender_probe", "CUDA", 1)]


def test_no_cuda_import_on_a_cpu_only_install():
    """Rendering on the CPU never imports the CUDA modules or cuda-python."""
    code = ("import sys, numpy as np, jaxrender\n"
            "from jaxrender import ir\nfrom jaxrender.primitives import launch\n"
            "k = ir.trace(lambda x: x[ir.item_index()] + 1.0, {'x': ir.In('f32')}, {'y': ir.Out('f32')})\n"
            "launch(k, (3,), x=np.zeros(3, np.float32))\n"
            "bad = [m for m in sys.modules if m.startswith(('cuda', 'jaxrender.lowering.cuda', "
            "'jaxrender.lowering.ptx', 'jaxrender.lowering.emulate'))]\n"
            "print(bad)\nassert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr + out.stdout


# ---------------------------------------------------------------------------
# 5. Through the emulated GPU path: what the handler asks of the driver
# ---------------------------------------------------------------------------

def _accum_kernel():
    def body(x, w, acc, hist):
        i = ir.item_index()
        v = x[i]
        acc.scatter_add(i % 5, v * w.value, component=1)
        hist.scatter_add(ir.cast(v, "i32"), 1)
        return {"y": v + 1.0, "n": ir.launch_size()}
    return ir.trace(body, {"x": ir.In("f32"), "w": ir.Scalar("f32")},
                    {"y": ir.Out("f32"), "n": ir.Out("u32"), "acc": ir.Accum("f32", (2,)),
                     "hist": ir.Accum("i32")}, name="accum_probe")


ACCUM = _accum_kernel()


def _run_accum(x, w=2.0):
    out = launch(ACCUM, (len(x),), {"acc": 5, "hist": 7}, x=x, w=np.float32(w))
    return {k: np.asarray(v) for k, v in out.items()}


def _calls(rt, start):
    return rt.driver.calls[start:]


def test_emulated_launch_marshals_buffers_like_the_cpu_abi():
    x = np.arange(300, dtype=np.float32) % 9
    want = _run_accum(x)
    with emulated_gpu() as rt:
        start = len(rt.driver.calls)
        got = _run_accum(x)
        calls = _calls(rt, start)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    names = [c.name for c in calls]
    assert names == ["cuStreamGetCtx", "cuMemsetD32Async", "cuMemsetD32Async", "cuLaunchKernel"]
    # 32-bit words of each accumulator: the float one is float64 on the device
    assert [c.args[2] for c in calls[1:3]] == [5 * 2 * 2, 7]
    f, grid, block, smem, stream, extra = calls[3].args
    assert grid == (-(-300 // ptx.BLOCK_SIZE), 1, 1) and block == (ptx.BLOCK_SIZE, 1, 1)
    assert smem == 0 and extra is None


def test_emulated_launch_under_jit_and_vmap():
    xs = np.stack([np.arange(130, dtype=np.float32) % 7, np.arange(130, dtype=np.float32) % 3])
    ws = np.float32([1.0, -0.5])

    def f(x, w):
        out = launch(ACCUM, (130,), {"acc": 5, "hist": 7}, x=x, w=w)
        return out["y"], out["acc"], out["hist"]
    want = jax.jit(jax.vmap(f))(xs, ws)
    with emulated_gpu() as rt:
        start = len(rt.driver.calls)
        got = jax.jit(jax.vmap(f))(xs, ws)
        got = [np.asarray(g) for g in got]
        calls = _calls(rt, start)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))
    (launch_call,) = [c for c in calls if c.name == "cuLaunchKernel"]
    assert launch_call.args[1][0] * ptx.BLOCK_SIZE >= 2 * 130


def test_emulated_empty_launch_still_zeroes_accumulators():
    with emulated_gpu() as rt:
        start = len(rt.driver.calls)
        got = _run_accum(np.zeros(0, np.float32))
        names = [c.name for c in _calls(rt, start)]
    assert not got["acc"].any() and not got["hist"].any() and got["y"].shape == (0,)
    assert "cuLaunchKernel" not in names and names.count("cuMemsetD32Async") == 2


def _checked():
    def body(x):
        v = x[ir.item_index()]
        ir.check(v >= 0.0, "x must be non-negative")
        ir.check(v < 100.0, "x must be below 100")
        return v * 3.0
    return ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="checked_probe")


CHECKED = _checked()


def test_emulated_failed_check_raises_with_its_message():
    with emulated_gpu() as rt:
        y = np.asarray(launch(CHECKED, (4,), x=np.float32([1, 2, 3, 4]))["y"])
        np.testing.assert_array_equal(y, [3, 6, 9, 12])
        start = len(rt.driver.calls)
        with pytest.raises(Exception, match="check failed: x must be below 100"):
            np.asarray(launch(CHECKED, (3,), x=np.float32([1, 200, 3]))["y"])
        names = [c.name for c in _calls(rt, start)]
    # The error word is zeroed, read back, and the stream synchronised.
    assert names == ["cuStreamGetCtx", "cuMemsetD32Async", "cuLaunchKernel", "cuMemcpyDtoHAsync_v2",
                     "cuStreamSynchronize"]


@pytest.mark.parametrize("fn", ["cuStreamGetCtx", "cuMemsetD32Async", "cuLaunchKernel"])
def test_emulated_driver_errors_become_python_errors(fn):
    with emulated_gpu() as rt:
        rt.driver.fail[fn] = 700
        try:
            with pytest.raises(Exception, match=f"{fn} failed with CUDA error 700"):
                _run_accum(np.arange(10, dtype=np.float32))
        finally:
            rt.driver.fail.clear()


def test_emulated_kernel_missing_for_the_stream_context_is_an_error():
    with emulated_gpu() as rt:
        _run_accum(np.arange(3, dtype=np.float32))  # compiled and loaded for CU_CTX
        rt.driver.context = 0xBAD0000
        try:
            with pytest.raises(Exception, match="not loaded in the CUDA context"):
                _run_accum(np.arange(3, dtype=np.float32))
        finally:
            rt.driver.context = emulate.CU_CTX


def test_wrong_launch_info_attribute_or_buffer_size_is_rejected():
    """The host side checks the attribute it reads the launch info from, and
    every buffer against it."""
    k = _double()
    ck = cuda.compile_kernel(k, 0, runtime_=runtime())
    x = np.arange(4, dtype=np.float32)
    info = kc._launch_info(k, [x.shape], (4,), (), (), ((),), 1)
    call = jax.ffi.ffi_call(ck.target_name, [jax.ShapeDtypeStruct((4,), np.float32)])
    info32 = jnp.asarray(info.view(np.int32))
    with pytest.raises(Exception, match="launch info attribute must be an int64 array"):
        np.asarray(call(info32, jnp.asarray(x), info=info[:-1])[0])
    with pytest.raises(Exception, match="launch info attribute must be an int64 array"):
        np.asarray(call(info32, jnp.asarray(x), info=info.astype(np.int32))[0])
    with pytest.raises(Exception, match="input 'x' has a different number of elements"):
        np.asarray(call(info32, jnp.arange(5, dtype=jnp.float32), info=info)[0])
    np.testing.assert_array_equal(np.asarray(call(info32, jnp.asarray(x), info=info)[0]), 2 * x)


def test_ptx_is_cached_on_disk_with_the_cpu_objects(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRENDER_CACHE_DIR", str(tmp_path))
    k = ir.trace(lambda x: x[ir.item_index()] - 1.0, {"x": ir.In("f32")}, {"y": ir.Out("f32")},
                 name="cache_probe_gpu")
    before = dict(ptx.stats)
    key, text = ptx.ptx_for(k, 0, 80)
    assert ptx.stats["compiled"] == before["compiled"] + 1
    assert ptx.ptx_for(k, 0, 80) == (key, text)
    assert ptx.stats["disk_hits"] == before["disk_hits"] + 1
    assert (tmp_path / key[:2] / f"{key}.ptx").is_file()
    assert len({key, ptx.ptx_key(k, 0, 90), ptx.ptx_key(k, 1, 80)}) == 3
    cuda.handler_object(k, 0)
    assert (tmp_path / cuda.handler_key(k, 0)[:2] / f"{cuda.handler_key(k, 0)}.o").is_file()
