"""Run the GPU code path on the CPU (for tests on machines without a GPU).

Two pieces:

* :func:`compile_emulated_kernel` builds the *GPU* kernel module (the same
  :class:`~.ptx.GpuItemCodegen` code, the same ``jaxrender_kernel`` entry
  and grid-stride loop, the same libdevice functions) for the host instead
  of ``nvptx64``. libdevice's NVVM intrinsics become small host functions
  with the PTX instructions' semantics (``fma.rn.f32`` -> ``llvm.fma.f32``,
  ``cvt.rni.s32.f32`` -> round-half-even then saturate, ...), and
  ``__nvvm_reflect`` folds as on the GPU (FTZ 0). For the functions built
  from IEEE operations and exact integer arithmetic only (sin, cos, log,
  log2, exp, exp2, atan2 as the GPU lowering calls them) the host computes
  the bits the GPU computes. The others use approximate hardware
  instructions (:data:`APPROXIMATE_FUNCTIONS`), emulated with correctly
  rounded values: erf's ``ex2.approx.ftz.f32`` reaches the result (NVIDIA
  documents erff at 2 ulp); tan, atan, pow, asin and acos (in double) use
  ``rcp`` / ``rsqrt.approx.ftz.f64`` only as seeds of Newton steps, so the
  float results differ from the GPU's at most in rare near-ties.
* :class:`EmulatedRuntime` stands in for the CUDA driver in
  :func:`.cuda.compile_kernel`: the generated CUDA handler (built with
  ``xla_stream=False``) is registered with XLA:CPU, and its driver table
  points at ctypes callbacks that do on host memory what the driver would
  (``cuMemsetD32Async``, ``cuMemcpyDtoHAsync``, ...) and run the emulated
  kernel for ``cuLaunchKernel``, recording every call.

So on a CPU-only machine the tests exercise the primitive's CUDA lowering,
the handler's buffer and attribute marshalling, accumulator zeroing, the
error word, the kernel entry and GPU math, through real XLA under jit, vmap
and grad. What they cannot exercise: PTX on a GPU, ptxas/driver code
generation, XLA's GPU stream, and the real driver.
"""
from __future__ import annotations

import ctypes
import functools
import re
import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir as ll

from ..ir.kernel import Kernel
from . import ptx
from .codegen import _ieee_float_mode, ptr
from .cpu import CompileError, _new_target_machine, target_machine

LAUNCH_SYMBOL = "jaxrender_emu_launch"
REFLECT = {"__CUDA_FTZ": 0, "__CUDA_PREC_SQRT": 1, "__CUDA_ARCH": 800}

