"""IR graph -> LLVM IR for ``nvptx64-nvidia-cuda`` -> PTX.

The GPU kernel runs one work item per CUDA thread. Its body is the CPU's
one-lane code generator (:class:`~.codegen.ItemCodegen`: real branches, the
same lowering of every op) with three differences:

* math functions come from NVIDIA's libdevice (linked from bitcode) instead
  of the C library, and float remainder from :func:`build_fmodf` (LLVM's
  NVPTX ``frem`` is ``x - trunc(x/y)*y``, which is not exact);
* a failed ``check`` does an atomic max into a device buffer;
* float accumulators live on the device as float64
  (:func:`wide_accumulators`): a scatter-add first sums the values
  of the warp's lanes that aim at the same address (``match.any`` groups
  them, a shuffle tree sums each group in float32), then the group's first
  lane does one float64 atomic add. A render's gradient adds millions of
  samples into a material's one row; with a float32 atomic per sample the
  small late terms were rounded away (1.8% low on an H100) and the lanes
  serialized on that address;
* the entry point ``jaxrender_kernel`` (a ``ptx_kernel``) takes every buffer
  as a separate pointer parameter, in the order of the CPU ABI (launch info,
  inputs, item outputs, accumulators, then the error word), and runs a
  grid-stride loop over ``n_total`` work items, so any grid covers any
  launch.

Floating point: the CPU backend is IEEE binary32 without fast-math and
without FMA contraction. NVPTX without fast-math emits ``add/sub/mul.rn``,
``div.rn``, ``sqrt.rn`` and ``fma.rn`` (``.rn`` forbids ptxas to fuse), and no
``.ftz``: denormals are kept. libdevice is linked with ``__CUDA_FTZ = 0``
(module flag ``nvvm-reflect-ftz``). So every op except the transcendental
functions gives the CPU's bits; :data:`ULP_BOUND_GPU` states the bound of
each transcendental (tests/test_gpu_emulation.py measures them).
"""
from __future__ import annotations

import functools
import hashlib

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir as ll

from ..ir.gcpause import gc_paused
from ..ir.graph import F32, Node
from ..ir.kernel import Kernel
from .abi import InfoLayout
from .codegen import ItemCodegen, f32, i1, i32, i64, ptr

KERNEL_SYMBOL = "jaxrender_kernel"
TRIPLE = "nvptx64-nvidia-cuda"
# Threads per block. The kernel carries no .maxntid / .minnctapersm: with
# .maxntid 128 ptxas aims at three blocks per SM and spills the forward
# kernel (168 registers, 92 bytes of spill stores); without, it takes the
# registers it needs (at most 255; 128 x 255 fit any sm_80+ SM) and
# spills nothing but the prb adjoint's 8 bytes (tests/test_gpu_ptx.py).
BLOCK_SIZE = 128
MIN_SM = 80
# Targets LLVM's NVPTX backend knows (checked in the tests): a device of
# compute capability c gets the highest one <= c; PTX runs on later GPUs.
KNOWN_SMS = (80, 86, 87, 89, 90, 100, 120)
GPU_CODEGEN_VERSION = "1"

f64 = ll.DoubleType()

# The C math function the CPU backend calls -> (libdevice function, the
# precision it is evaluated in). The functions the megakernels call often
# (sin, cos, log, log2, erf) use libdevice's float versions; sinf, cosf,
# logf and log2f are built from IEEE operations only (fma.rn, mul.rn, exact
# integer multiply-adds), erff uses the hardware's ex2.approx. The others
# go through libdevice's double versions, rounded once to float: their
# float versions use approximate hardware reciprocals / square roots
# (rcp.approx, rsqrt.approx, ex2.approx: up to 4 ulp, tanf / powf) and the
# double ones are within 2 double ulp, so the float result is within 1 ulp
# (correctly rounded but for rare near-ties). exp / exp2 are double for the
# same reason (expf uses ex2.approx). FP64 is fast on data-centre GPUs
# (A100 / H100: half the FP32 rate); on consumer GPUs (1/64) exp is the one
# that costs, a dozen calls per path vertex.
LIBDEVICE = {
    "sinf": ("__nv_sinf", "f32"), "cosf": ("__nv_cosf", "f32"),
    "logf": ("__nv_logf", "f32"), "log2f": ("__nv_log2f", "f32"), "erff": ("__nv_erff", "f32"),
    "expf": ("__nv_exp", "f64"), "exp2f": ("__nv_exp2", "f64"),
    "tanf": ("__nv_tan", "f64"), "atanf": ("__nv_atan", "f64"), "atan2f": ("__nv_atan2", "f64"),
    "powf": ("__nv_pow", "f64"), "asinf": ("__nv_asin", "f64"), "acosf": ("__nv_acos", "f64"),
}

