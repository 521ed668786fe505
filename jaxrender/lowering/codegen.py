"""IR graph -> LLVM IR for one work item, plus the parallel launch around it.

The module produced here holds:

* ``item``: the kernel body for one work item (inlined into the worker),
* ``worker``: pulls tiles of work items from a shared atomic counter until
  none is left (dynamic scheduling suits divergent kernels),
* ``handler``: the XLA typed-FFI entry point (see :mod:`.ffi`), which checks
  the buffers, zeroes the accumulators, runs ``worker`` on pthreads and turns
  a failed in-kernel ``check`` into an XLA error.

Per-item results depend only on the item index, so outputs are bit-identical
for any thread count. Float scatter-adds into an accumulator with few rows
for the work go to a float64 copy per thread, summed and rounded once after
the join (``ffi._PrivateAccumulators``): nearly always the correctly rounded
sum, whatever the thread count. Other scatter-adds are atomic, and the last
bits of a float sum depend on scheduling.
"""
from __future__ import annotations

import re

from llvmlite import ir as ll

from ..ir.bvh_query import CLOSEST, RANGE_ARGS, RAY_ARGS
from ..ir.bvh_query import OP as BVH_QUERY
from ..ir.graph import BOOL, F32, I32, PURE_OPS, U32, Block, Node, captured_values, f32_bits, format_block, walk
from ..ir.kernel import Kernel, _width
from . import bvh_traversal, vmath
from .abi import InfoLayout

f32, i32, i64, i1, i8 = ll.FloatType(), ll.IntType(32), ll.IntType(64), ll.IntType(1), ll.IntType(8)
f64 = ll.DoubleType()
ptr = ll.PointerType()
LLTYPE = {F32: f32, I32: i32, U32: i32, BOOL: i1}

# Reads of this many columns of one row or more load each lane's row and
# transpose (``_transposed_rows``); fewer gather. 2, 4 and 6 columns timed
# alike on the Cornell box (Zen 4, 16 and 8 lanes).
TRANSPOSED_MIN_COLUMNS = 4

# The launch context's (``context_type``) field holding the shared context:
# each worker thread may run on a copy of its own (private accumulator
# pointers), but the tile counter and the error word are the shared one's.
CTX_SHARED = 8
# Its field pointing to one byte per accumulator: nonzero where this launch
# gave every thread a private float64 copy of that (float) accumulator.
CTX_PRIVATE = 9

# Transcendental ops call the C math library (resolved in-process).
LIBM = {"exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sin": "sinf",
        "cos": "cosf", "tan": "tanf", "asin": "asinf", "acos": "acosf", "atan": "atanf",
        "erf": "erff", "pow": "powf", "atan2": "atan2f"}
INTRINSIC_UNARY = {"sqrt": "llvm.sqrt.f32", "floor": "llvm.floor.f32", "ceil": "llvm.ceil.f32",
                   "trunc": "llvm.trunc.f32", "round": "llvm.roundeven.f32", "abs": "llvm.fabs.f32"}
FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class CodegenError(Exception):
    pass


