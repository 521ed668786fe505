"""The XLA typed-FFI handler for CUDA, generated in LLVM IR for the host.

XLA (platform "CUDA") calls it on the host with device buffers. It answers
the metadata query, checks every buffer against the launch info, takes
XLA's stream (``XLA_FFI_Stream_Get``), zeroes the accumulators on that
stream (``cuMemsetD32Async``; float accumulators are float64 on the device,
two words an element) and launches ``jaxrender_kernel`` on it
(``cuLaunchKernel``). Kernels that contain ``check`` s get a one-word error
buffer: the handler zeroes it, copies it back after the launch and
synchronises the stream, so a failed check is an XLA error with the
kernel's message, as on the CPU. Kernels without checks (all the
megakernels) return as soon as the work is queued.

Buffers are those of the CPU ABI (:mod:`.abi`): argument 0 is the launch
info (on the device, for the kernel), then the inputs; results are the item
outputs, the accumulators, then the error word if there is one. The host
reads the launch info from the ``info`` attribute (an int64 array with the
same words), since it cannot read device memory without waiting.

Offsets (x86-64, ``xla/ffi/api/c_api.h``; tests/test_gpu_handler.py derives
them from the header): call frame api @16, ctx @24, stage @32, args @40,
rets @80, attrs @120 (size @+16, types @+24, names @+32, values @+40);
``XLA_FFI_Array``: dtype @0, size @8, data @16; ``XLA_FFI_Api``:
``Error_Create`` @48, ``Stream_Get`` @80; ``XLA_FFI_Stream_Get_Args``:
ctx @16, stream @24 (struct size 32).

The driver's entry points and the loaded kernels are not compiled in (so
the object code can be cached on disk): the handler reads them from two
global tables that :mod:`.cuda` fills after loading the code:
``jaxrender_cuda_driver`` (function pointers, order :data:`DRIVER_FUNCTIONS`)
and ``jaxrender_cuda_functions`` (``MAX_CONTEXTS`` pairs (CUcontext,
CUfunction); ``jaxrender_cuda_nfunctions`` of them are valid). The kernel
for the stream's context (``cuStreamGetCtx``) is launched.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..ir.kernel import Kernel
from .abi import InfoLayout
from .codegen import i8, i32, i64, ptr
from .ffi import API_ERROR_CREATE, STAGE_EXECUTE  # noqa: F401 - XLA ABI constants, checked by the tests here
from .ffi import ERRC_INTERNAL, ERRC_INVALID_ARGUMENT, _Emitter, _IndirectCallee, _opaque
from .ptx import BLOCK_SIZE, wide_accumulators

HANDLER_SYMBOL = "jaxrender_cuda_handler"
DRIVER_TABLE = "jaxrender_cuda_driver"
FUNCTION_TABLE = "jaxrender_cuda_functions"
FUNCTION_COUNT = "jaxrender_cuda_nfunctions"
MAX_CONTEXTS = 64
MAX_BLOCKS = 2 ** 31 - 1

# (exported libcuda symbol, LLVM signature). All return CUresult (int).
DRIVER_FUNCTIONS = (
    ("cuStreamGetCtx", [ptr, ptr]),                                  # (CUstream, CUcontext*)
    ("cuMemsetD32Async", [i64, i32, i64, ptr]),                      # (CUdeviceptr, uint, size_t, CUstream)
    ("cuLaunchKernel", [ptr] + [i32] * 7 + [ptr, ptr, ptr]),         # (f, grid xyz, block xyz, smem, stream, params, extra)
    ("cuMemcpyDtoHAsync_v2", [ptr, i64, i64, ptr]),                  # (void*, CUdeviceptr, size_t, CUstream)
    ("cuStreamSynchronize", [ptr]),                                  # (CUstream)
)
DRIVER_INDEX = {name: k for k, (name, _) in enumerate(DRIVER_FUNCTIONS)}

# XLA FFI constants (c_api.h).
ATTR_ARRAY = 1
DTYPE_S64 = 5
API_STREAM_GET = 80
STREAM_GET_ARGS = ll.LiteralStructType([i64, ptr, ptr, ptr])
STREAM_GET_ARGS_SIZE = 32


def has_error_buffer(kernel: Kernel) -> bool:
    return bool(kernel.messages)


def build_cuda_handler(module: ll.Module, kernel: Kernel, layout: InfoLayout,
                       symbol: str = HANDLER_SYMBOL, xla_stream: bool = True) -> ll.Function:
    """Emit the handler. ``xla_stream=False`` launches on the null stream
    without asking XLA (only for running the handler under XLA:CPU in the
    tests, where no stream exists)."""
    fn = ll.Function(module, ll.FunctionType(ptr, [ptr]), symbol)
    (frame,) = fn.args
    e = _Emitter(module, fn)
    b = e.b
    null = ll.Constant(ptr, None)

    driver_t = ll.ArrayType(ptr, len(DRIVER_FUNCTIONS))
    table_t = ll.ArrayType(ll.ArrayType(ptr, 2), MAX_CONTEXTS)
    driver = ll.GlobalVariable(module, driver_t, DRIVER_TABLE)
    driver.initializer = ll.Constant(driver_t, None)
    table = ll.GlobalVariable(module, table_t, FUNCTION_TABLE)
    table.initializer = ll.Constant(table_t, None)
    count = ll.GlobalVariable(module, i64, FUNCTION_COUNT)
    count.initializer = i64(0)
    driver, table, count = _opaque(driver), _opaque(table), _opaque(count)

    # Metadata query (API version 0.1, no traits: not command-buffer safe,
    # since a kernel with checks synchronises its stream).
    e.answer_metadata_or_skip(frame)
    make_error = e.error_maker(frame)
    api = e.load_at(frame, 16, ptr)
    name = kernel.name

    def fail(text: str, errc: int = ERRC_INVALID_ARGUMENT):
        b.ret(make_error(e.cstring(text), errc))

    snprintf = module.globals.get("snprintf") or ll.Function(
        module, ll.FunctionType(i32, [ptr, i64, ptr], var_arg=True), "snprintf")
    msgbuf_t = ll.ArrayType(i8, 256)
    msgbuf = e.alloca(msgbuf_t)

    def check_cu(rc, what: str):
        """Return an XLA error naming the driver call if ``rc`` != CUDA_SUCCESS."""
        with b.if_then(b.icmp_signed("!=", rc, i32(0)), likely=False):
            fmt = e.cstring(f"jaxrender kernel '{name}': {what} failed with CUDA error %d")
            b.call(snprintf, [msgbuf, i64(256), fmt, rc])
            b.ret(make_error(msgbuf, ERRC_INTERNAL))

    ni, no, na = layout.ni, layout.no, layout.na
    err_buf = has_error_buffer(kernel)
    nret = no + na + (1 if err_buf else 0)
    nargs = e.load_at(frame, 40 + 16, i64)
    nrets = e.load_at(frame, 80 + 16, i64)
    bad_count = b.or_(b.icmp_signed("!=", nargs, i64(1 + ni)), b.icmp_signed("!=", nrets, i64(nret)))
    with b.if_then(bad_count, likely=False):
        fail(f"jaxrender kernel '{name}': XLA passed the wrong number of buffers "
             f"(expected {1 + ni} arguments and {nret} results)")

    # The launch info, host copy: the only attribute, an int64 array.
    nattrs = e.load_at(frame, 120 + 16, i64)
    with b.if_then(b.icmp_signed("!=", nattrs, i64(1)), likely=False):
        fail(f"jaxrender kernel '{name}': expected exactly one attribute (the launch info)")
    attr_type = b.load(e.load_at(frame, 120 + 24, ptr), typ=i32)
    attr = b.load(e.load_at(frame, 120 + 40, ptr), typ=ptr)
    attr_dtype = e.load_at(attr, 0, i32)
    attr_size = e.load_at(attr, 8, i64)
    bad_attr = b.or_(b.icmp_signed("!=", attr_type, i32(ATTR_ARRAY)),
                     b.or_(b.icmp_signed("!=", attr_dtype, i32(DTYPE_S64)),
                           b.icmp_signed("!=", attr_size, i64(layout.size))))
    with b.if_then(bad_attr, likely=False):
        fail(f"jaxrender kernel '{name}': the launch info attribute must be an int64 array "
             f"of {layout.size} words")
    info = e.load_at(attr, 16, ptr)

    def info_at(k):
        return b.load(b.gep(info, [i64(k)], inbounds=True, source_etype=i64), typ=i64)

    args = e.load_at(frame, 40 + 32, ptr)
    rets = e.load_at(frame, 80 + 32, ptr)

    buffer, elements = e.buffer, e.elements

    nparams = 2 + ni + no + na
    slots_t = ll.ArrayType(ptr, nparams)
    slots, params = e.alloca(slots_t), e.alloca(slots_t)

    def set_param(k, value):
        slot = b.gep(slots, [i64(0), i64(k)], inbounds=True, source_etype=slots_t)
        b.store(value, slot)
        b.store(slot, b.gep(params, [i64(0), i64(k)], inbounds=True, source_etype=slots_t))

    info_buf = buffer(args, 0)
    with b.if_then(b.icmp_signed("!=", elements(info_buf), i64(2 * layout.size)), likely=False):
        fail(f"jaxrender kernel '{name}': launch info has the wrong size")
    set_param(0, e.load_at(info_buf, 24, ptr))
    in_names = list(kernel.inputs)
    for i in range(ni):
        data, _ = e.sized_buffer(args, 1 + i, info_at(layout.in_elems(i)), fail,
                                 f"jaxrender kernel '{name}': input '{in_names[i]}'")
        set_param(1 + i, data)
    out_names = list(kernel.item_outputs) + list(kernel.accumulators)
    acc_bufs = []
    wide = wide_accumulators(kernel)
    for j in range(no + na):
        data, n = e.sized_buffer(rets, j, info_at(layout.out_elems(j)), fail,
                                 f"jaxrender kernel '{name}': result '{out_names[j]}'")
        set_param(1 + ni + j, data)
        if j >= no:
            acc_bufs.append((data, b.mul(n, i64(2)) if wide[j - no] else n))
    err_data = null
    if err_buf:
        buf = buffer(rets, no + na)
        with b.if_then(b.icmp_signed("!=", elements(buf), i64(1)), likely=False):
            fail(f"jaxrender kernel '{name}': the error buffer must have one element")
        err_data = e.load_at(buf, 24, ptr)
    set_param(nparams - 1, err_data)

    # XLA's stream.
    if xla_stream:
        sargs = e.alloca(STREAM_GET_ARGS)
        b.store(ll.Constant(STREAM_GET_ARGS, [i64(STREAM_GET_ARGS_SIZE), null, null, null]), sargs)
        b.store(e.load_at(frame, 24, ptr), b.gep(sargs, [i32(0), i32(2)], inbounds=True,
                                                 source_etype=STREAM_GET_ARGS))
        stream_get = _IndirectCallee(e.load_at(api, API_STREAM_GET, ptr), ll.FunctionType(ptr, [ptr]))
        serr = b.call(stream_get, [sargs])
        with b.if_then(b.icmp_unsigned("!=", serr, null), likely=False):
            b.ret(serr)
        stream = b.load(b.gep(sargs, [i32(0), i32(3)], inbounds=True, source_etype=STREAM_GET_ARGS), typ=ptr)
    else:
        stream = null

    def driver_fn(fname):
        k = DRIVER_INDEX[fname]
        p = b.load(b.gep(driver, [i64(0), i64(k)], inbounds=True, source_etype=driver_t), typ=ptr)
        return _IndirectCallee(p, ll.FunctionType(i32, DRIVER_FUNCTIONS[k][1]))

    with b.if_then(b.icmp_unsigned("==", b.load(driver, typ=ptr), null), likely=False):
        fail(f"jaxrender kernel '{name}': the CUDA driver entry points were not set", ERRC_INTERNAL)

    # The kernel loaded in the stream's context.
    cuctx = e.alloca(ptr)
    b.store(null, cuctx)
    check_cu(b.call(driver_fn("cuStreamGetCtx"), [stream, cuctx]), "cuStreamGetCtx")
    want = b.load(cuctx, typ=ptr)
    func = e.alloca(ptr)
    b.store(null, func)
    ncount = b.load(count, typ=i64)
    ncount = b.select(b.icmp_unsigned(">", ncount, i64(MAX_CONTEXTS)), i64(MAX_CONTEXTS), ncount)

    def probe(k):
        entry = b.gep(table, [i64(0), k], inbounds=True, source_etype=table_t)
        ctx_k = b.load(entry, typ=ptr)
        with b.if_then(b.icmp_unsigned("==", ctx_k, want)):
            fn_k = b.load(b.gep(entry, [i64(0), i64(1)], inbounds=True, source_etype=ll.ArrayType(ptr, 2)),
                          typ=ptr)
            b.store(fn_k, func)
    e.for_range(ncount, probe)
    func = b.load(func, typ=ptr)
    with b.if_then(b.icmp_unsigned("==", func, null), likely=False):
        fail(f"jaxrender kernel '{name}': the kernel is not loaded in the CUDA context of XLA's stream "
             "(a device that was not visible when it was compiled?)", ERRC_INTERNAL)

    # Zero the accumulators and the error word on the stream.
    memset = driver_fn("cuMemsetD32Async")
    zero_list = list(acc_bufs) + ([(err_data, i64(1))] if err_buf else [])
    for data, n in zero_list:
        with b.if_then(b.icmp_signed(">", n, i64(0))):
            check_cu(b.call(memset, [b.ptrtoint(data, i64), i32(0), n, stream]), "cuMemsetD32Async")

    total = info_at(1)
    with b.if_then(b.icmp_signed(">", total, i64(0))):
        blocks = b.udiv(b.add(total, i64(BLOCK_SIZE - 1)), i64(BLOCK_SIZE))
        blocks = b.select(b.icmp_unsigned(">", blocks, i64(MAX_BLOCKS)), i64(MAX_BLOCKS), blocks)
        rc = b.call(driver_fn("cuLaunchKernel"),
                    [func, b.trunc(blocks, i32), i32(1), i32(1), i32(BLOCK_SIZE), i32(1), i32(1), i32(0),
                     stream, params, null])
        check_cu(rc, "cuLaunchKernel")

    if err_buf:
        code = e.alloca(i32)
        b.store(i32(0), code)
        check_cu(b.call(driver_fn("cuMemcpyDtoHAsync_v2"), [code, b.ptrtoint(err_data, i64), i64(4), stream]),
                 "cuMemcpyDtoHAsync")
        check_cu(b.call(driver_fn("cuStreamSynchronize"), [stream]), "cuStreamSynchronize")
        c = b.load(code, typ=i32)
        for k, msg in enumerate(kernel.messages, start=1):
            with b.if_then(b.icmp_signed("==", c, i32(k)), likely=False):
                fail(f"jaxrender kernel '{name}': check failed: {msg}", ERRC_INVALID_ARGUMENT)
    b.ret(null)
    return fn


def generate_handler_ir(kernel: Kernel, nb: int, triple: str, xla_stream: bool = True) -> str:
    """The host module holding the CUDA handler for ``kernel`` (text)."""
    m = ll.Module(name=f"jaxrender.cuda_handler.{kernel.name}")
    m.triple = triple
    layout = InfoLayout(nb, len(kernel.inputs), len(kernel.item_outputs), len(kernel.accumulators))
    build_cuda_handler(m, kernel, layout, xla_stream=xla_stream)
    return str(m)