# Worst-case error in ulp against the correctly rounded result, per op, of
# the GPU lowering (the CPU's own bounds are ``ir.ULP_BOUND``). Float
# functions: NVIDIA's documented maximum for libdevice (CUDA Math API,
# non-FTZ). Double-routed functions: libdevice's double result is within
# 2 double ulp, so after one rounding to float the error is below
# 0.5 + 2**-28 float ulp: at most 1. rsqrt is sqrt.rn then div.rn, exactly
# the CPU's operations. The differences to the CPU backend follow from the
# triangle inequality (``ulp_bound_vs_cpu``); tests/test_gpu_emulation.py
# measures both on the CPU by running libdevice itself.
ULP_BOUND_GPU = {
    "exp": 1, "exp2": 1, "tan": 1, "atan": 1, "atan2": 1, "pow": 1, "asin": 1, "acos": 1, "rsqrt": 1,
    "log": 1, "log2": 1, "sin": 2, "cos": 2, "erf": 2,
}


def ulp_bound_vs_cpu(op: str) -> int:
    """Largest ulp distance between the GPU's and the CPU backend's result."""
    from ..ir.ops import ULP_BOUND
    if op == "rsqrt":
        return 0
    return ULP_BOUND_GPU[op] + ULP_BOUND[op]


def wide_accumulators(kernel: Kernel) -> list[bool]:
    """Per accumulator, whether it lives in device memory as float64 (the
    float ones; the module docstring says why). The lowering declares those
    results float64 and converts them to the primitive's float32."""
    return [spec.dtype == F32 for spec in kernel.accumulators.values()]


WARP = 32