class ItemCodegen:
    """Emits the graph of one kernel into an LLVM function body."""

    def __init__(self, kernel: Kernel, module: ll.Module, layout: InfoLayout, ctx_type: ll.Type):
        self.k = kernel
        self.m = module
        self.layout = layout
        self.ctx_type = ctx_type
        self.vals: dict[int, ll.Value] = {}
        self._decls: dict[str, ll.Function] = {}
        self.in_specs = list(kernel.inputs.values())
        self.out_specs = list(kernel.item_outputs.values())
        self.acc_specs = list(kernel.accumulators.values())
        self._queries: dict[tuple, list] = {}
        # subroutine key -> (its function, the record of its results)
        self._subroutines: dict[tuple, tuple[ll.Function, ll.LiteralStructType]] = {}
        # subroutine call node id -> (captured values, key, calls sharing the key)
        self._subroutine_calls: dict[int, tuple[list, tuple, int]] | None = None

    # -- helpers (scalar; the packet code generator overrides them) ------
    lanes = 1
    gpu = False   # code for the NVPTX target (lowering.ptx)
    # Emit a subroutine (ir.subroutine) that a kernel calls from several
    # places as one function of the module, not inline at each call.
    share_subroutines = True
    # The code generator's state that node lowering reads (values of the
    # item function's prologue): a subroutine's function takes it as
    # arguments. Lists hold one value per input or accumulator, or None.
    ENVIRONMENT = ("info", "n_local", "local", "err_ptr", "mask", "in_base", "in_data", "in_off", "in_rows",
                   "in_maxrow", "acc_base", "acc_base64", "acc_data", "acc_off", "acc_rows", "acc_private")

    def T(self, t: str) -> ll.Type:
        return LLTYPE[t]

    def T64(self) -> ll.Type:
        return i64

    def splat(self, v):
        return v

    def broadcast(self, c: ll.Constant):
        """A scalar constant as a value of this code generator's shape."""
        return c

    def cf32(self, v: float):
        if v != v:  # llvmlite rounds float constants through C and would quiet a signalling NaN
            return self.broadcast(ll.Constant(i32, f32_bits(v)).bitcast(f32))
        return self.broadcast(ll.Constant(f32, v))

    def ci32(self, v: int):
        return self.broadcast(ll.Constant(i32, v))

    def ci64(self, v: int):
        return self.broadcast(ll.Constant(i64, v))

    def ci1(self, v: int):
        return self.broadcast(ll.Constant(i1, v))

    def type_suffix(self, t: str) -> str:
        return {F32: "f32", I32: "i32", U32: "i32", BOOL: "i1"}[t]

    def intrinsic(self, base: str, ret: str, args: list[str], vals: list, suffix_types=None):
        """Call an overloaded LLVM intrinsic, e.g. ``llvm.fma.f32`` / ``llvm.fma.v16f32``."""
        suffix = ".".join(self.type_suffix(t) for t in (suffix_types or [ret]))
        fn = self.decl(f"{base}.{suffix}", self.T(ret), [self.T(t) for t in args])
        return self.b.call(fn, vals)

    def libm_call(self, name: str, vals: list):
        if name in vmath.FUNCS:
            return vmath.emit(self, name, *vals)
        return self.libm_scalar_lanes(name, vals)

    def libm_scalar_lanes(self, name: str, vals: list):
        return self.b.call(self.decl(name, f32, [f32] * len(vals)), vals)

    def decl(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        fn = self._decls.get(name)
        if fn is None:
            fn = self.m.globals.get(name) or ll.Function(self.m, ll.FunctionType(ret, args), name)
            self._decls[name] = fn
        return fn

    def ctx_field(self, b: ll.IRBuilder, ctx, idx: int, what: str):
        p = b.gep(ctx, [i32(0), i32(idx)], inbounds=True, source_etype=self.ctx_type)
        return b.load(p, name=what, typ=self.ctx_type.elements[idx])

    # -- the item function ---------------------------------------------
    def build_item(self) -> ll.Function:
        fn = ll.Function(self.m, ll.FunctionType(ll.VoidType(), [ptr, i64]), "item")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        ctx, g = fn.args
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        self.b, self.fn = b, fn
        L = self.layout
        self.info = self.ctx_field(b, ctx, 0, "info")
        info_at = self.info_at

        n_local = info_at(0, "n_local")
        self.n_local = n_local
        if L.nb:
            bidx = b.udiv(g, n_local, name="batch")
            local = b.urem(g, n_local, name="local")
            # Multi-index of the batch element, last dim fastest.
            rem = bidx
            midx = [None] * L.nb
            for k in reversed(range(L.nb)):
                size = info_at(L.batch_shape + k, f"bdim{k}")
                midx[k] = b.urem(rem, size)
                rem = b.udiv(rem, size)
        else:
            bidx, local, midx = i64(0), g, []
        self.local = local
        # Input bases, lengths and clamp bounds (of the inputs the kernel reads).
        self.in_base, self.in_rows, self.in_maxrow = [], [], []
        used = used_inputs(self.k)
        for i, spec in enumerate(self.in_specs):
            if i not in used:
                for field in (self.in_base, self.in_rows, self.in_maxrow):
                    field.append(None)
                continue
            data = self.ctx_field_ptr(b, ctx, 1, i, f"in{i}")
            off = i64(0)
            for k in range(L.nb):
                stride = info_at(L.stride(i, k), f"stride{i}_{k}")
                off = b.add(off, b.mul(midx[k], stride))
            base = b.gep(data, [off], inbounds=True, source_etype=LLTYPE[spec.dtype]) if L.nb else data
            rows = info_at(L.rows(i), f"rows{i}")
            is_empty = b.icmp_unsigned("==", rows, i64(0))
            maxrow = b.select(is_empty, i64(0), b.sub(rows, i64(1)))
            self.in_base.append(base)
            self.in_rows.append(rows)
            self.in_maxrow.append(maxrow)
        self.acc_base, self.acc_base64, self.acc_rows = [], [], []
        for j, spec in enumerate(self.acc_specs):
            data = self.ctx_field_ptr(b, ctx, 3, j, f"acc{j}")
            rows = info_at(L.acc_rows(j), f"accrows{j}")
            width = _width(spec.item_shape)
            first = b.mul(bidx, b.mul(rows, i64(width)))
            self.acc_base.append(b.gep(data, [first], inbounds=True, source_etype=LLTYPE[spec.dtype])
                                 if L.nb else data)
            self.acc_base64.append(b.gep(data, [first], inbounds=True, source_etype=f64) if L.nb else data)
            self.acc_rows.append(rows)
        self.acc_private = self.accumulator_privacy(b, ctx)
        self.err_ptr = self.error_pointer(b, ctx)
        # Body.
        self.lower_block(self.k.block)
        # Per-item outputs.
        results = [self.vals[r.id] for r in self.k.block.results]
        pos = 0
        for j, spec in enumerate(self.out_specs):
            data = self.ctx_field_ptr(b, ctx, 2, j, f"out{j}")
            width = _width(spec.item_shape)
            base = b.gep(data, [b.mul(g, i64(width))], inbounds=True, source_etype=LLTYPE[spec.dtype])
            for c in range(width):
                p = b.gep(base, [i64(c)], inbounds=True, source_etype=LLTYPE[spec.dtype])
                b.store(results[pos], p)
                pos += 1
        b.ret_void()
        return fn

    def info_at(self, k: int, name: str):
        """Word k of the launch info (the same for every item of a launch)."""
        b = self.b
        v = b.load(b.gep(self.info, [i64(k)], inbounds=True, source_etype=i64), name=name, typ=i64)
        v.set_metadata("invariant.load", self.m.add_metadata([]))
        return v

    def accumulator_privacy(self, b: ll.IRBuilder, ctx) -> list:
        """Per accumulator, an i1: whether this launch gave each thread a
        private float64 copy to add into (the handler decides, by size;
        see ffi._PrivateAccumulators), or None where it never does
        (integer accumulators, GPU kernels)."""
        if self.gpu:
            return [None] * len(self.acc_specs)
        flags = self.ctx_field(b, ctx, CTX_PRIVATE, "private")
        out = []
        for j, spec in enumerate(self.acc_specs):
            if spec.dtype != F32:
                out.append(None)
                continue
            f = b.load(b.gep(flags, [i64(j)], inbounds=True, source_etype=i8), typ=i8, name=f"private{j}")
            f.set_metadata("invariant.load", self.m.add_metadata([]))
            out.append(b.icmp_unsigned("!=", f, i8(0)))
        return out

    def error_pointer(self, b: ll.IRBuilder, ctx):
        """Where a failed ``check`` records its message number (atomic max):
        the launch context's error word (the GPU code generator overrides
        this with a device buffer)."""
        shared = b.load(b.gep(ctx, [i32(0), i32(CTX_SHARED)], inbounds=True, source_etype=self.ctx_type), typ=ptr)
        return b.gep(shared, [i32(0), i32(5)], inbounds=True, source_etype=self.ctx_type)

    def entry_alloca(self, et, count: int):
        """A stack array allocated once in the function's entry block (an
        alloca inside a loop would grow the stack on every iteration)."""
        b = self.b
        here = b.block
        b.position_at_start(self.fn.entry_basic_block)
        p = b.alloca(et, size=i32(count))
        b.position_at_end(here)
        return p

    def ctx_field_ptr(self, b, ctx, field: int, i: int, name: str):
        p = b.gep(ctx, [i32(0), i32(field), i32(i)], inbounds=True, source_etype=self.ctx_type)
        return b.load(p, name=name, typ=ptr)

    # -- blocks --------------------------------------------------------
    def lower_block(self, block: Block) -> list:
        for n in block.nodes:
            self.lower_node(n)
        return [self.vals[r.id] for r in block.results]

    def lower_node(self, n: Node) -> None:
        op = n.op
        if op == "proj":
            self.vals[n.id] = self.vals[(n.args[0].id, n.attrs[0])]
            return
        a = [self.vals[x.id] for x in n.args]
        t = n.type
        at = n.args[0].type if n.args else None
        if op == "const":
            v = n.attrs[0]
            if t == F32:
                self.vals[n.id] = self.cf32(v)
            elif t == BOOL:
                self.vals[n.id] = self.ci1(int(v))
            else:
                self.vals[n.id] = self.ci32(int(v) & 0xFFFFFFFF)
            return
        if op in ("loop", "if", "dispatch", "call"):
            getattr(self, "lower_" + op)(n, a)
            return
        self.vals[n.id] = self.lower_simple(n, op, a, t, at)

    def lower_simple(self, n: Node, op: str, a: list, t: str, at: str):
        b = self.b
        fl = at == F32
        signed = at == I32
        if op == "item_index":
            return b.trunc(self.local, self.T(U32))
        if op == "launch_size":
            return self.splat(b.trunc(self.n_local, i32))
        if op == "buffer_len":
            return self.splat(b.trunc(self.in_rows[n.attrs[0]], i32))
        if op == "gather":
            return self.lower_gather(n, a[0])
        if op == "bvh_query":
            return self.lower_bvh_query(n, a)
        if op == "scatter_add":
            self.lower_scatter(n, a[0], a[1])
            return None
        if op == "check":
            self.lower_check(n, a[0])
            return None
        if op in ("add", "sub", "mul"):
            return getattr(b, ("f" if fl else "") + op)(a[0], a[1])
        if op == "div":
            if fl:
                return b.fdiv(a[0], a[1])
            return self.int_divrem(a[0], a[1], signed, rem=False)
        if op == "rem":
            if fl:
                return b.frem(a[0], a[1])
            return self.int_divrem(a[0], a[1], signed, rem=True)
        if op == "neg":
            return b.fneg(a[0]) if fl else b.sub(self.ci32(0), a[0])
        if op == "fma":
            return self.intrinsic("llvm.fma", F32, [F32] * 3, a)
        if op == "zmul":
            zero = self.cf32(0.0)
            either = b.or_(b.fcmp_ordered("==", a[0], zero), b.fcmp_ordered("==", a[1], zero))
            return b.select(either, zero, b.fmul(a[0], a[1]))
        if op == "detach":
            return a[0]
        if op in ("min", "max"):
            if fl:
                # A NaN operand is ignored; on ties (+0 / -0) the first operand
                # wins. Spelled out so every target and the folder agree.
                better = b.fcmp_ordered("<" if op == "min" else ">", a[1], a[0])
                take_b = b.or_(better, b.fcmp_unordered("uno", a[0], a[0]))
                return b.select(take_b, a[1], a[0])
            pred = "<" if op == "min" else ">"
            c = b.icmp_signed(pred, a[0], a[1]) if signed else b.icmp_unsigned(pred, a[0], a[1])
            return b.select(c, a[0], a[1])
        if op == "abs":
            if fl:
                return self.intrinsic("llvm.fabs", F32, [F32], a)
            neg = b.icmp_signed("<", a[0], self.ci32(0))
            return b.select(neg, b.sub(self.ci32(0), a[0]), a[0])
        if op == "copysign":
            return self.intrinsic("llvm.copysign", F32, [F32, F32], a)
        if op in FCMP:
            if fl:
                return b.fcmp_unordered("!=", a[0], a[1]) if op == "ne" else b.fcmp_ordered(FCMP[op], a[0], a[1])
            if at == BOOL or not signed:
                return b.icmp_unsigned(FCMP[op], a[0], a[1])
            return b.icmp_signed(FCMP[op], a[0], a[1])
        if op in ("and", "or", "xor"):
            return {"and": b.and_, "or": b.or_, "xor": b.xor}[op](a[0], a[1])
        if op == "not":
            return b.not_(a[0])
        if op in ("shl", "shr"):
            s = b.and_(a[1], self.ci32(31))
            if op == "shl":
                return b.shl(a[0], s)
            return b.ashr(a[0], s) if signed else b.lshr(a[0], s)
        if op == "mulhi":
            ext = b.sext if signed else b.zext
            wide = self.T64()
            p = b.mul(ext(a[0], wide), ext(a[1], wide))
            return b.trunc(b.lshr(p, self.ci64(32)) if not signed else b.ashr(p, self.ci64(32)), self.T(I32))
        if op == "select":
            return b.select(a[0], a[1], a[2])
        if op == "cast":
            return self.lower_cast(a[0], at, t)
        if op == "bitcast":
            if (at == F32) == (t == F32):
                return a[0]
            return b.bitcast(a[0], self.T(t))
        if op == "isnan":
            return b.fcmp_unordered("uno", a[0], a[0])
        if op == "isfinite":
            ab = self.intrinsic("llvm.fabs", F32, [F32], a)
            return b.fcmp_ordered("<", ab, self.cf32(float("inf")))
        if op == "rsqrt":
            s = self.intrinsic("llvm.sqrt", F32, [F32], a)
            return b.fdiv(self.cf32(1.0), s)
        if op in INTRINSIC_UNARY:
            return self.intrinsic(INTRINSIC_UNARY[op], F32, [F32], a)
        if op in LIBM:
            return self.libm_call(LIBM[op], a)
        raise CodegenError(f"no lowering for op {op!r}")

    def int_divrem(self, x, y, signed: bool, rem: bool):
        """Division/remainder with x/0 == 0 and INT_MIN/-1 wrapping (no UB)."""
        b = self.b
        c0, c1 = self.ci32(0), self.ci32(1)
        zero = b.icmp_unsigned("==", y, c0)
        if signed:
            m1 = b.icmp_signed("==", y, self.ci32(-1))
            bad = b.or_(zero, m1)
            safe = b.select(bad, c1, y)
            q = b.srem(x, safe) if rem else b.sdiv(x, safe)
            q = b.select(m1, c0 if rem else b.sub(c0, x), q)
        else:
            safe = b.select(zero, c1, y)
            q = b.urem(x, safe) if rem else b.udiv(x, safe)
        return b.select(zero, c0, q)

    def lower_cast(self, v, src: str, dst: str):
        b = self.b
        if dst == BOOL:
            if src == F32:
                return b.fcmp_unordered("!=", v, self.cf32(0.0))
            return b.icmp_unsigned("!=", v, self.ci32(0))
        ft, it = self.T(F32), self.T(I32)
        if src == BOOL:
            return b.uitofp(v, ft) if dst == F32 else b.zext(v, it)
        if dst == F32:
            return b.sitofp(v, ft) if src == I32 else b.uitofp(v, ft)
        if src == F32:
            name = "llvm.fptosi.sat" if dst == I32 else "llvm.fptoui.sat"
            return self.intrinsic(name, I32, [F32], [v], suffix_types=[I32, F32])
        return v  # i32 <-> u32 share a representation

    def row_index(self, node_arg: Node, v):
        return self.b.sext(v, self.T64()) if node_arg.type == I32 else self.b.zext(v, self.T64())

    def lower_gather(self, n: Node, row):
        b = self.b
        inp, comp, width = n.attrs
        r = self.row_index(n.args[0], row)
        neg = b.icmp_signed("<", r, i64(0))
        r = b.select(neg, i64(0), r)
        big = b.icmp_signed(">", r, self.in_maxrow[inp])
        r = b.select(big, self.in_maxrow[inp], r)
        et = LLTYPE[n.type]
        off = b.add(b.mul(r, i64(width)), i64(comp)) if width > 1 else (b.add(r, i64(comp)) if comp else r)
        p = b.gep(self.in_base[inp], [off], inbounds=True, source_etype=et)
        return b.load(p, typ=et)

    def lower_bvh_query(self, n: Node, a: list):
        """One call of the traversal routine answers all outputs of a query:
        the IR has a node per output (t, prim, b1, b2), emitted together in
        one block with the same operands, so the first one lowered calls and
        the others reuse its results."""
        mode, k, *bufs = n.attrs
        key = (id(n.block), tuple(x.id for x in n.args), mode, tuple(bufs))
        res = self._queries.get(key)
        if res is None:
            res = self._queries[key] = self.call_bvh_query(mode, bufs, a)
        return res[k]

    def call_bvh_query(self, mode: int, bufs: list[int], a: list) -> list:
        b = self.b
        fn = bvh_traversal.routine(self.m, mode, self.gpu)
        bases, rows = [self.in_base[i] for i in bufs], [self.in_rows[i] for i in bufs]
        if len(a) > RAY_ARGS:      # a group's sub-range (ir.bvh_query)
            r = bvh_traversal.ranged_call(b, fn, bases, rows, a[RAY_ARGS:], a[:RAY_ARGS])
        else:
            r = b.call(fn, bases + rows + a)
        return [b.extract_value(r, j) for j in range(4)] if mode == CLOSEST else [r]

    def scatter_row(self, n: Node, row):
        """(the row of scatter ``n``, widened, and whether it lies within its
        accumulator's rows): a scatter outside them adds nothing."""
        b = self.b
        r = self.row_index(n.args[0], row)
        return r, b.and_(b.icmp_signed(">=", r, self.ci64(0)), b.icmp_signed("<", r, self.acc_rows[n.attrs[0]]))

    def lower_scatter(self, n: Node, row, value):
        b = self.b
        acc, comp, width = n.attrs
        r, ok = self.scatter_row(n, row)
        with b.if_then(ok, likely=True):
            et = f32 if n.args[1].type == F32 else i32
            off = b.add(b.mul(r, i64(width)), i64(comp))
            private = self.acc_private[acc]

            def shared():
                p = b.gep(self.acc_base[acc], [off], inbounds=True, source_etype=et)
                b.atomic_rmw("fadd" if et == f32 else "add", p, value, "monotonic")
            if private is None:
                shared()
                return
            with b.if_else(private, likely=True) as (mine, others):
                with mine:
                    p = b.gep(self.acc_base64[acc], [off], inbounds=True, source_etype=f64)
                    b.store(b.fadd(b.load(p, typ=f64), b.fpext(value, f64)), p)
                with others:
                    shared()

    def lower_check(self, n: Node, ok):
        b = self.b
        with b.if_then(b.not_(ok), likely=False):
            b.atomic_rmw("umax", self.err_ptr, i32(n.attrs[0]), "monotonic")

    # -- structured control flow ----------------------------------------
    def loop_goes_on(self, c):
        """The branch condition of a loop whose condition value is ``c``."""
        return c

    def lower_loop(self, n: Node, init: list) -> None:
        b = self.b
        cond, body = n.regions
        pre = b.block
        header = self.fn.append_basic_block("loop.header")
        body_bb = self.fn.append_basic_block("loop.body")
        exit_bb = self.fn.append_basic_block("loop.exit")
        b.branch(header)
        b.position_at_end(header)
        phis = [b.phi(self.T(x.type)) for x in n.args]
        for p, v in zip(phis, init):
            p.add_incoming(v, pre)
        for prm, ph in zip(cond.params, phis):
            self.vals[prm.id] = ph
        (c,) = self.lower_block(cond)
        b.cbranch(self.loop_goes_on(c), body_bb, exit_bb)
        b.position_at_end(body_bb)
        for prm, ph in zip(body.params, phis):
            self.vals[prm.id] = ph
        new = self.lower_block(body)
        latch = b.block
        b.branch(header)
        for p, v in zip(phis, new):
            p.add_incoming(v, latch)
        b.position_at_end(exit_bb)
        for k, ph in enumerate(phis):
            self.vals[(n.id, k)] = ph

    def lower_call(self, n: Node, args: list) -> None:
        """A function body kept as a region (for custom derivatives): inline
        it; a subroutine called from more than one place: call its function."""
        (body,) = n.regions
        if body.kind == "outline" and self.share_subroutines:
            captured, key, calls = self._subroutine_call_plan()[n.id]
            if calls > 1:
                self._call_subroutine(n, args, captured, key)
                return
        for prm, v in zip(body.params, args):
            self.vals[prm.id] = v
        for k, v in enumerate(self.lower_block(body)):
            self.vals[(n.id, k)] = v

    # -- subroutines -----------------------------------------------------
    def captured_signature(self, captured: list) -> tuple:
        """What of the captured values, besides their types, the code of a
        body depends on (the packet code generator: which are uniform)."""
        return ()

    def _subroutine_key(self, body: Block, captured: list) -> tuple:
        """Equal for two subroutine regions whose code is the same: the
        body's text with captured values numbered in order of first use,
        their types, and the constants among them by value."""
        index = {c.id: k for k, c in enumerate(captured)}
        text = re.sub(r"\^(\d+)", lambda m: f"^c{index[int(m.group(1))]}", format_block(body, outer_ids=True))
        caps = tuple(f"const {c.type} {c.attrs[0]!r}" if c.op == "const" else c.type for c in captured)
        return text, caps, self.captured_signature(captured)

    def _subroutine_call_plan(self) -> dict:
        """Per subroutine call of the kernel (node id): its captured values,
        its key and how many calls share that key (one walk of the graph)."""
        if self._subroutine_calls is None:
            found, counts = {}, {}
            for n in walk(self.k.block):
                if n.op == "call" and n.regions[0].kind == "outline":
                    captured = captured_values(n.regions[0])
                    key = self._subroutine_key(n.regions[0], captured)
                    found[n.id] = (captured, key)
                    counts[key] = counts.get(key, 0) + 1
            self._subroutine_calls = {i: (c, key, counts[key]) for i, (c, key) in found.items()}
        return self._subroutine_calls

    def _environment(self) -> list:
        vals = []
        for field in self.ENVIRONMENT:
            v = getattr(self, field, None)
            if isinstance(v, list):
                vals += [x for x in v if x is not None]
            elif v is not None:
                vals.append(v)
        return vals

    def _bind_environment(self, args) -> None:
        it = iter(args)
        for field in self.ENVIRONMENT:
            v = getattr(self, field, None)
            if isinstance(v, list):
                setattr(self, field, [None if x is None else next(it) for x in v])
            elif v is not None:
                setattr(self, field, next(it))

    def _call_subroutine(self, n: Node, args: list, captured: list, key: tuple) -> None:
        """Call the module's function for this subroutine (emitted at its
        first call): arguments the environment, the call's arguments and
        the captured values; results through a stack record."""
        b = self.b
        env = self._environment()
        passed = env + list(args) + [self.vals[c.id] for c in captured if c.op != "const"]
        if key not in self._subroutines:
            self._subroutines[key] = self._emit_subroutine(n, passed, len(env), captured)
        fn, record = self._subroutines[key]
        out = self.entry_alloca(record, 1)
        b.call(fn, passed + [out])
        for k, t in enumerate(record.elements):
            p = b.gep(out, [i32(0), i32(k)], inbounds=True, source_etype=record)
            self.vals[(n.id, k)] = b.load(p, typ=t)

    def _emit_subroutine(self, n: Node, passed: list, env: int, captured: list) -> tuple:
        """(function, record of its results) of subroutine call ``n``'s body,
        emitted with the code generator's state bound to its arguments."""
        (body,) = n.regions
        name = f"jaxrender.subroutine.{n.attrs[0]}.{len(self._subroutines)}"
        fn = ll.Function(self.m, ll.FunctionType(ll.VoidType(), [v.type for v in passed] + [ptr]), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        saved = {f: getattr(self, f, None) for f in self.ENVIRONMENT + ("b", "fn", "vals")}
        try:
            self.b, self.fn, self.vals = ll.IRBuilder(fn.append_basic_block("entry")), fn, {}
            self._bind_environment(fn.args[:env])
            params = fn.args[env:env + len(body.params)]
            for prm, v in zip(body.params, params):
                self.vals[prm.id] = v
            rest = iter(fn.args[env + len(body.params):-1])
            for c in captured:
                if c.op == "const":
                    self.lower_node(c)
                else:
                    self.vals[c.id] = next(rest)
            results = self.lower_block(body)
            record = ll.LiteralStructType([v.type for v in results])
            out = fn.args[-1]
            for k, v in enumerate(results):
                self.b.store(v, self.b.gep(out, [i32(0), i32(k)], inbounds=True, source_etype=record))
            self.b.ret_void()
        finally:
            for f, v in saved.items():
                setattr(self, f, v)
        return fn, record

    def _merge(self, n: Node, incoming: list[tuple[list, ll.Block]], merge_bb) -> None:
        b = self.b
        b.position_at_end(merge_bb)
        nres = len(n.regions[0].results)
        for k in range(nres):
            ph = b.phi(LLTYPE[n.regions[0].results[k].type])
            for vals, blk in incoming:
                ph.add_incoming(vals[k], blk)
            self.vals[(n.id, k)] = ph

    def lower_if(self, n: Node, a: list) -> None:
        b = self.b
        then_r, else_r = n.regions
        then_bb = self.fn.append_basic_block("if.then")
        else_bb = self.fn.append_basic_block("if.else")
        merge_bb = self.fn.append_basic_block("if.end")
        b.cbranch(a[0], then_bb, else_bb)
        incoming = []
        for region, bb in ((then_r, then_bb), (else_r, else_bb)):
            b.position_at_end(bb)
            vals = self.lower_block(region)
            incoming.append((vals, b.block))
            b.branch(merge_bb)
        self._merge(n, incoming, merge_bb)

    def lower_dispatch(self, n: Node, a: list) -> None:
        b = self.b
        (table,) = n.attrs
        bbs = [self.fn.append_basic_block(f"case{k}") for k in range(len(n.regions))]
        merge_bb = self.fn.append_basic_block("dispatch.end")
        sw = b.switch(a[0], bbs[table[-1]])  # out-of-range index: clamp to last
        for inst, region_idx in enumerate(table[:-1]):
            sw.add_case(i32(inst), bbs[region_idx])
        incoming = []
        for region, bb in zip(n.regions, bbs):
            b.position_at_end(bb)
            vals = self.lower_block(region)
            incoming.append((vals, b.block))
            b.branch(merge_bb)
        self._merge(n, incoming, merge_bb)


def queries_bvh(kernel: Kernel) -> bool:
    """Whether ``kernel``'s graph has a BVH query."""
    return any(n.op == BVH_QUERY for n in walk(kernel.block))


def used_inputs(kernel: Kernel) -> set[int]:
    """Indices of the inputs that ``kernel``'s graph reads (gathers, lengths,
    BVH queries)."""
    used = set()
    for n in walk(kernel.block):
        if n.op in ("gather", "buffer_len"):
            used.add(n.attrs[0])
        elif n.op == BVH_QUERY:
            used.update(n.attrs[2:])
    return used


class _Literal(ll.Constant):
    """A constant printed as given (``splat (float 1.0)``, ``poison``).
    llvmlite spells a vector constant element by element, which made up
    most of a module's text and of the time to print and parse it."""

    def __init__(self, typ: ll.Type, text: str):
        self.type, self.constant = typ, text

    def _get_reference(self) -> str:
        return self.constant


def context_type(kernel: Kernel) -> ll.LiteralStructType:
    """Launch context: info*, input/output/accumulator pointers, the tile
    counter, the error code, the tile size / total item count, the shared
    context (this one, or the one a thread's copy was made from), and the
    accumulators' private-copy flags."""
    ni = len(kernel.inputs)
    no = len(kernel.item_outputs)
    na = len(kernel.accumulators)
    return ll.LiteralStructType([
        ptr,                                  # 0 launch info
        ll.ArrayType(ptr, max(ni, 1)),        # 1 inputs
        ll.ArrayType(ptr, max(no, 1)),        # 2 item outputs
        ll.ArrayType(ptr, max(na, 1)),        # 3 accumulators
        i64,                                  # 4 next tile (atomic)
        i32,                                  # 5 error code (atomic max)
        i64,                                  # 6 tile size
        i64,                                  # 7 total work items
        ptr,                                  # 8 shared context (CTX_SHARED)
        ptr,                                  # 9 private-copy flags (CTX_PRIVATE)
    ])


def build_worker(module: ll.Module, item_fn: ll.Function, ctx_type, lanes: int = 1) -> ll.Function:
    """The thread body: grab tiles from the shared atomic counter until none is
    left, running ``item_fn`` on each work item (``lanes == 1``) or on each
    packet of ``lanes`` work items."""
    fn = ll.Function(module, ll.FunctionType(ptr, [ptr]), "worker")
    fn.linkage = "internal"
    (ctx,) = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    restore_fp = _ieee_float_mode(module, b)
    tile = b.load(b.gep(ctx, [i32(0), i32(6)], inbounds=True, source_etype=ctx_type), typ=i64)
    total = b.load(b.gep(ctx, [i32(0), i32(7)], inbounds=True, source_etype=ctx_type), typ=i64)
    shared = b.load(b.gep(ctx, [i32(0), i32(CTX_SHARED)], inbounds=True, source_etype=ctx_type), typ=ptr)
    counter = b.gep(shared, [i32(0), i32(4)], inbounds=True, source_etype=ctx_type)
    grab, run, body, done = (fn.append_basic_block(x) for x in ("grab", "run", "body", "done"))
    b.branch(grab)
    b.position_at_end(grab)
    t = b.atomic_rmw("add", counter, i64(1), "monotonic")
    start = b.mul(t, tile)
    b.cbranch(b.icmp_unsigned(">=", start, total), done, run)
    b.position_at_end(run)
    end = b.add(start, tile)
    end = b.select(b.icmp_unsigned(">", end, total), total, end)
    b.branch(body)
    b.position_at_end(body)
    g = b.phi(i64)
    g.add_incoming(start, run)
    b.call(item_fn, [ctx, g] if lanes == 1 else [ctx, g, end])
    g2 = b.add(g, i64(lanes))
    g.add_incoming(g2, body)
    b.cbranch(b.icmp_unsigned("<", g2, end), body, grab)
    b.position_at_end(done)
    restore_fp(b)
    b.ret(ll.Constant(ptr, None))
    return fn


def _ieee_float_mode(module: ll.Module, b: ll.IRBuilder):
    """Run the worker with IEEE denormals on x86 and return a restorer.

    XLA's threads run with flush-to-zero / denormals-are-zero set in MXCSR,
    fresh pthreads without: work items would round differently depending on
    the thread that runs them. Every worker clears FTZ (bit 15) and DAZ
    (bit 6) on entry, so results are IEEE (as numpy) on every thread."""
    if not module.triple.startswith(("x86_64", "i686", "i386")):
        return lambda _b: None
    st = module.globals.get("llvm.x86.sse.stmxcsr") or ll.Function(
        module, ll.FunctionType(ll.VoidType(), [ptr]), "llvm.x86.sse.stmxcsr")
    ld = module.globals.get("llvm.x86.sse.ldmxcsr") or ll.Function(
        module, ll.FunctionType(ll.VoidType(), [ptr]), "llvm.x86.sse.ldmxcsr")
    saved = b.alloca(i32)
    saved.type = ptr  # llvmlite types allocas as typed pointers; LLVM's are opaque
    mode = b.alloca(i32)
    mode.type = ptr
    b.call(st, [saved])
    b.store(b.and_(b.load(saved, typ=i32), i32(~0x8040 & 0xFFFFFFFF)), mode)
    b.call(ld, [mode])

    def restore(bb: ll.IRBuilder) -> None:
        bb.call(ld, [saved])
    return restore


# Row offsets up to which reads of ``row + k`` join a span read of ``row``.
SPAN_MAX_OFFSET = 16


def _row_and_offset(row: Node) -> tuple:
    """(base, k) where the integer row index ``row`` is ``base + k`` for a
    small constant k >= 0, else (row, 0)."""
    if row.op == "add" and row.type in (I32, U32):
        for a, c in ((row.args[0], row.args[1]), (row.args[1], row.args[0])):
            if c.op == "const" and 0 < int(c.attrs[0]) < SPAN_MAX_OFFSET:
                return a, int(c.attrs[0])
    return row, 0


def _spans(comps: list, lanes: int) -> list:
    """Sorted columns ``comps`` cut into runs that each span fewer than
    ``lanes`` columns (what one transposed read covers)."""
    runs = []
    for c in comps:
        if runs and c - runs[-1][0] < lanes:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


# Launch-environment reads that are the same for every work item.
_UNIFORM_ENV_OPS = ("const", "launch_size", "buffer_len")


def uniform_values(block: Block) -> set:
    """What a packet computes identically in every lane: the ids of nodes
    (and ``(loop id, k)`` for loop results) whose value depends on no work
    item, and ``("loop", id)`` for each loop whose condition is such a
    value, so that all lanes run it the same number of times (a loop over
    a kernel's ``spp``). Conservative: a value it cannot prove uniform
    (after a branch, a dispatch, a BVH query) counts as varying."""
    uniform: set = set()
    _uniform_block(block, uniform)
    return uniform


def _uniform_block(block: Block, uniform: set) -> None:
    for n in block.nodes:
        op = n.op
        if op == "proj":
            if (n.args[0].id, n.attrs[0]) in uniform:
                uniform.add(n.id)
        elif op in _UNIFORM_ENV_OPS or ((op in PURE_OPS or op == "gather")
                                         and all(a.id in uniform for a in n.args)):
            # (a gather reads a read-only input: the same row, the same value)
            uniform.add(n.id)
        elif op == "loop":
            _uniform_loop(n, uniform)
        else:
            for region in n.regions:      # their params count as varying
                _uniform_block(region, uniform)


def _uniform_loop(n: Node, uniform: set) -> None:
    # A loop variable is uniform if its initial value and its update are;
    # inside the loop every lane runs every iteration (finished lanes keep
    # computing, masked), so that holds for divergent loops too. Assume it of
    # every variable with a uniform start and drop those whose update is not,
    # until nothing changes.
    cond, body = n.regions
    candidates = {k for k, a in enumerate(n.args) if a.id in uniform}
    while True:
        trial = set(uniform)
        for k in candidates:
            trial.update((cond.params[k].id, body.params[k].id))
        _uniform_block(cond, trial)
        _uniform_block(body, trial)
        kept = {k for k in candidates if body.results[k].id in trial}
        if kept == candidates:
            break
        candidates = kept
    uniform |= trial
    if cond.results[0].id in trial:
        # Every lane leaves after the same iteration: its results are uniform too.
        uniform.add(("loop", n.id))
        uniform.update((n.id, k) for k in candidates)


class PacketCodegen(ItemCodegen):
    """Emits the graph for a packet of ``lanes`` consecutive work items in
    SIMD registers (one vector lane per work item), Dr.Jit-style.

    Control flow becomes masks: a loop runs while any lane is active and
    freezes finished lanes with selects; a branch side runs only if some lane
    takes it; a dispatch runs each implementation for the lanes that call
    it. Effects (scatter-add, check, output stores) honour the active mask,
    so every lane computes exactly what the one-lane code computes.
    """

    def __init__(self, kernel: Kernel, module: ll.Module, layout: InfoLayout, ctx_type, lanes: int,
                 shared_routines: bool = True):
        super().__init__(kernel, module, layout, ctx_type)
        self.lanes = lanes
        # The BVH packet routines are declared, and linked from their own
        # object (bvh_traversal.shared_module), unless defined here.
        self.shared_routines = shared_routines
        self.mask = None
        self._vector_consts: dict[tuple, ll.Constant] = {}
        # Gathers of one row in a block (lower_block): node id -> the group,
        # and the columns the group's first read loaded for the others.
        self._row_group: dict[int, list] = {}
        self._row_loaded: dict[int, object] = {}
        # Gathers of adjacent rows (row + 0, row + 1, ...) read as one span
        # of columns: node id -> (the base row's node, [(offset, gather)]).
        self._span_group: dict[int, tuple] = {}

    # -- vector helpers -------------------------------------------------
    def T(self, t: str) -> ll.Type:
        return ll.VectorType(LLTYPE[t], self.lanes)

    def T64(self) -> ll.Type:
        return ll.VectorType(i64, self.lanes)

    def vector_literal(self, vt: ll.VectorType, text: str) -> ll.Constant:
        """The constant of type ``vt`` spelled ``text``, one object per
        spelling (llvmlite formats a constant each time a new object is
        printed)."""
        key = (str(vt), text)
        c = self._vector_consts.get(key)
        if c is None:
            c = self._vector_consts[key] = _Literal(vt, text)
        return c

    def broadcast(self, c: ll.Constant):
        vt = ll.VectorType(c.type, self.lanes)
        if type(c) is ll.Constant:
            return self.vector_literal(vt, f"splat ({c})")
        # A constant expression (a NaN's bitcast): built per element, as
        # llvmlite cannot print a vector bitcast expression.
        return ll.Constant(vt, [c] * self.lanes)

    def poison(self, vt: ll.VectorType) -> ll.Constant:
        return self.vector_literal(vt, "poison")

    def splat(self, v):
        b = self.b
        vt = ll.VectorType(v.type, self.lanes)
        one = b.insert_element(self.poison(vt), v, i32(0))
        mask = self._vector_consts.get("splat mask")
        if mask is None:  # (llvmlite reads a shuffle mask's elements: a plain constant)
            mask = self._vector_consts["splat mask"] = ll.Constant(ll.VectorType(i32, self.lanes),
                                                                   [i32(0)] * self.lanes)
        return b.shuffle_vector(one, self.poison(vt), mask)

    def type_suffix(self, t: str) -> str:
        return f"v{self.lanes}" + super().type_suffix(t)

    def libm_scalar_lanes(self, name: str, vals: list):
        # The C math library is scalar: call it lane by lane, in one
        # function per name that every use calls (inline, the lane loops of
        # vmath's rare fallbacks alone were a twentieth of a megakernel's IR).
        def body(b, args):
            fn = self.decl(name, f32, [f32] * len(vals))
            out = self.poison(self.T(F32))
            for lane in range(self.lanes):
                out = b.insert_element(out, b.call(fn, [b.extract_element(v, i32(lane)) for v in args]), i32(lane))
            b.ret(out)

        return self.b.call(self.outlined(f"jaxrender.{name}.lanes", self.T(F32), [self.T(F32)] * len(vals), body),
                           vals)

    def outlined(self, name: str, ret: ll.Type, args: list, body) -> ll.Function:
        """The module's internal, never-inlined function ``name``, whose
        body ``body(builder, arguments)`` emits the first time it is asked
        for: code that many uses call rather than repeat."""
        fn = self.decl(name, ret, args)
        if not fn.blocks:
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            body(ll.IRBuilder(fn.append_basic_block("entry")), fn.args)
        return fn

    def any(self, mask):
        return self.b.call(self.decl(f"llvm.vector.reduce.or.v{self.lanes}i1", i1, [self.T(BOOL)]), [mask])

    def lower_cast(self, v, src: str, dst: str):
        if src != F32 or dst not in (I32, U32):
            return super().lower_cast(v, src, dst)
        # Saturating float->int with the packet's own compares and selects:
        # LLVM expands a vector llvm.fpto[su]i.sat into one scalar
        # conversion, compare and cmov per lane on x86.
        b = self.b
        lo, hi, top = (-2.0 ** 31, 2147483520.0, 2 ** 31 - 1) if dst == I32 else (0.0, 4294967040.0, 2 ** 32 - 1)
        # (hi: the largest float below the type's bound; NaN fails "v > lo")
        inside = b.select(b.fcmp_ordered(">", v, self.cf32(lo)), v, self.cf32(lo))
        inside = b.select(b.fcmp_ordered("<", inside, self.cf32(hi)), inside, self.cf32(hi))
        r = b.fptosi(inside, self.T(I32)) if dst == I32 else b.fptoui(inside, self.T(U32))
        r = b.select(b.fcmp_ordered(">=", v, self.cf32(2.0 ** 31 if dst == I32 else 2.0 ** 32)),
                     self.ci32(top), r)
        return b.select(b.fcmp_unordered("uno", v, v), self.ci32(0), r) if dst == I32 else r

    def lane_ptrs(self, base, offsets, etype):
        """Vector GEP: one address per lane."""
        p = self.b.gep(base, [offsets], inbounds=True, source_etype=etype)
        p.type = ll.VectorType(ptr, self.lanes)  # llvmlite does not infer vector GEP types
        return p

    def masked_gather(self, ptrs, etype, mask):
        vt = ll.VectorType(etype, self.lanes)
        n = self.lanes
        sfx = {f32: "f32", i32: "i32"}[etype]
        fn = self.decl(f"llvm.masked.gather.v{n}{sfx}.v{n}p0", vt,
                       [ll.VectorType(ptr, n), i32, self.T(BOOL), vt])
        return self.b.call(fn, [ptrs, i32(4), mask, ll.Constant(vt, None)])

    def masked_scatter(self, values, ptrs, mask):
        n = self.lanes
        et = values.type.element
        sfx = {f32: "f32", i32: "i32"}[et]
        fn = self.decl(f"llvm.masked.scatter.v{n}{sfx}.v{n}p0", ll.VoidType(),
                       [values.type, ll.VectorType(ptr, n), i32, self.T(BOOL)])
        self.b.call(fn, [values, ptrs, i32(4), mask])

    # -- the packet function ----------------------------------------------
    def build_item(self) -> ll.Function:
        fn = ll.Function(self.m, ll.FunctionType(ll.VoidType(), [ptr, i64, i64]), "item")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        ctx, g0, end = fn.args
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        self.b, self.fn = b, fn
        L = self.layout
        n = self.lanes
        self.info = self.ctx_field(b, ctx, 0, "info")
        info_at = self.info_at

        lane_ids = ll.Constant(self.T64(), [i64(k) for k in range(n)])
        g = b.add(self.splat(g0), lane_ids, name="g")
        self.mask = b.icmp_unsigned("<", g, self.splat(end))
        n_local = info_at(0, "n_local")
        self.n_local = n_local
        zero64 = self.ci64(0)
        if L.nb:
            bidx = b.udiv(g, self.splat(n_local))
            local = b.urem(g, self.splat(n_local))
            rem = bidx
            midx = [None] * L.nb
            for k in reversed(range(L.nb)):
                size = self.splat(info_at(L.batch_shape + k, f"bdim{k}"))
                midx[k] = b.urem(rem, size)
                rem = b.udiv(rem, size)
        else:
            bidx, local, midx = zero64, g, []
        self.local = local
        self.in_data, self.in_off, self.in_rows, self.in_maxrow = [], [], [], []
        used = used_inputs(self.k)
        for i, spec in enumerate(self.in_specs):
            if i not in used:  # (no code for the inputs the kernel never reads)
                for field in (self.in_data, self.in_off, self.in_rows, self.in_maxrow):
                    field.append(None)
                continue
            self.in_data.append(self.ctx_field_ptr(b, ctx, 1, i, f"in{i}"))
            off = zero64
            for k in range(L.nb):
                off = b.add(off, b.mul(midx[k], self.splat(info_at(L.stride(i, k), f"stride{i}_{k}"))))
            # Offsets into inputs fit in i32 (the bridge rejects inputs of
            # 2**31 elements or more), so gathers use 32-bit lane indices.
            self.in_off.append(b.trunc(off, self.T(I32)))
            rows = info_at(L.rows(i), f"rows{i}")
            maxrow = b.select(b.icmp_unsigned("==", rows, i64(0)), i64(0), b.sub(rows, i64(1)))
            self.in_rows.append(rows)
            self.in_maxrow.append(self.splat(b.trunc(maxrow, i32)))
        self.acc_data, self.acc_off, self.acc_rows = [], [], []
        for j, spec in enumerate(self.acc_specs):
            self.acc_data.append(self.ctx_field_ptr(b, ctx, 3, j, f"acc{j}"))
            rows = info_at(L.acc_rows(j), f"accrows{j}")
            width = _width(spec.item_shape)
            self.acc_off.append(b.mul(bidx, self.splat(b.mul(rows, i64(width)))) if L.nb else zero64)
            self.acc_rows.append(self.splat(rows))
        self.acc_private = self.accumulator_privacy(b, ctx)
        self.err_ptr = self.error_pointer(b, ctx)
        self.lower_block(self.k.block)
        results = [self.vals[r.id] for r in self.k.block.results]
        pos = 0
        for j, spec in enumerate(self.out_specs):
            data = self.ctx_field_ptr(b, ctx, 2, j, f"out{j}")
            width = _width(spec.item_shape)
            et = LLTYPE[spec.dtype]
            if width == 1:
                self.masked_scatter(results[pos], self.lane_ptrs(data, g, et), self.mask)
            else:
                self.store_rows(data, g0, results[pos:pos + width], et)
            pos += width
        b.ret_void()
        return fn

    def store_rows(self, data, g0, columns: list, et: ll.Type) -> None:
        """Write the packet's output rows (lane k's row is item g0 + k's,
        ``len(columns)`` wide) from one vector per column. The columns go
        to a stack tile with vector stores; a loop in a function of the
        module's own copies each active lane's row out. One masked scatter
        per column instead made LLVM split every store into a branch per
        lane (AVX2 has no scatter): for a footprint of 5x5 pixels, 800
        blocks, two thirds of the primal kernel's machine code generation
        time."""
        b = self.b
        width, vt = len(columns), ll.VectorType(et, self.lanes)
        tile = self.entry_alloca(vt, width)
        for c, v in enumerate(columns):
            b.store(v, b.gep(tile, [i64(c)], inbounds=True, source_etype=vt), align=4)
        bits = b.zext(b.bitcast(self.mask, ll.IntType(self.lanes)), i32)
        b.call(self._row_copier(et), [tile, data, g0, i64(width), bits])

    def _row_copier(self, et: ll.Type) -> ll.Function:
        """The module's function (tile, out, g0, width, lane bits): for
        each lane k whose bit is set, out[(g0 + k) * width + c] =
        tile[c * lanes + k] for c < width."""
        n = self.lanes

        def body(b, args):
            tile, out, g0, width, bits = args
            fn = b.function
            lane_bb, row_bb, next_bb, done_bb = (fn.append_basic_block(x) for x in ("lane", "row", "next", "done"))
            entry = b.block
            b.branch(lane_bb)
            b.position_at_end(lane_bb)
            k = b.phi(i64)
            k.add_incoming(i64(0), entry)
            on = b.icmp_unsigned("!=", b.and_(b.lshr(bits, b.trunc(k, i32)), i32(1)), i32(0))
            dst = b.mul(b.add(g0, k), width)
            b.cbranch(on, row_bb, next_bb)   # (rows are at least two values wide: build_item)
            b.position_at_end(row_bb)
            c = b.phi(i64)
            c.add_incoming(i64(0), lane_bb)
            v = b.load(b.gep(tile, [b.add(b.mul(c, i64(n)), k)], inbounds=True, source_etype=et), typ=et, align=4)
            b.store(v, b.gep(out, [b.add(dst, c)], inbounds=True, source_etype=et), align=4)
            c1 = b.add(c, i64(1))
            c.add_incoming(c1, row_bb)
            b.cbranch(b.icmp_unsigned("<", c1, width), row_bb, next_bb)
            b.position_at_end(next_bb)
            k1 = b.add(k, i64(1))
            k.add_incoming(k1, next_bb)
            b.cbranch(b.icmp_unsigned("<", k1, i64(n)), lane_bb, done_bb)
            b.position_at_end(done_bb)
            b.ret_void()

        sfx = {f32: "f32", i32: "i32"}[et]
        return self.outlined(f"jaxrender.store_rows.{sfx}.lanes", ll.VoidType(), [ptr, ptr, i64, i64, i32], body)

    # -- memory -------------------------------------------------------------
    def lower_block(self, block: Block) -> list:
        # Reads of one row's columns (a triangle's nine floats, a material's
        # parameters) are separate gathers in the graph: give each such
        # group in a block one clamp, one uniformity test and one branch
        # (the first read loads every column the block reads). Per column,
        # the tests were a fifth of a megakernel's LLVM IR.
        groups: dict = {}
        spans: dict = {}
        for n in block.nodes:
            if n.op == "gather":
                groups.setdefault((n.attrs[0], n.attrs[2], n.type, n.args[0].id), []).append(n)
                base, k = _row_and_offset(n.args[0])
                spans.setdefault((n.attrs[0], n.attrs[2], n.type, base.id), (base, []))[1].append((k, n))
        for members in groups.values():
            if len(members) > 1:
                for m in members:
                    self._row_group[m.id] = members
        # Reads of adjacent rows (a filter footprint's pixels along a row of
        # the canvas, each pixel a row of colour channels) are one run of
        # columns past the first: one span read when every lane's rows lie
        # in the buffer (:meth:`_load_span`).
        for (inp, width, _, _), (base, members) in spans.items():
            columns = {k * width + m.attrs[1] for k, m in members}
            if len({k for k, _ in members}) > 1 and len(columns) >= TRANSPOSED_MIN_COLUMNS:
                for _, m in members:
                    self._span_group[m.id] = (base, members)
        return super().lower_block(block)

    def lower_gather(self, n: Node, row):
        loaded = self._row_loaded.pop(n.id, None)
        if loaded is not None:
            return loaded
        span = self._span_group.pop(n.id, None)
        if span is not None:
            return self._load_span(n, *span)
        members = self._row_group.pop(n.id, [n])
        comps = sorted({m.attrs[1] for m in members})
        values = dict(zip(comps, self._load_row(n, row, comps)))
        for m in members:
            if m is not n:
                self._row_group.pop(m.id, None)
                self._row_loaded[m.id] = values[m.attrs[1]]
        return values[n.attrs[1]]

    def _load_span(self, n: Node, base: Node, members: list):
        """Gathers ``members`` ((row offset, gather) pairs) of rows ``base +
        offset`` of one input, ``n`` the first of them: where every lane's
        rows lie in the buffer and in order, the columns past the first
        row's start as one row's (:meth:`_load_row`: transposed where
        several), else each row clamped and read on its own (as gathers of
        those rows always are). The other members' values wait in
        ``_row_loaded``."""
        b = self.b
        inp, _, width = n.attrs
        signed = base.type == I32
        offsets = sorted({k for k, _ in members})
        lo, hi = offsets[0], offsets[-1]
        at = self.vals[base.id]
        first = b.add(at, self.ci32(lo)) if lo else at
        last = b.add(at, self.ci32(hi))
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        inside = b.and_(cmp("<=", first, last), cmp("<=", last, self.in_maxrow[inp]))
        if signed:
            inside = b.and_(inside, b.icmp_signed(">=", first, self.ci32(0)))
        every = b.call(self.decl(f"llvm.vector.reduce.and.v{self.lanes}i1", i1, [self.T(BOOL)]), [inside])
        span_bb = self.fn.append_basic_block("span.inside")
        rows_bb = self.fn.append_basic_block("span.rows")
        join = self.fn.append_basic_block("span.join")
        b.cbranch(every, span_bb, rows_bb)
        keys = sorted({(k, m.attrs[1]) for k, m in members})
        b.position_at_end(span_bb)
        loaded = self._load_row(n, first, [(k - lo) * width + c for k, c in keys])
        span_end = b.block
        b.branch(join)
        b.position_at_end(rows_bb)
        apart = {}
        for k in offsets:
            comps = [c for j, c in keys if j == k]
            apart.update(zip([(k, c) for c in comps],
                             self._load_row(n, b.add(at, self.ci32(k)) if k else at, comps)))
        rows_end = b.block
        b.branch(join)
        b.position_at_end(join)
        values, own = {}, None
        for key, v in zip(keys, loaded):
            phi = b.phi(self.T(n.type))
            phi.add_incoming(v, span_end)
            phi.add_incoming(apart[key], rows_end)
            values[key] = phi
        for k, m in members:
            self._span_group.pop(m.id, None)
            self._row_group.pop(m.id, None)
            if m is n:
                own = values[(k, m.attrs[1])]
            else:
                self._row_loaded[m.id] = values[(k, m.attrs[1])]
        return own

    def _load_row(self, n: Node, row, comps: list) -> list:
        """Columns ``comps`` of the rows of input ``n.attrs[0]`` at ``row``
        (per lane), as gathers."""
        b = self.b
        inp, _, width = n.attrs
        mx = self.in_maxrow[inp]
        if n.args[0].type == I32:
            r = b.select(b.icmp_signed("<", row, self.ci32(0)), self.ci32(0), row)
            r = b.select(b.icmp_signed(">", r, mx), mx, r)
        else:
            r = b.select(b.icmp_unsigned(">", row, mx), mx, row)
        row_off = b.add(b.mul(r, self.ci32(width)) if width > 1 else r, self.in_off[inp])
        et = LLTYPE[n.type]
        # All lanes often read the same row (a loop over a buffer that lanes
        # run in step): then one scalar load and a broadcast beat a gather.
        # Neither test nor gather looks at the active mask (indices are
        # clamped, so every lane may load): the mask would chain each load to
        # the previous loop condition.
        ref = b.extract_element(row_off, i32(0))
        same = b.icmp_unsigned("==", row_off, self.splat(ref))
        uniform = b.call(self.decl(f"llvm.vector.reduce.and.v{self.lanes}i1", i1, [self.T(BOOL)]), [same])
        uni_bb = self.fn.append_basic_block("gather.uniform")
        var_bb = self.fn.append_basic_block("gather.varying")
        join = self.fn.append_basic_block("gather.join")
        b.cbranch(uniform, uni_bb, var_bb)
        b.position_at_end(uni_bb)
        v_uni = [self.splat(b.load(b.gep(self.in_data[inp], [b.add(ref, i32(comp)) if comp else ref], inbounds=True,
                                         source_etype=et), typ=et)) for comp in comps]
        b.branch(join)
        b.position_at_end(var_bb)
        v_var = []
        for chunk in _spans(comps, self.lanes):
            if len(chunk) >= TRANSPOSED_MIN_COLUMNS:
                v_var += self._transposed_rows(self.in_data[inp], row_off, et, chunk)
            else:
                v_var += [self.masked_gather(self.lane_ptrs(self.in_data[inp], b.add(row_off, self.ci32(comp))
                                                            if comp else row_off, et), et, self.ci1(1))
                          for comp in chunk]
        b.branch(join)
        b.position_at_end(join)
        out = []
        for u, v in zip(v_uni, v_var):
            phi = b.phi(self.T(n.type))
            phi.add_incoming(u, uni_bb)
            phi.add_incoming(v, var_bb)
            out.append(phi)
        return out

    def _transposed_rows(self, data, row_off, et, comps: list) -> list:
        """Columns ``comps`` (sorted, spanning fewer than ``lanes``) of each
        lane's row at element offset ``row_off``: one masked load of the
        row per lane, then a transpose by shuffles. On AVX-512 machines (AMD
        Zen 4) a gather costs about as much as ``lanes`` loads, so a
        triangle's nine columns read as nine gathers took ~7% of a Cornell
        box frame each time a kernel read them."""
        b, n = self.b, self.lanes
        lo = comps[0]
        need = {c - lo for c in comps}
        vt = ll.VectorType(et, n)
        mt = ll.VectorType(i1, n)
        sfx = {f32: "f32", i32: "i32"}[et]
        load = self.decl(f"llvm.masked.load.v{n}{sfx}.p0", vt, [ptr, i32, mt, vt])
        mask = ll.Constant(mt, [1 if k in need else 0 for k in range(n)])
        rows = {}
        for j in range(n):
            off = b.extract_element(row_off, i32(j))
            p = b.gep(data, [b.add(off, i32(lo)) if lo else off], inbounds=True, source_etype=et)
            rows[j] = b.call(load, [p, i32(4), mask, ll.Constant(vt, ll.Undefined)])
        # Transpose: stage k swaps bit k of the row index with bit k of the
        # element index (after every bit, row c holds element c of each
        # lane's row). Only the rows that the needed outputs come from are
        # built: wanted[k] are stage k's outputs that later stages use.
        stages = n.bit_length() - 1
        wanted = [set() for _ in range(stages)]
        rows_needed = need
        for k in reversed(range(stages)):
            wanted[k] = rows_needed
            rows_needed = {r & ~(1 << k) for r in rows_needed} | {r | (1 << k) for r in rows_needed}
        idx = ll.VectorType(i32, n)
        for k in range(stages):
            bit = 1 << k
            low = ll.Constant(idx, [q if not q & bit else n + (q & ~bit) for q in range(n)])
            high = ll.Constant(idx, [q | bit if not q & bit else n + q for q in range(n)])
            out = {}
            for r in wanted[k]:
                r0, r1 = r & ~bit, r | bit
                out[r] = b.shuffle_vector(rows[r0], rows[r1], high if r & bit else low)
            rows = out
        return [rows[c - lo] for c in comps]

    def lower_scatter(self, n: Node, row, value):
        b = self.b
        acc, comp, width = n.attrs
        r, ok = self.scatter_row(n, row)
        ok = b.and_(ok, self.mask)
        et = f32 if n.args[1].type == F32 else i32
        # Adding zero changes no sum (accumulators start at +0, so not even
        # the sign of a zero), and adjoint kernels scatter many exact zeros:
        # the parameter slots a material does not use.
        zero_v = self.broadcast(ll.Constant(et, 0.0 if et == f32 else 0))
        nonzero = b.fcmp_unordered("!=", value, zero_v) if et == f32 else b.icmp_signed("!=", value, zero_v)
        ok = b.and_(ok, nonzero)
        off = b.add(b.add(b.mul(r, self.ci64(width)), self.ci64(comp)), self.acc_off[acc])
        private = self.acc_private[acc]
        with b.if_then(self.any(ok), likely=True):
            if private is None:
                self._shared_adds(acc, off, value, ok, et)
                return
            with b.if_else(private, likely=True) as (mine, others):
                with mine:
                    self._private_adds(acc, off, value, ok)
                with others:
                    self._shared_adds(acc, off, value, ok, et)

    def _first_lane_and_uniform(self, off, ok):
        """(index of the first active lane, whether every active lane
        targets that lane's address)."""
        b = self.b
        bits = b.bitcast(ok, ll.IntType(self.lanes))
        it = ll.IntType(self.lanes)
        cttz = self.decl(f"llvm.cttz.i{self.lanes}", it, [it, i1])
        first = b.zext(b.call(cttz, [bits, ll.Constant(i1, 1)]), i32) if self.lanes < 32 else \
            b.trunc(b.call(cttz, [bits, ll.Constant(i1, 1)]), i32)
        ref = b.extract_element(off, first)
        same = b.or_(b.icmp_signed("==", off, self.splat(ref)), b.not_(ok))
        uniform = b.call(self.decl(f"llvm.vector.reduce.and.v{self.lanes}i1", i1, [self.T(BOOL)]), [same])
        return first, uniform

    def _shared_adds(self, acc: int, off, value, ok, et: ll.Type) -> None:
        """Atomic adds into XLA's buffer, which every thread shares."""
        b = self.b
        ptrs = self.lane_ptrs(self.acc_data[acc], off, et)
        rmw = "fadd" if et == f32 else "add"
        # Adjoint kernels scatter into parameter rows that neighbouring
        # pixels share (one material): when every active lane targets the
        # same address, sum the lanes and do one atomic, not 16 contended
        # ones.
        first, uniform = self._first_lane_and_uniform(off, ok)
        with b.if_else(uniform, likely=True) as (then, otherwise):
            with then:
                zero = self.broadcast(ll.Constant(et, 0.0 if et == f32 else 0))
                vals = b.select(ok, value, zero)
                if et == f32:
                    red = b.call(self.decl(f"llvm.vector.reduce.fadd.v{self.lanes}f32", f32,
                                           [f32, self.T(F32)]), [ll.Constant(f32, -0.0), vals])
                else:
                    red = b.call(self.decl(f"llvm.vector.reduce.add.v{self.lanes}i32", i32,
                                           [self.T(I32)]), [vals])
                b.atomic_rmw(rmw, b.extract_element(ptrs, first), red, "monotonic")
            with otherwise:
                b.call(self._segment_atomics(rmw, et), [ptrs, value, ok])

    def _private_adds(self, acc: int, off, value, ok) -> None:
        """Plain float64 adds into this thread's own copy (no other thread
        writes it): a packet aimed at one address adds its lanes' sum."""
        b = self.b
        ptrs = self.lane_ptrs(self.acc_data[acc], off, f64)
        first, uniform = self._first_lane_and_uniform(off, ok)
        with b.if_else(uniform, likely=True) as (then, otherwise):
            with then:
                wide = ll.VectorType(f64, self.lanes)
                vals = b.select(ok, b.fpext(value, wide), ll.Constant(wide, [0.0] * self.lanes))
                red = b.call(self.decl(f"llvm.vector.reduce.fadd.v{self.lanes}f64", f64, [f64, wide]),
                             [ll.Constant(f64, -0.0), vals])
                p = b.extract_element(ptrs, first)
                b.store(b.fadd(b.load(p, typ=f64), red), p)
            with otherwise:
                b.call(self._segment_private_adds(), [ptrs, value, ok])

    SEGMENTS = 4

    def _segment_adds(self, name: str, et: ll.Type, wide: ll.Type, add, rest) -> ll.Function:
        """The module's function ``name`` adding a packet's lanes (``et``
        values) at their addresses: up to SEGMENTS times, the lanes aimed at
        the first active lane's address add their sum (in ``wide``
        elements) there, ``add(builder, pointer, sum)``; any lanes left go
        lane by lane (``rest``, a lane-adds function). An adjoint's packet
        often spans a few materials or triangles: a few sums, not sixteen
        dependent (or atomic) adds."""
        n = self.lanes
        it = ll.IntType(n)
        wide_v = ll.VectorType(wide, n)
        vptr = ll.VectorType(ptr, n)
        is_float = isinstance(wide, (ll.FloatType, ll.DoubleType))
        zero = ll.Constant(wide_v, [0.0 if is_float else 0] * n)
        suffix = "f64" if isinstance(wide, ll.DoubleType) else "f32" if is_float else f"i{wide.width}"

        def body(b, args):
            ptrs, value, ok = args
            fn = b.function
            addrs = b.ptrtoint(ptrs, ll.VectorType(i64, n))
            widened = b.fpext(value, wide_v) if wide is not et else value
            cttz = self.decl(f"llvm.cttz.i{n}", it, [it, i1])
            if is_float:
                reduce = self.decl(f"llvm.vector.reduce.fadd.v{n}{suffix}", wide, [wide, wide_v])
            else:
                reduce = self.decl(f"llvm.vector.reduce.add.v{n}{suffix}", wide, [wide_v])
            start = b.bitcast(ok, it)
            entry = b.block
            head, seg, tail, done = (fn.append_basic_block(x) for x in ("head", "segment", "rest", "done"))
            b.branch(head)
            b.position_at_end(head)
            bits = b.phi(it)
            count = b.phi(i32)
            bits.add_incoming(start, entry)
            count.add_incoming(i32(0), entry)
            left = b.icmp_unsigned("!=", bits, ll.Constant(it, 0))
            b.cbranch(b.and_(left, b.icmp_unsigned("<", count, i32(self.SEGMENTS))), seg, tail)
            b.position_at_end(seg)
            first = b.call(cttz, [bits, ll.Constant(i1, 1)])
            first = b.zext(first, i32) if n < 32 else b.trunc(first, i32)
            target = b.extract_element(addrs, first)
            same = b.and_(b.icmp_unsigned("==", addrs, bvh_traversal._splat(b, target, n)),
                          b.bitcast(bits, self.T(BOOL)))
            lanes = b.select(same, widened, zero)
            red = b.call(reduce, [ll.Constant(wide, -0.0), lanes] if is_float else [lanes])
            add(b, b.extract_element(ptrs, first), red)
            bits.add_incoming(b.and_(bits, b.not_(b.bitcast(same, it))), seg)
            count.add_incoming(b.add(count, i32(1)), seg)
            b.branch(head)
            b.position_at_end(tail)
            with b.if_then(left, likely=False):
                b.call(rest, [ptrs, value, b.bitcast(bits, self.T(BOOL))])
            b.branch(done)
            b.position_at_end(done)
            b.ret_void()

        return self.outlined(name, ll.VoidType(), [vptr, ll.VectorType(et, n), self.T(BOOL)], body)

    def _segment_private_adds(self) -> ll.Function:
        """Segmented float64 adds into this thread's own copy (``_segment_adds``)."""
        def add(b, p, v):
            b.store(b.fadd(b.load(p, typ=f64), v), p)
        return self._segment_adds("jaxrender.private_fadd.segments", f32, f64, add, self._lane_private_adds())

    def _segment_atomics(self, rmw: str, et: ll.Type) -> ll.Function:
        """Segmented atomic adds into a shared buffer (``_segment_adds``):
        one atomic per group of lanes aimed at one address."""
        return self._segment_adds(f"jaxrender.atomic_{rmw}.{et}.segments", et, et,
                                  lambda b, p, v: b.atomic_rmw(rmw, p, v, "monotonic"), self._lane_atomics(rmw, et))

    def _lane_private_adds(self) -> ll.Function:
        """The module's function adding each active lane's value, widened,
        at its own address, lane by lane (lanes may share an address)."""
        def add(b, p, v):
            b.store(b.fadd(b.load(p, typ=f64), b.fpext(v, f64)), p)
        return self._lane_adds("jaxrender.private_fadd.lanes", f32, add)

    def _lane_atomics(self, rmw: str, et: ll.Type) -> ll.Function:
        """The module's function that adds each active lane's value at its
        own address, one atomic per lane."""
        return self._lane_adds(f"jaxrender.atomic_{rmw}.{et}.lanes", et,
                               lambda b, p, v: b.atomic_rmw(rmw, p, v, "monotonic"))

    def _lane_adds(self, name: str, et: ll.Type, add) -> ll.Function:
        """The module's function ``name`` that runs ``add(builder, pointer,
        value)`` for each active lane: one body that every scatter calls
        (inline, these lane loops were an eighth of a megakernel's IR)."""
        def body(b, args):
            ptrs, value, ok = args
            for lane in range(self.lanes):
                with b.if_then(b.extract_element(ok, i32(lane))):
                    add(b, b.extract_element(ptrs, i32(lane)), b.extract_element(value, i32(lane)))
            b.ret_void()

        return self.outlined(name, ll.VoidType(),
                             [ll.VectorType(ptr, self.lanes), ll.VectorType(et, self.lanes), self.T(BOOL)], body)

    def call_bvh_query(self, mode: int, bufs: list[int], a: list) -> list:
        """Each active lane runs the traversal alone: lanes of a packet
        diverge at once in a hierarchy. The loop over the lanes is a function
        of its own (bvh_traversal.packet_routine), so its registers are not
        shared with the megakernel's live state (inlined, LLVM spilled and
        reloaded that state inside the traversal loop); the packet's rays,
        buffer offsets and results pass through memory once per query."""
        b = self.b
        n = self.lanes
        ranged = len(a) > RAY_ARGS       # a group's sub-range per lane (ir.bvh_query)
        fn = bvh_traversal.packet_routine(self.m, mode, n, declare_only=self.shared_routines, ranged=ranged)
        vf, vi = self.T(F32), self.T(I32)
        rays, offs, out = self.entry_alloca(vf, RAY_ARGS), self.entry_alloca(vi, len(bufs)), self.entry_alloca(vi, 4)
        for j, v in enumerate(a[:RAY_ARGS]):
            b.store(v, b.gep(rays, [i64(j)], inbounds=True, source_etype=vf), align=4)
        extra = []
        if ranged:
            extra = [self.entry_alloca(vi, RANGE_ARGS)]
            for j, v in enumerate(a[RAY_ARGS:]):
                b.store(v, b.gep(extra[0], [i64(j)], inbounds=True, source_etype=vi), align=4)
        for j, i in enumerate(bufs):
            b.store(self.in_off[i], b.gep(offs, [i64(j)], inbounds=True, source_etype=vi), align=4)
        bits = b.zext(b.bitcast(self.mask, ll.IntType(n)), i32)
        b.call(fn, [self.in_data[i] for i in bufs] + [self.in_rows[bufs[0]], self.in_rows[bufs[1]], offs, rays,
                                                       bits, out] + extra, cconv=fn.calling_convention)
        got = [b.load(b.gep(out, [i64(k)], inbounds=True, source_etype=vi), typ=vi, align=4)
               for k in range(4 if mode == CLOSEST else 1)]
        if mode != CLOSEST:
            return [b.icmp_unsigned("!=", got[0], self.ci32(0))]
        return [b.bitcast(got[0], vf), got[1], b.bitcast(got[2], vf), b.bitcast(got[3], vf)]

    def lower_check(self, n: Node, ok):
        b = self.b
        failing = b.and_(self.mask, b.not_(ok))
        with b.if_then(self.any(failing), likely=False):
            b.atomic_rmw("umax", self.err_ptr, i32(n.attrs[0]), "monotonic")

    # -- masked control flow ------------------------------------------------
    def lower_loop(self, n: Node, init: list) -> None:
        if ("loop", n.id) in self.uniform:
            # Its condition is the same in every lane (uniform_values): no
            # per-lane exit to record, so the one-lane code's plain phis do.
            ItemCodegen.lower_loop(self, n, init)
            return
        self._lower_divergent_loop(n, init)

    def loop_goes_on(self, c):
        # (of a uniform loop) the active lanes decide: a packet with none
        # active, in a branch no lane takes, skips the loop
        return self.any(self.b.and_(self.mask, c))

    def captured_signature(self, captured: list) -> tuple:
        # (a loop inside may run uniformly only where what it reads is uniform)
        return tuple(c.id in self.uniform for c in captured)

    @property
    def uniform(self) -> set:
        u = getattr(self, "_uniform", None)
        if u is None:
            u = self._uniform = uniform_values(self.k.block)
        return u

    def _lower_divergent_loop(self, n: Node, init: list) -> None:
        """Run while any lane is active. Lanes keep computing after their
        condition fails (their values are unused and every effect is masked),
        and each lane's result is captured when it leaves. Freezing finished
        lanes with selects instead would make every load of the next
        iteration wait for the current condition: a loop-carried dependency
        through the whole body."""
        b = self.b
        cond, body = n.regions
        outer = self.mask
        pre = b.block
        header = self.fn.append_basic_block("loop.header")
        body_bb = self.fn.append_basic_block("loop.body")
        exit_bb = self.fn.append_basic_block("loop.exit")
        b.branch(header)
        b.position_at_end(header)
        phis = [b.phi(self.T(x.type)) for x in n.args]
        kept = [b.phi(self.T(x.type)) for x in n.args]
        mphi = b.phi(self.T(BOOL))
        for p, q, v in zip(phis, kept, init):
            p.add_incoming(v, pre)
            q.add_incoming(v, pre)
        mphi.add_incoming(outer, pre)
        for prm, ph in zip(cond.params, phis):
            self.vals[prm.id] = ph
        self.mask = mphi
        (c,) = self.lower_block(cond)
        active = b.and_(mphi, c)
        leaving = b.and_(mphi, b.not_(c))
        results = [b.select(leaving, ph, q) for ph, q in zip(phis, kept)]
        b.cbranch(self.any(active), body_bb, exit_bb)
        b.position_at_end(body_bb)
        for prm, ph in zip(body.params, phis):
            self.vals[prm.id] = ph
        self.mask = active
        new = self.lower_block(body)
        latch = b.block
        b.branch(header)
        for p, q, v, r in zip(phis, kept, new, results):
            p.add_incoming(v, latch)
            q.add_incoming(r, latch)
        mphi.add_incoming(active, latch)
        b.position_at_end(exit_bb)
        self.mask = outer
        for k, r in enumerate(results):
            self.vals[(n.id, k)] = r

    def _masked_region(self, region: Block, mask, tag: str) -> list:
        """Run ``region`` for the lanes in ``mask`` (skipped if none); the
        results are undefined (zero) in the other lanes."""
        b = self.b
        outer = self.mask
        entry = b.block
        run = self.fn.append_basic_block(f"{tag}.run")
        join = self.fn.append_basic_block(f"{tag}.join")
        b.cbranch(self.any(mask), run, join)
        b.position_at_end(run)
        self.mask = mask
        vals = self.lower_block(region)
        end = b.block
        b.branch(join)
        b.position_at_end(join)
        self.mask = outer
        out = []
        for r, v in zip(region.results, vals):
            ph = b.phi(self.T(r.type))
            ph.add_incoming(v, end)
            ph.add_incoming(ll.Constant(self.T(r.type), None), entry)
            out.append(ph)
        return out

    def lower_if(self, n: Node, a: list) -> None:
        b = self.b
        pred = a[0]
        then_r, else_r = n.regions
        tv = self._masked_region(then_r, b.and_(self.mask, pred), "if.then")
        ev = self._masked_region(else_r, b.and_(self.mask, b.not_(pred)), "if.else")
        for k, (x, y) in enumerate(zip(tv, ev)):
            self.vals[(n.id, k)] = b.select(pred, x, y)

    def lower_dispatch(self, n: Node, a: list) -> None:
        b = self.b
        (table,) = n.attrs
        last = self.ci32(len(table) - 1)
        idx = b.select(b.icmp_unsigned(">", a[0], last), last, a[0])  # clamp to the last instance
        result = None
        for r, region in enumerate(n.regions):
            sel = None
            for inst, target in enumerate(table):
                if target == r:
                    hit = b.icmp_unsigned("==", idx, self.ci32(inst))
                    sel = hit if sel is None else b.or_(sel, hit)
            vals = self._masked_region(region, b.and_(self.mask, sel), f"case{r}")
            result = vals if result is None else [b.select(sel, v, acc) for v, acc in zip(vals, result)]
        for k, v in enumerate(result):
            self.vals[(n.id, k)] = v