# name -> (return type, parameter types, body using %a %b %c, approximate?)
_SHIMS = {
    "fma.rn.f": ("float", ["float"] * 3, "%r = call float @llvm.fma.f32(float %a, float %b, float %c)"),
    "mul.rn.f": ("float", ["float"] * 2, "%r = fmul float %a, %b"),
    "add.rn.f": ("float", ["float"] * 2, "%r = fadd float %a, %b"),
    "div.rn.f": ("float", ["float"] * 2, "%r = fdiv float %a, %b"),
    "fabs.f32": ("float", ["float"], "%r = call float @llvm.fabs.f32(float %a)"),
    "fabs.f": ("float", ["float"], "%r = call float @llvm.fabs.f32(float %a)"),
    "floor.f": ("float", ["float"], "%r = call float @llvm.floor.f32(float %a)"),
    "trunc.f": ("float", ["float"], "%r = call float @llvm.trunc.f32(float %a)"),
    "ceil.f": ("float", ["float"], "%r = call float @llvm.ceil.f32(float %a)"),
    "round.f": ("float", ["float"], "%r = call float @llvm.roundeven.f32(float %a)"),      # cvt.rni
    "f2i.rn": ("i32", ["float"], "%t = call float @llvm.roundeven.f32(float %a)\n"
                                 "  %r = call i32 @llvm.fptosi.sat.i32.f32(float %t)"),
    "saturate.f": ("float", ["float"], "%p = fcmp ogt float %a, 0.0\n  %m = call float @llvm.minnum.f32(float %a, float 1.0)\n"
                                       "  %r = select i1 %p, float %m, float 0.0"),
    "fma.rn.d": ("double", ["double"] * 3, "%r = call double @llvm.fma.f64(double %a, double %b, double %c)"),
    "mul.rn.d": ("double", ["double"] * 2, "%r = fmul double %a, %b"),
    "add.rn.d": ("double", ["double"] * 2, "%r = fadd double %a, %b"),
    "div.rn.d": ("double", ["double"] * 2, "%r = fdiv double %a, %b"),
    "fabs.f64": ("double", ["double"], "%r = call double @llvm.fabs.f64(double %a)"),
    "fabs.d": ("double", ["double"], "%r = call double @llvm.fabs.f64(double %a)"),
    "trunc.d": ("double", ["double"], "%r = call double @llvm.trunc.f64(double %a)"),
    "floor.d": ("double", ["double"], "%r = call double @llvm.floor.f64(double %a)"),
    "round.d": ("double", ["double"], "%r = call double @llvm.roundeven.f64(double %a)"),
    "d2i.rn": ("i32", ["double"], "%t = call double @llvm.roundeven.f64(double %a)\n"
                                  "  %r = call i32 @llvm.fptosi.sat.i32.f64(double %t)"),
    "d2i.hi": ("i32", ["double"], "%w = bitcast double %a to i64\n  %s = lshr i64 %w, 32\n  %r = trunc i64 %s to i32"),
    "d2i.lo": ("i32", ["double"], "%w = bitcast double %a to i64\n  %r = trunc i64 %w to i32"),
    "lohi.i2d": ("double", ["i32", "i32"], "%l = zext i32 %a to i64\n  %h = zext i32 %b to i64\n"
                                           "  %s = shl i64 %h, 32\n  %w = or i64 %s, %l\n  %r = bitcast i64 %w to double"),
    # Approximate hardware instructions: emulated with (nearly) correctly
    # rounded values; the GPU's differ in the last bits.
    "ex2.approx.ftz.f32": ("float", ["float"], "%d = fpext float %a to double\n  %e = call double @exp2(double %d)\n"
                                               "  %t = fptrunc double %e to float\n"
                                               "  %r = call float @__jr_ftz(float %t)"),
    "ex2.approx.f32": ("float", ["float"], "%d = fpext float %a to double\n  %e = call double @exp2(double %d)\n"
                                           "  %r = fptrunc double %e to float"),
    "rsqrt.approx.ftz.f": ("float", ["float"], "%d = fpext float %a to double\n  %s = call double @llvm.sqrt.f64(double %d)\n"
                                               "  %q = fdiv double 1.0, %s\n  %t = fptrunc double %q to float\n"
                                               "  %r = call float @__jr_ftz(float %t)"),
    "div.approx.f": ("float", ["float"] * 2, "%r = fdiv float %a, %b"),
    "rcp.approx.ftz.d": ("double", ["double"], "%r = fdiv double 1.0, %a"),
}
APPROXIMATE = frozenset({"ex2.approx.ftz.f32", "ex2.approx.f32", "rsqrt.approx.ftz.f", "div.approx.f",
                         "rcp.approx.ftz.d"})
# libdevice functions of the GPU lowering whose emulation is approximate,
# with the instruction (tests/test_gpu_ptx.py checks that these are the only
# .approx instructions in the PTX).
APPROXIMATE_FUNCTIONS = {"__nv_erff": "ex2.approx.ftz.f32",
                         "__nv_tan": "rcp.approx.ftz.f64", "__nv_atan": "rcp.approx.ftz.f64",
                         "__nv_pow": "rcp.approx.ftz.f64", "__nv_asin": "rsqrt.approx.ftz.f64",
                         "__nv_acos": "rsqrt.approx.ftz.f64"}