class GpuItemCodegen(ItemCodegen):
    """One work item of a GPU kernel (see the module docstring)."""

    gpu = True
    emulate = False   # built for the host by lowering.emulate: a warp of one lane
    # (inline: a call's arguments and results would go through local memory;
    # not measured on a GPU)
    share_subroutines = False

    def libm_call(self, name: str, vals: list):
        fn_name, prec = LIBDEVICE[name]
        b = self.b
        if prec == "f32":
            return b.call(self.decl(fn_name, f32, [f32] * len(vals)), vals)
        wide = [b.fpext(v, f64) for v in vals]
        return b.fptrunc(b.call(self.decl(fn_name, f64, [f64] * len(vals)), wide), f32)

    def lower_simple(self, n, op, a, t, at):
        if op == "rem" and at == F32:
            fmod = self.m.globals.get(FMODF) or build_fmodf(self.m)
            return self.b.call(fmod, a)
        return super().lower_simple(n, op, a, t, at)

    def error_pointer(self, b, ctx):
        p = b.gep(ctx, [i32(0), i32(4)], inbounds=True, source_etype=self.ctx_type)
        return b.load(p, typ=ptr, name="err")

    def lower_scatter(self, n: Node, row, value):
        if n.args[1].type != F32:
            return super().lower_scatter(n, row, value)
        b = self.b
        acc, comp, width = n.attrs
        r, ok = self.scatter_row(n, row)
        # Every active lane takes part in the warp sum, in range or not: a
        # lane out of range joins the group of address 0 and adds nothing.
        off = b.select(ok, b.add(b.mul(r, i64(width)), i64(comp)), i64(0))
        p = b.gep(self.acc_base64[acc], [off], inbounds=True, source_etype=f64)
        key = b.select(ok, b.ptrtoint(p, i64), i64(0))
        total, first = self.warp_group_sum(key, value)
        with b.if_then(b.and_(ok, first), likely=True):
            b.atomic_rmw("fadd", p, b.fpext(total, f64), "monotonic")

    def _warp_op(self, name: str, ret: ll.Type, args: list):
        return self.b.call(self.decl(name, ret, [a.type for a in args]), args)

    def warp_group_sum(self, key, value):
        """``(sum, first)``: the float32 sum of ``value`` over the active
        lanes of this warp with the same ``key``, valid in the group's
        lowest lane, where ``first`` is true.

        Pointer jumping: each lane starts with its own value and the lane
        of the next member of its group; a step adds the next lane's
        partial sum and takes over its next-but-one. After k steps a lane
        holds the sum of the 2**k members from itself on, so the first
        lane has the group's sum after log2(group size) steps, at most 5.
        The shuffles name the active mask: every active lane runs every
        step, the steps counted by a warp vote."""
        b = self.b
        if self.emulate:    # one lane per warp: every lane is its group's first
            return value, ll.Constant(i1, 1)
        active = self._warp_op("llvm.nvvm.activemask", i32, [])
        peers = self._warp_op("llvm.nvvm.match.any.sync.i64", i32, [active, key])
        lane = self._warp_op("llvm.nvvm.read.ptx.sreg.laneid", i32, [])
        above = b.and_(peers, self._warp_op("llvm.nvvm.read.ptx.sreg.lanemask.gt", i32, []))
        below = b.and_(peers, self._warp_op("llvm.nvvm.read.ptx.sreg.lanemask.lt", i32, []))
        nxt0 = self._warp_op("llvm.cttz.i32", i32, [above, ll.Constant(i1, 0)])  # 32: none
        pre = b.block
        head = b.append_basic_block("warp_sum.step")
        step = b.append_basic_block("warp_sum.add")
        done = b.append_basic_block("warp_sum.done")
        b.branch(head)
        b.position_at_end(head)
        v = b.phi(f32, name="partial")
        nxt = b.phi(i32, name="next_lane")
        v.add_incoming(value, pre)
        nxt.add_incoming(nxt0, pre)
        has_next = b.icmp_unsigned("<", nxt, i32(WARP))
        any_next = self._warp_op("llvm.nvvm.vote.any.sync", i1, [active, has_next])
        b.cbranch(any_next, step, done)
        b.position_at_end(step)
        src = b.select(has_next, nxt, lane)
        clamp = i32(WARP - 1)
        theirs = self._warp_op("llvm.nvvm.shfl.sync.idx.f32", f32, [active, v, src, clamp])
        their_next = self._warp_op("llvm.nvvm.shfl.sync.idx.i32", i32, [active, nxt, src, clamp])
        v.add_incoming(b.select(has_next, b.fadd(v, theirs), v), step)
        nxt.add_incoming(b.select(has_next, their_next, i32(WARP)), step)
        b.branch(head)
        b.position_at_end(done)
        return v, b.icmp_unsigned("==", below, i32(0))


def gpu_context_type(kernel: Kernel) -> ll.LiteralStructType:
    """What the kernel entry hands the item code: the CPU context's first
    four fields (launch info, input, output and accumulator pointers), then
    the device error word. It lives in registers after inlining."""
    ni, no, na = len(kernel.inputs), len(kernel.item_outputs), len(kernel.accumulators)
    return ll.LiteralStructType([ptr, ll.ArrayType(ptr, max(ni, 1)), ll.ArrayType(ptr, max(no, 1)),
                                 ll.ArrayType(ptr, max(na, 1)), ptr])


def kernel_param_count(kernel: Kernel) -> int:
    """Pointer parameters of ``jaxrender_kernel``: info, inputs, item
    outputs, accumulators, error word."""
    return 2 + len(kernel.inputs) + len(kernel.item_outputs) + len(kernel.accumulators)