# libdevice's inline PTX, recognised by a fragment of the asm string ->
# (shim name, return type, parameter types, body). The integer ones are
# exact (32x32+32 -> 64 and 128-bit multiply / add / subtract for the
# Payne-Hanek argument reductions); the reciprocal / square-root ones are
# hardware approximations, emulated with (nearly) correctly rounded values.
_ASM = {
    "mad.lo.cc.u32   $0, $2, $3, $4;": ("madwide32", "{ i32, i32 }", ["i32"] * 3, """
  %x = zext i32 %a to i64
  %y = zext i32 %b to i64
  %z = zext i32 %c to i64
  %p = mul i64 %x, %y
  %s = add i64 %p, %z
  %lo = trunc i64 %s to i32
  %sh = lshr i64 %s, 32
  %hi = trunc i64 %sh to i32
  %r0 = insertvalue { i32, i32 } undef, i32 %lo, 0
  %r = insertvalue { i32, i32 } %r0, i32 %hi, 1"""),
    "mul.lo.u32      r0, alo, blo;": ("mul128", "{ i64, i64 }", ["i64"] * 2, """
  %x = zext i64 %a to i128
  %y = zext i64 %b to i128
  %s = mul i128 %x, %y""" + "{split}"),
    "mad.lo.cc.u32   r0, alo, blo, clo;": ("mad128", "{ i64, i64 }", ["i64"] * 3, """
  %x = zext i64 %a to i128
  %y = zext i64 %b to i128
  %z = zext i64 %c to i128
  %p = mul i128 %x, %y
  %s = add i128 %p, %z""" + "{split}"),
    "add.cc.u32      r0, a0, b0;": ("add128", "{ i64, i64 }", ["i64"] * 4, "{join}\n  %s = add i128 %x, %y{split}"),
    "sub.cc.u32      r0, a0, b0;": ("sub128", "{ i64, i64 }", ["i64"] * 4, "{join}\n  %s = sub i128 %x, %y{split}"),
    "sub.rn.f32 $0, $1, $2;": ("fsub32", "float", ["float"] * 2, "\n  %r = fsub float %a, %b"),
    "sub.rn.f64 $0, $1, $2;": ("fsub64", "double", ["double"] * 2, "\n  %r = fsub double %a, %b"),
    "rcp.approx.ftz.f32 $0,$1;": ("rcp32", "float", ["float"], """
  %f = call float @__jr_ftz(float %a)
  %q = fdiv float 1.0, %f
  %r = call float @__jr_ftz(float %q)"""),
    "rsqrt.approx.ftz.f64 $0, $1;": ("rsqrt64", "double", ["double"], """
  %s = call double @llvm.sqrt.f64(double %a)
  %r = fdiv double 1.0, %s"""),
}
_ASM_APPROXIMATE = frozenset({"rcp32", "rsqrt64"})
_SPLIT = """
  %lo = trunc i128 %s to i64
  %sh = lshr i128 %s, 64
  %hi = trunc i128 %sh to i64
  %r0 = insertvalue { i64, i64 } undef, i64 %lo, 0
  %r = insertvalue { i64, i64 } %r0, i64 %hi, 1"""
_JOIN = """
  %al = zext i64 %a to i128
  %ah0 = zext i64 %b to i128
  %ah = shl i128 %ah0, 64
  %x = or i128 %al, %ah
  %bl = zext i64 %c to i128
  %bh0 = zext i64 %d to i128
  %bh = shl i128 %bh0, 64
  %y = or i128 %bl, %bh"""


def _asm_shims() -> str:
    out = []
    for frag, (name, ret, params, body) in _ASM.items():
        names = ["%a", "%b", "%c", "%d"]
        sig = ", ".join(f"{t} {names[k]}" for k, t in enumerate(params))
        body = body.replace("{split}", _SPLIT).replace("{join}", _JOIN)
        out.append(f"define internal {ret} @__jr_asm.{name}({sig}) alwaysinline {{{body}\n  ret {ret} %r\n}}\n")
    return "".join(out)


def _replace_asm(src: str) -> str:
    def sub(m):
        text = m.group(2)
        for frag, (name, *_rest) in _ASM.items():
            if frag in text:
                return f"call {m.group(1)} @__jr_asm.{name}("
        return m.group(0)  # unknown: left as is (an error if it survives dead-code elimination)
    return re.sub(r'call ((?:\{ [^}]* \})|\S+) asm (?:sideeffect )?"((?:[^"\\]|\\.)*)", "[^"]*"\(', sub, src)


_PRELUDE = """
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.fabs.f32(float)
declare float @llvm.floor.f32(float)
declare float @llvm.trunc.f32(float)
declare float @llvm.ceil.f32(float)
declare float @llvm.roundeven.f32(float)
declare float @llvm.minnum.f32(float, float)
declare i32 @llvm.fptosi.sat.i32.f32(float)
declare double @llvm.fma.f64(double, double, double)
declare double @llvm.fabs.f64(double)
declare double @llvm.trunc.f64(double)
declare double @llvm.floor.f64(double)
declare double @llvm.roundeven.f64(double)
declare double @llvm.sqrt.f64(double)
declare i32 @llvm.fptosi.sat.i32.f64(double)
declare double @exp2(double)
define internal float @__jr_ftz(float %a) alwaysinline {
  %m = call float @llvm.fabs.f32(float %a)
  %d = fcmp olt float %m, 0x3810000000000000
  %z = call float @llvm.copysign.f32(float 0.0, float %a)
  %r = select i1 %d, float %z, float %a
  ret float %r
}
declare float @llvm.copysign.f32(float, float)
"""


def _shim_text(name: str) -> str:
    ret, params, body = _SHIMS[name]
    names = ["%a", "%b", "%c"]
    sig = ", ".join(f"{t} {names[k]}" for k, t in enumerate(params))
    return f"define internal {ret} @__jr_nvvm.{name}({sig}) alwaysinline {{\n  {body}\n  ret {ret} %r\n}}\n"


@functools.lru_cache(maxsize=4)
def _emulated_libdevice_text(libdevice: bytes, triple: str, layout: str) -> str:
    src = str(llvm.parse_bitcode(libdevice))
    strings = {g: s for g, s in re.findall(r'^(@[\w.]+) = [^\n]*c"(__CUDA_\w+)\\00"', src, re.M)}

    def reflect(m):
        return f"add i32 0, {REFLECT[strings[m.group(1)]]}"
    src = re.sub(r"call i32 @__nvvm_reflect\(ptr (@[\w.]+)\)(?: #\d+)?", reflect, src)

    def decl(m):
        return "" if m.group(1) in _SHIMS else m.group(0)
    src = re.sub(r"^declare [^\n]*@llvm\.nvvm\.([\w.]+)\([^\n]*$\n?", decl, src, flags=re.M)
    src = src.replace("@llvm.nvvm.", "@__jr_nvvm.")
    src = _replace_asm(src)
    src = re.sub(r'^target triple = "[^"]*"', f'target triple = "{triple}"', src, flags=re.M)
    src = re.sub(r'^target datalayout = "[^"]*"', f'target datalayout = "{layout}"', src, flags=re.M)
    prelude = []
    for line in _PRELUDE.splitlines():  # declare only what libdevice does not
        m = re.match(r"declare [^@]*(@[\w.]+)\(", line)
        if m and re.search(rf"^declare [^\n]*{re.escape(m.group(1))}\(", src, re.M):
            continue
        prelude.append(line)
    return src + "\n".join(prelude) + "\n" + "".join(_shim_text(n) for n in _SHIMS) + _asm_shims()


def emulated_libdevice() -> llvm.ModuleRef:
    """libdevice for the host, NVVM intrinsics replaced by host code."""
    from .toolkit import libdevice_bytes
    tm = target_machine()
    return llvm.parse_assembly(_emulated_libdevice_text(libdevice_bytes(), llvm.get_process_triple(),
                                                        str(tm.target_data)))


def _build_launcher(kernel: Kernel) -> str:
    """A module with ``void jaxrender_emu_launch(void** params)``: call the
    kernel with ``*params[k]`` as argument k, like cuLaunchKernel does."""
    m = ll.Module()
    m.triple = llvm.get_process_triple()
    n = ptx.kernel_param_count(kernel)
    kfn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr] * n), ptx.KERNEL_SYMBOL)
    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr]), LAUNCH_SYMBOL)
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    # The GPU keeps denormals; XLA's threads flush them (MXCSR FTZ/DAZ).
    restore = _ieee_float_mode(m, b)
    args = []
    for k in range(n):
        slot = b.load(b.gep(fn.args[0], [ll.Constant(ll.IntType(64), k)], source_etype=ptr), typ=ptr)
        args.append(b.load(slot, typ=ptr))
    b.call(kfn, args)
    restore(b)
    b.ret_void()
    return str(m)


@dataclass
class EmulatedKernel:
    engine: object
    launch: object           # ctypes function (void**) -> None
    approximate: tuple       # libdevice functions whose emulation is approximate


def compile_emulated_kernel(kernel: Kernel, nb: int = 0) -> EmulatedKernel:
    """The GPU kernel compiled for the host (see the module docstring)."""
    text = ptx.generate_llvm_ir(kernel, nb, emulate=True)
    tm = target_machine()
    try:
        mod = llvm.parse_assembly(text)
        mod.data_layout = str(tm.target_data)
        launcher = llvm.parse_assembly(_build_launcher(kernel))
        launcher.data_layout = mod.data_layout
        mod.link_in(launcher)
        if ptx.libdevice_functions(text):
            ptx.link_libdevice(mod, emulated_libdevice())
            for f in mod.functions:
                if f.name == LAUNCH_SYMBOL:
                    f.linkage = llvm.Linkage.external
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"emulated GPU module is invalid: {exc}") from exc
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    missing = sorted(f.name for f in mod.functions if f.is_declaration and f.name.startswith("__jr_nvvm."))
    if missing:
        raise CompileError(f"the GPU emulator lacks NVVM intrinsics {missing}")
    if " asm " in str(mod):
        raise CompileError("the GPU emulator met inline PTX it does not know in a libdevice function")
    used = tuple(f for f in ptx.libdevice_functions(text) if f in APPROXIMATE_FUNCTIONS)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
    engine.add_module(mod)
    engine.finalize_object()
    addr = engine.get_function_address(LAUNCH_SYMBOL)
    launch = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)
    return EmulatedKernel(engine, launch, used)