def _sreg(m: ll.Module, b: ll.IRBuilder, name: str, emulate: bool):
    if emulate:  # the CPU emulation runs the whole grid-stride loop on one "thread"
        return i32(1 if name.startswith(("ntid", "nctaid")) else 0)
    fname = f"llvm.nvvm.read.ptx.sreg.{name}"
    fn = m.globals.get(fname) or ll.Function(m, ll.FunctionType(i32, []), fname)
    return b.call(fn, [])


def build_kernel(m: ll.Module, kernel: Kernel, layout: InfoLayout, emulate: bool = False) -> ll.Function:
    """Emit the item code and the ``jaxrender_kernel`` entry around it."""
    ctx_t = gpu_context_type(kernel)
    gen = GpuItemCodegen(kernel, m, layout, ctx_t)
    gen.emulate = emulate
    item = gen.build_item()
    ni, no, na = layout.ni, layout.no, layout.na
    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr] * kernel_param_count(kernel)), KERNEL_SYMBOL)
    if not emulate:
        fn.calling_convention = "ptx_kernel"
    for arg in fn.args:
        # XLA's buffers do not overlap (an input passed twice is only read);
        # with noalias LLVM proves inputs read-only: ld.global.nc.
        arg.add_attribute("noalias")
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(ctx_t, name="ctx")
    ctx.type = ptr  # llvmlite types allocas as typed pointers; LLVM's are opaque

    def slot(*idx):
        return b.gep(ctx, [i32(0)] + [i32(x) for x in idx], inbounds=True, source_etype=ctx_t)

    args = list(fn.args)
    b.store(args[0], slot(0))
    for i in range(ni):
        b.store(args[1 + i], slot(1, i))
    for j in range(no):
        b.store(args[1 + ni + j], slot(2, j))
    for j in range(na):
        b.store(args[1 + ni + no + j], slot(3, j))
    b.store(args[-1], slot(4))
    total_p = b.gep(args[0], [i64(1)], inbounds=True, source_etype=i64)
    total = b.load(total_p, typ=i64, name="n_total")
    tid = b.zext(_sreg(m, b, "tid.x", emulate), i64)
    ntid = b.zext(_sreg(m, b, "ntid.x", emulate), i64)
    ctaid = b.zext(_sreg(m, b, "ctaid.x", emulate), i64)
    nctaid = b.zext(_sreg(m, b, "nctaid.x", emulate), i64)
    first = b.add(b.mul(ctaid, ntid), tid, name="first")
    stride = b.mul(nctaid, ntid, name="stride")
    pre = b.block
    head = fn.append_basic_block("items")
    body = fn.append_basic_block("item")
    done = fn.append_basic_block("done")
    b.branch(head)
    b.position_at_end(head)
    g = b.phi(i64, name="g")
    g.add_incoming(first, pre)
    b.cbranch(b.icmp_unsigned("<", g, total), body, done)
    b.position_at_end(body)
    b.call(item, [ctx, g])
    g.add_incoming(b.add(g, stride), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


FMODF = "jaxrender_fmodf"


def build_fmodf(m: ll.Module) -> ll.Function:
    """Exact IEEE ``fmodf`` on the bits (the CPU backend calls the C
    library's, which is exact too): align the two significands, subtract
    one exponent step at a time, renormalise. NaN for y == 0, x infinite or
    a NaN operand; x when |x| < |y|; the sign is the sign of x."""
    fn = ll.Function(m, ll.FunctionType(f32, [f32, f32]), FMODF)
    fn.linkage = "internal"
    x, y = fn.args
    blk = {k: fn.append_basic_block(k) for k in (
        "entry", "special", "check_small", "small", "go", "loop", "loop_body", "step", "zero",
        "tail", "norm", "pack")}
    b = ll.IRBuilder(blk["entry"])
    ctlz = m.globals.get("llvm.ctlz.i32") or ll.Function(m, ll.FunctionType(i32, [i32, i1]), "llvm.ctlz.i32")
    ux, uy = b.bitcast(x, i32), b.bitcast(y, i32)
    sx = b.and_(ux, i32(0x80000000))
    ax, ay = b.and_(ux, i32(0x7FFFFFFF)), b.and_(uy, i32(0x7FFFFFFF))
    bad = b.or_(b.icmp_unsigned("==", ay, i32(0)),
                b.or_(b.icmp_unsigned(">", ay, i32(0x7F800000)), b.icmp_unsigned(">=", ax, i32(0x7F800000))))
    b.cbranch(bad, blk["special"], blk["check_small"])

    b.position_at_end(blk["special"])
    p = b.fmul(x, y)
    b.ret(b.fdiv(p, p))

    b.position_at_end(blk["check_small"])
    b.cbranch(b.icmp_unsigned("<", ax, ay), blk["small"], blk["go"])
    b.position_at_end(blk["small"])
    b.ret(x)

    def unpack(a):
        """(significand with the implicit bit at bit 23, biased exponent);
        denormals are normalised to a smaller (possibly negative) exponent."""
        e = b.lshr(a, i32(23))
        is_den = b.icmp_unsigned("==", e, i32(0))
        sh = b.sub(b.call(ctlz, [a, i1(1)]), i32(8))
        m_den, e_den = b.shl(a, sh), b.sub(i32(1), sh)
        m_norm = b.or_(b.and_(a, i32(0x7FFFFF)), i32(0x800000))
        return b.select(is_den, m_den, m_norm), b.select(is_den, e_den, e)

    b.position_at_end(blk["go"])
    mx0, ex0 = unpack(ax)
    my, ey = unpack(ay)
    b.branch(blk["loop"])

    # while ex > ey: d = mx - my; if d == 0 -> ±0; if d >= 0: mx = d; mx <<= 1; ex -= 1
    b.position_at_end(blk["loop"])
    mx = b.phi(i32)
    ex = b.phi(i32)
    mx.add_incoming(mx0, blk["go"])
    ex.add_incoming(ex0, blk["go"])
    b.cbranch(b.icmp_signed(">", ex, ey), blk["loop_body"], blk["tail"])
    b.position_at_end(blk["loop_body"])
    d = b.sub(mx, my)
    b.cbranch(b.icmp_unsigned("==", d, i32(0)), blk["zero"], blk["step"])
    b.position_at_end(blk["step"])
    keep = b.select(b.icmp_signed(">=", d, i32(0)), d, mx)
    mx.add_incoming(b.shl(keep, i32(1)), blk["step"])
    ex.add_incoming(b.sub(ex, i32(1)), blk["step"])
    b.branch(blk["loop"])

    b.position_at_end(blk["zero"])
    b.ret(b.bitcast(sx, f32))

    b.position_at_end(blk["tail"])
    d = b.sub(mx, my)
    is_zero = b.icmp_unsigned("==", d, i32(0))
    r = b.select(b.icmp_signed(">=", d, i32(0)), d, mx)
    b.cbranch(is_zero, blk["zero"], blk["norm"])

    b.position_at_end(blk["norm"])
    sh = b.sub(b.call(ctlz, [r, i1(1)]), i32(8))   # r != 0 and < 2**24
    r = b.shl(r, sh)
    e = b.sub(ex, sh)
    b.branch(blk["pack"])

    b.position_at_end(blk["pack"])
    normal = b.or_(b.sub(r, i32(0x800000)), b.shl(e, i32(23)))
    denorm = b.lshr(r, b.sub(i32(1), e))
    bits = b.select(b.icmp_signed(">", e, i32(0)), normal, denorm)
    b.ret(b.bitcast(b.or_(bits, sx), f32))
    return fn


def _add_module_flags(m: ll.Module) -> None:
    # Override (4): libdevice's __nvvm_reflect("__CUDA_FTZ") folds to 0, so
    # its functions keep denormals.
    m.add_named_metadata("llvm.module.flags", m.add_metadata([i32(4), "nvvm-reflect-ftz", i32(0)]))


def generate_llvm_ir(kernel: Kernel, nb: int, emulate: bool = False) -> str:
    """The GPU module (text) for ``kernel`` with ``nb`` batch dims, before
    libdevice is linked. ``emulate`` builds the same code for the host CPU
    (see :mod:`.emulate`)."""
    with gc_paused():
        m = ll.Module(name=f"jaxrender.gpu.{kernel.name}")
        m.triple = llvm.get_process_triple() if emulate else TRIPLE
        layout = InfoLayout(nb, len(kernel.inputs), len(kernel.item_outputs), len(kernel.accumulators))
        build_kernel(m, kernel, layout, emulate)
        if not emulate:
            _add_module_flags(m)
        return str(m)


def libdevice_functions(text: str) -> list[str]:
    """libdevice functions the module text calls."""
    return sorted({name for name, _ in LIBDEVICE.values() if f"@{name}(" in text or f'@"{name}"(' in text})


def link_libdevice(mod: llvm.ModuleRef, libdevice: llvm.ModuleRef) -> None:
    """Link ``libdevice`` into ``mod`` and make everything but the kernel
    internal, so the optimiser drops what the kernel does not call."""
    libdevice.triple = mod.triple
    libdevice.data_layout = mod.data_layout
    mod.link_in(libdevice)
    for f in mod.functions:
        if not f.is_declaration and f.name != KERNEL_SYMBOL:
            f.linkage = llvm.Linkage.internal
    for g in mod.global_variables:
        if not g.is_declaration:
            g.linkage = llvm.Linkage.internal


_targets_ready = False


def _init_nvptx():
    global _targets_ready
    if not _targets_ready:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _targets_ready = True


def target_machine(sm: int):
    _init_nvptx()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=f"sm_{sm}", features="", opt=3)