# ---------------------------------------------------------------------------
# A mock CUDA driver on host memory
# ---------------------------------------------------------------------------

CU_CTX = 0xC0DE0000          # the one fake CUcontext
_FUNC_BASE = 0xF0000000      # fake CUfunction handles: base + index


@dataclass
class Call:
    name: str
    args: tuple


class MockDriver:
    """ctypes callbacks with the driver functions' C signatures. Launches
    run emulated kernels; ``fail[name] = code`` makes a call return that
    CUresult; ``context`` is the CUcontext of every stream; ``calls``
    records every call in order."""

    def __init__(self):
        self.calls: list[Call] = []
        self.fail: dict[str, int] = {}
        self.kernels: list[EmulatedKernel] = []
        self.context = CU_CTX       # what cuStreamGetCtx answers
        self._lock = threading.Lock()
        C = ctypes
        self._fns = {
            "cuStreamGetCtx": C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)(self._stream_get_ctx),
            "cuMemsetD32Async": C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_uint, C.c_size_t, C.c_void_p)(self._memset),
            "cuLaunchKernel": C.CFUNCTYPE(C.c_int, C.c_void_p, *([C.c_uint] * 7), C.c_void_p, C.c_void_p,
                                          C.c_void_p)(self._launch),
            "cuMemcpyDtoHAsync_v2": C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_uint64, C.c_size_t, C.c_void_p)(self._dtoh),
            "cuStreamSynchronize": C.CFUNCTYPE(C.c_int, C.c_void_p)(self._sync),
        }

    def addresses(self) -> dict[str, int]:
        return {k: ctypes.cast(f, ctypes.c_void_p).value for k, f in self._fns.items()}

    def add_kernel(self, k: EmulatedKernel) -> int:
        with self._lock:
            self.kernels.append(k)
            return _FUNC_BASE + len(self.kernels) - 1

    def _record(self, name, *args) -> int:
        with self._lock:
            self.calls.append(Call(name, args))
        return self.fail.get(name, 0)

    def _stream_get_ctx(self, stream, pctx):
        rc = self._record("cuStreamGetCtx", stream)
        if rc == 0:
            ctypes.c_void_p.from_address(pctx).value = self.context
        return rc

    def _memset(self, dptr, value, n, stream):
        rc = self._record("cuMemsetD32Async", dptr, value, n, stream)
        if rc == 0:
            if value == 0:
                ctypes.memset(dptr, 0, 4 * n)
            else:
                (ctypes.c_uint32 * n).from_address(dptr)[:] = [value] * n
        return rc

    def _launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        rc = self._record("cuLaunchKernel", f, (gx, gy, gz), (bx, by, bz), smem, stream, extra)
        if rc == 0:
            self.kernels[f - _FUNC_BASE].launch(params)
        return rc

    def _dtoh(self, dst, src, n, stream):
        rc = self._record("cuMemcpyDtoHAsync_v2", dst, src, n, stream)
        if rc == 0:
            ctypes.memmove(dst, src, n)
        return rc

    def _sync(self, stream):
        return self._record("cuStreamSynchronize", stream)


@dataclass
class EmulatedRuntime:
    """The runtime :func:`.cuda.compile_kernel` talks to, on the CPU: one
    fake device of compute capability 8.0 whose context is ``CU_CTX``;
    handlers are registered with XLA:CPU."""
    driver: MockDriver = field(default_factory=MockDriver)
    xla_stream: bool = False
    name_suffix: str = "_emulated"
    registered: list = field(default_factory=list)

    def devices(self):
        return [0]

    def compute_capability(self, ordinal):
        return (8, 0)

    def load(self, image: bytes, ordinal: int, symbol: str, source=None):
        if source is None:
            raise ValueError("the emulated runtime builds kernels from their IR: pass source=(kernel, nb)")
        kernel, nb = source
        return CU_CTX, self.driver.add_kernel(compile_emulated_kernel(kernel, nb)), None

    def driver_addresses(self):
        return self.driver.addresses()

    def register(self, target_name: str, handler_address: int) -> None:
        from .cpu import register_ffi_target
        register_ffi_target(target_name, handler_address, "cpu")
        self.registered.append(target_name)