def pick_sm(major: int, minor: int) -> int:
    """The PTX target for a device of compute capability ``major.minor``."""
    cc = 10 * major + minor
    if cc < MIN_SM:
        raise ValueError(f"jaxrender's GPU backend needs compute capability 8.0 or newer, got {major}.{minor}")
    return max(s for s in KNOWN_SMS if s <= cc)


def compile_ptx(kernel: Kernel, nb: int, sm: int) -> str:
    """Generate, link libdevice, optimise (-O3) and emit PTX (uncached)."""
    from .cpu import CompileError
    from .toolkit import libdevice_bytes
    text = generate_llvm_ir(kernel, nb)
    tm = target_machine(sm)
    ctx = llvm.create_context()  # a private LLVM context: compiles may run in parallel threads
    try:
        mod = llvm.parse_assembly(text, context=ctx)
        mod.data_layout = str(tm.target_data)
        if libdevice_functions(text):
            link_libdevice(mod, llvm.parse_bitcode(libdevice_bytes(), context=ctx))
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"jaxrender generated invalid GPU LLVM IR: {exc}") from exc
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def ptx_key(kernel: Kernel, nb: int, sm: int) -> str:
    """Cache key of the PTX: kernel graph, batch dims, target, the code
    generators' source, libdevice's bytes, llvmlite and LLVM versions."""
    from .cpu import codegen_digest
    parts = [TRIPLE, f"sm_{sm}", llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)),
             GPU_CODEGEN_VERSION, codegen_digest(), _libdevice_digest(), f"nb={nb}", kernel.text]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _libdevice_digest() -> str:
    from .toolkit import libdevice_path
    p = libdevice_path()
    if p is None:
        return "none"
    st = p.stat()
    return _digest_file(str(p), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _digest_file(path: str, mtime_ns: int, size: int) -> str:
    from pathlib import Path
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


stats = {"compiled": 0, "disk_hits": 0}


def ptx_for(kernel: Kernel, nb: int, sm: int) -> tuple[str, str]:
    """``(key, PTX)`` for ``kernel``: from the disk cache (the CPU's
    directory, entries ``<key>.ptx``) or compiled and stored."""
    from . import cache
    key = ptx_key(kernel, nb, sm)
    blob = cache.load(key, suffix=".ptx")
    if blob is not None:
        stats["disk_hits"] += 1
        return key, blob.decode()
    ptx = compile_ptx(kernel, nb, sm)
    stats["compiled"] += 1
    cache.store(key, ptx.encode(), suffix=".ptx")
    return key, ptx
