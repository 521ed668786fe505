"""The GPU lowering produces PTX that NVIDIA's ptxas assembles, for every
megakernel (primal, forward-mode, the three adjoints) and the engine's test
kernels (ops, loops, dispatch, scatter, checks), for sm_80 and sm_90; the
PTX keeps IEEE single precision (no .ftz, no approximate instructions but
erf's ex2, every add/mul/fma/div/sqrt rounded to nearest: ptxas may not
fuse); the path kernel does not spill. No GPU needed: only libdevice (to
generate PTX) and ptxas (to assemble it), from the CUDA toolkit or the
nvidia-cuda-nvcc-cu12 wheel the test extra installs.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import re

import pytest

import llvmlite.binding as llvm

from jaxrender import ir
from jaxrender.kernels.context import Structure
from jaxrender.kernels.integrators import PathIntegrator, StokesIntegrator, boundary
from jaxrender.kernels.sensors import film
from jaxrender.kernels.spectrum import SPECTRAL, SPECTRAL_POLARIZED
from jaxrender.lowering import bvh_traversal, ptx, toolkit

import test_codegen_lanes
import test_control_flow
import test_ir_ops
import test_samplers
import test_scatter_dispatch

needs_libdevice = pytest.mark.skipif(
    toolkit.libdevice_path() is None,
    reason="libdevice.10.bc not found: install the CUDA toolkit (set $CUDA_HOME) or "
           "`pip install nvidia-cuda-nvcc-cu12` (the test extra does)")
needs_ptxas = pytest.mark.skipif(
    toolkit.ptxas_path() is None,
    reason="ptxas not found: install the CUDA toolkit (set $CUDA_HOME) or "
           "`pip install nvidia-cuda-nvcc-cu12` (the test extra does)")

SMS = (80, 90)
MEGAKERNEL_SMS = (90,)   # the NVIDIA machines this project is checked on (H100, H200); see assembled
DIFF = ("bsdf_data", "emitter_radiance")
PATH = PathIntegrator()
# Every built-in BSDF in the primal kernel; the RB
# adjoints differ from PRB only in how they re-estimate radiance (the same
# BSDF code), so a plastic-and-glass scene's kernel checks them at a
# fraction of the compile time.
RB_STRUCTURE = Structure(bsdfs=("diffuse", "roughplastic-ggx", "dielectric"))
# The derivative kernels' register budgets are checked on the BSDFs before
# principled: the principled models' many lobes alone carry more live state
# than 255 registers hold there (about 700 B of spills in the PRB adjoint
# on sm_80), a GPU speed question for hardware, not a regression of the
# shared code. The primal holds them all without spilling.
CLASSIC_STRUCTURE = Structure(bsdfs=tuple(n for n in Structure().bsdfs if not n.startswith("principled")))
MEGAKERNELS = {
    "path": lambda: PATH.primal_kernel(),
    "forward": lambda: PATH.forward_kernel(DIFF, CLASSIC_STRUCTURE),
    "adjoint_prb": lambda: PATH.adjoint_kernel(DIFF, "prb", CLASSIC_STRUCTURE),
    "adjoint_rb": lambda: PATH.adjoint_kernel(DIFF, "rb", RB_STRUCTURE),
    "adjoint_rb_biased": lambda: PATH.adjoint_kernel(DIFF, "rb_biased", RB_STRUCTURE),
    # the spectral variant: wavelength sampling, the film's conversion, upsampled,
    # tabulated and textured colours (254 registers, no spills on sm_80 / sm_90)
    "path_spectral": lambda: dataclasses.replace(PATH, spectrum=SPECTRAL).primal_kernel(
        Structure(bsdfs=("diffuse", "roughplastic-ggx", "conductor"), tex_slots=1, spectral_curves=True)),
}
# Polarized variants: a path's throughput is a Mueller matrix per wavelength
# (64 floats) and polarizing BSDFs rotate their matrices between Stokes
# bases, more live state than 255 registers hold: the stokes primal spills
# 560 B on sm_80, the rb adjoint about 2.6 kB (a GPU speed question for
# hardware; bounded below so that growth shows).
POLARIZED_STRUCTURE = Structure(bsdfs=("diffuse", "conductor", "dielectric", "polarizer", "retarder"))
POLARIZED = {
    "stokes_spectral_polarized": lambda: dataclasses.replace(StokesIntegrator(), spectrum=SPECTRAL_POLARIZED)
    .primal_kernel(POLARIZED_STRUCTURE),
    "adjoint_rb_spectral_polarized": lambda: dataclasses.replace(PATH, spectrum=SPECTRAL_POLARIZED)
    .adjoint_kernel(DIFF, "rb", POLARIZED_STRUCTURE)}
# Shared shapegroups: the ranged BVH query and the instance walk (with analytic shapes: the skip-link path too).
# The walk is the same code whatever the BSDFs (the megakernels above check those),
# so one plain BSDF keeps ptxas' time on what these kernels add.
INSTANCED_STRUCTURE = Structure(bsdfs=("diffuse",), instanced=True)
INSTANCED = {"path_instanced": lambda: PATH.primal_kernel(INSTANCED_STRUCTURE),
             "path_instanced_analytic": lambda: PATH.primal_kernel(
                 dataclasses.replace(INSTANCED_STRUCTURE, analytic=True)),
             "adjoint_prb_instanced": lambda: PATH.adjoint_kernel(DIFF, "prb", INSTANCED_STRUCTURE)}
# Camera derivatives: the forward and PRB kernels with the camera moving, and the boundary term's pair.
CAMERA_STRUCTURE = Structure(bsdfs=("diffuse", "roughplastic-ggx"), footprint=5)
ANALYTIC_STRUCTURE = dataclasses.replace(CAMERA_STRUCTURE, analytic=True)
CAMERA = {"forward_camera": lambda: PATH.forward_kernel(("camera",), CAMERA_STRUCTURE),
          "adjoint_prb_camera": lambda: PATH.adjoint_kernel(("camera",), "prb", CAMERA_STRUCTURE),
          "boundary_forward": lambda: boundary.forward_kernel(PATH, CAMERA_STRUCTURE),
          "boundary_adjoint": lambda: boundary.adjoint_kernel(PATH, CAMERA_STRUCTURE),
          # moving meshes (the direct integrator's geometry kernels)
          "adjoint_prb_tris": lambda: PATH.adjoint_kernel(("tris",), "prb", CAMERA_STRUCTURE),
          "boundary_adjoint_tris": lambda: boundary.adjoint_kernel(PATH, CAMERA_STRUCTURE, ("tris",)),
          # moving analytic shapes (the film's curves following them; their PRB adjoint,
          # 255 registers and 704 / 752 B of stack on sm_80 / sm_90, costs 29 s to check here)
          "boundary_adjoint_shapes": lambda: boundary.adjoint_kernel(PATH, ANALYTIC_STRUCTURE, ("shape_data",))}
ENGINE_KERNELS = {
    "float_ops": test_ir_ops.float_kernel, "int_ops": test_ir_ops.int_kernel,
    "uint_ops": test_ir_ops.uint_kernel, "bool_ops": test_ir_ops.bool_kernel,
    "mixed_ops": test_ir_ops.mixed_kernel, "transcendental_ops": test_ir_ops.trans_kernel,
    "collatz_loop": test_control_flow.collatz_kernel, "nested_loops": test_control_flow.nested_kernel,
    "loop_with_cond_and_checks": test_control_flow.loop_with_cond_kernel,
    "cond_effects": test_control_flow.cond_effect_kernel,
    "scatter": test_scatter_dispatch.scatter_kernel, "vector_accum": test_scatter_dispatch.vector_accum_kernel,
    "dispatch_in_loop": test_scatter_dispatch.bounce_kernel, "kitchen_sink": test_codegen_lanes.kitchen_sink,
    "samplers": test_samplers.all_samplers_kernel,
    "film_overlap_add": lambda: film.overlap_add_kernel(5, 3), "film_block_gather": lambda: film.block_gather_kernel(5, 3),
}


@functools.cache
def kernel(name: str):
    return {**MEGAKERNELS, **ENGINE_KERNELS, **INSTANCED, **CAMERA, **POLARIZED}[name]()


@functools.cache
def gpu_ptx(name: str, sm: int, nb: int = 0) -> str:
    return ptx.compile_ptx(kernel(name), nb, sm)


def _retargeted(text: str, sm: int) -> str:
    """``text`` (PTX for sm_80) with the header LLVM writes for ``sm``."""
    header = {80: (".version 7.0", ".target sm_80"), 90: (".version 7.8", ".target sm_90")}
    for old, new in zip(header[80], header[sm]):
        assert text.count(old + "\n") == 1, old
        text = text.replace(old + "\n", new + "\n")
    return text


@functools.cache
def assembled(name: str, nb: int = 0, sms: tuple = SMS) -> dict:
    """ptxas reports for ``sms`` (the runs side by side). LLVM generates
    the same instructions for sm_80 and sm_90 (only the header differs,
    ``test_sm90_ptx_is_sm80_ptx_retargeted``), so the megakernels' PTX, the
    slow part, is generated once. The megakernels assemble for sm_90 only
    (``MEGAKERNEL_SMS``): ptxas -O3 takes about a minute per architecture
    on the PRB adjoint (53 s for sm_80, 68 s for sm_90, 2 cores), and on
    the same instructions the two reports agreed (PRB adjoint: 255
    registers and 92 B of spill stores on both; path primal: 232 and 248
    registers, no spills); the engine's kernels assemble for both."""
    texts = {sm: _retargeted(gpu_ptx(name, 80, nb), sm) for sm in sms}
    with concurrent.futures.ThreadPoolExecutor(len(sms)) as pool:
        futs = {sm: pool.submit(toolkit.assemble, texts[sm], f"sm_{sm}") for sm in sms}
        return {sm: f.result()[1] for sm, f in futs.items()}


def test_llvmlite_has_the_nvptx_target_for_every_known_sm():
    for sm in ptx.KNOWN_SMS:
        m = llvm.parse_assembly(f'target triple = "{ptx.TRIPLE}"\n'
                                'define ptx_kernel void @k() {\n  ret void\n}\n')
        text = ptx.target_machine(sm).emit_assembly(m)
        assert f".target sm_{sm}" in text, text[:300]


def test_pick_sm():
    assert ptx.pick_sm(8, 0) == 80 and ptx.pick_sm(9, 0) == 90 and ptx.pick_sm(8, 6) == 86
    assert ptx.pick_sm(8, 9) == 89 and ptx.pick_sm(10, 0) == 100 and ptx.pick_sm(12, 0) == 120
    assert ptx.pick_sm(9, 5) == 90     # an unknown later device runs the last known target's PTX
    assert ptx.pick_sm(13, 0) == 120
    with pytest.raises(ValueError, match="8.0 or newer"):
        ptx.pick_sm(7, 5)


def test_kernel_entry_point_and_parameters():
    """One .entry with the CPU ABI's buffers as pointer parameters: launch
    info, inputs, item outputs, accumulators, error word."""
    k = test_codegen_lanes.kitchen_sink()
    text = ptx.compile_ptx(k, 0, 80) if toolkit.libdevice_path() else None
    ir_text = ptx.generate_llvm_ir(k, 0)
    assert f'define ptx_kernel void @"{ptx.KERNEL_SYMBOL}"' in ir_text
    n = ptx.kernel_param_count(k)
    assert n == 1 + len(k.inputs) + len(k.item_outputs) + len(k.accumulators) + 1
    if text is not None:
        assert len(re.findall(rf"\.visible \.entry {ptx.KERNEL_SYMBOL}\(", text)) == 1
        assert len(re.findall(rf"\.param \.u64 \.ptr[^\n]*{ptx.KERNEL_SYMBOL}_param_\d+", text)) == n
        for sreg in ("%tid.x", "%ctaid.x", "%ntid.x", "%nctaid.x"):
            assert sreg in text


_INEXACT = [
    (r"^(?:@!?%\w+\s+)?(?:add|sub|mul|fma|div|sqrt|rcp)\.(?:ftz\.)?(?:sat\.)?f(?:32|64)\b",
     "float op without rounding mode (ptxas may fuse it)"),
    (r"\.ftz\b", ".ftz (flushes denormals)"),
    (r"\.approx\b", "approximate instruction"),
    (r"\bdiv\.full\b", "div.full (approximate division)"),
]


def ieee_violations(text: str, allowed=()) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith("//") and not any(a in ln for a in allowed)]
    bad = []
    for rx, why in _INEXACT:
        hits = [ln for ln in lines if re.search(rx, ln)]
        if hits:
            bad.append(f"{why}: {len(hits)} lines, e.g. {hits[0]!r}")
    return bad


# Approximate instructions libdevice's functions use: erff the hardware
# exp2 (NVIDIA documents erff at 2 ulp); the double functions behind tan,
# atan, pow, asin and acos an approximate reciprocal / reciprocal square
# root as the seed of Newton steps in double, far below float resolution.
APPROX = {
    "erf": {"ex2.approx.ftz.f32"},
    "tan": {"rcp.approx.ftz.f64"}, "atan": {"rcp.approx.ftz.f64"}, "pow": {"rcp.approx.ftz.f64"},
    "asin": {"rsqrt.approx.ftz.f64"}, "acos": {"rsqrt.approx.ftz.f64"},
}
ALL_APPROX = tuple(sorted(set().union(*APPROX.values())))


def approx_instructions(text: str) -> set[str]:
    return set(re.findall(r"\b[a-z0-9]+\.approx(?:\.[a-z0-9]+)*", text))


@needs_libdevice
@pytest.mark.parametrize("name", sorted(ENGINE_KERNELS))
def test_engine_kernel_ptx_is_ieee(name):
    """Every op lowers to correctly rounded IEEE instructions with denormals
    kept (so it gives the CPU's bits), but the transcendental functions'
    documented approximate seeds."""
    allowed = ALL_APPROX if name == "transcendental_ops" else ()
    assert ieee_violations(gpu_ptx(name, 80), allowed) == []


@needs_libdevice
@pytest.mark.parametrize("name", ["scatter", "vector_accum", "adjoint_prb"])
def test_float_scatters_sum_the_warp_then_add_in_float64(name):
    """A float scatter-add groups the warp's lanes by address, sums each
    group with shuffles and adds the sum with one float64 atomic: no float32
    atomic is left (one per sample rounded a long sum's small terms away).
    Integer accumulators keep their integer atomics."""
    text = gpu_ptx(name, 80)
    assert "atom.global.add.f32" not in text
    assert text.count("atom.global.add.f64") >= 1
    assert text.count("match.any.sync.b64") == text.count("atom.global.add.f64")
    assert "shfl.sync.idx.b32" in text and "vote.sync.any.pred" in text


@needs_libdevice
@pytest.mark.parametrize("name", sorted(MEGAKERNELS))
def test_megakernel_ptx_is_ieee(name):
    text = gpu_ptx(name, 80)
    # Megakernels call erf (Beckmann sampling), acos (spot falloff) and more:
    # only the documented seeds of the libdevice functions are allowed.
    assert ieee_violations(text, ALL_APPROX) == []
    # libdevice calls and the BVH traversal are inlined: ptxas compiles a call
    # from divergent code into kernels whose warps split for good (on an H100
    # the 256x256 Cornell box's sample loop then never ended; see
    # lowering.bvh_traversal.routine). Only libdevice's own out-of-line
    # helpers stay functions (tan's reduction of huge arguments, reached by
    # microfacet sampling without visible normals; the double pow behind
    # principled's GTR1 sampling).
    allowed = {"__internal_trig_reduction_slowpathd", "__internal_accurate_pow"}
    functions = set(re.findall(r"\.func\s+(?:\([^)]*\)\s*)?(\w+)", text))
    called = set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(\w+)", text))
    assert not (functions | called) & set(bvh_traversal.NAMES.values())
    assert functions <= allowed and called <= allowed
    assert "__nvvm_reflect" not in text


@needs_libdevice
@pytest.mark.parametrize("op", sorted(ptx.ULP_BOUND_GPU))
def test_approximate_instructions_per_function(op):
    f = getattr(ir, op)
    if op in ("pow", "atan2"):
        body = lambda x, f=f: f(x[ir.item_index()], x[ir.item_index() + 1])  # noqa: E731
    else:
        body = lambda x, f=f: f(x[ir.item_index()])  # noqa: E731
    k = ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name=f"probe_{op}")
    text = ptx.compile_ptx(k, 0, 80)
    assert approx_instructions(text) == APPROX.get(op, set())
    assert ieee_violations(text, ALL_APPROX) == []


@needs_libdevice
@pytest.mark.parametrize("name", ["kitchen_sink", "adjoint_rb"])
def test_sm90_ptx_is_sm80_ptx_retargeted(name):
    """What lets ``assembled`` generate PTX once for both architectures:
    the NVPTX backend selects the same instructions for sm_80 and sm_90,
    an engine kernel's and a megakernel's."""
    assert gpu_ptx(name, 90) == _retargeted(gpu_ptx(name, 80), 90)


@needs_libdevice
@needs_ptxas
@pytest.mark.parametrize("name", sorted(ENGINE_KERNELS))
def test_engine_kernels_assemble(name):
    for sm, rep in assembled(name).items():
        assert rep.registers > 0, rep.log


@needs_libdevice
@needs_ptxas
def test_batched_kernel_assembles():
    for sm, rep in assembled("kitchen_sink", nb=2).items():
        assert rep.registers > 0, rep.log


@needs_libdevice
@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("name", list(MEGAKERNELS))
def test_megakernels_assemble_for_sm90(name, capsys):
    reports = assembled(name, sms=MEGAKERNEL_SMS)
    with capsys.disabled():
        for sm, r in reports.items():
            print(f"\n  ptxas {name:18s} sm_{sm}: {r.registers} registers, {r.stack_frame} B stack, "
                  f"{r.spill_stores} B spill stores, {r.spill_loads} B spill loads", end="")
    for sm, r in reports.items():
        assert 0 < r.registers <= 255
        # Stack: the BVH traversal's stack of (node, distance) entries
        # (ir.bvh_query.STACK_SIZE of them, 8 bytes each; the inlined
        # queries share one), plus up to 640 bytes of other local data:
        # libdevice's sinf/cosf keep a 28-byte Payne-Hanek table there, and
        # spills go there. Spills: none in the primal; in the adjoints, which
        # carry the most live state at the 255-register limit, up to 64
        # words (PRB: 192 / 224 B, 92 / 88 B without the first pass's log
        # of its queries, 8 steps x 6 words, in the loop state); a growth
        # past these bounds is a regression to look at.
        assert r.stack_frame <= 8 * ir.bvh_query.STACK_SIZE + 640, r.log
        assert r.spill_stores <= 256 and r.spill_loads <= 256, r.log
        if name == "path":
            assert r.spill_stores == 0 and r.spill_loads == 0, r.log


@needs_libdevice
@needs_ptxas
@pytest.mark.parametrize("name", sorted(CAMERA))
def test_camera_kernels_assemble(name):
    """The camera's derivative kernels (material-form interior, boundary
    term) and those of moving meshes assemble for sm_90 (see assembled). The PRB
    adjoint with the camera moving also pulls the 25 splat weights of a
    sample back through the camera row, and the moving meshes' kernels
    carry an edge sample, a path traced behind it and the previous hits:
    at the 255-register limit they spill (1.8 - 2.8 kB of stack with the
    traversal inlined), a GPU speed question for hardware; the bound here
    catches growth."""
    for sm, r in assembled(name, sms=MEGAKERNEL_SMS).items():
        assert 0 < r.registers <= 255, r.log
        spills = name.startswith("adjoint_prb_")
        bound = 3072 if spills else 8 * ir.bvh_query.STACK_SIZE + 640
        assert r.stack_frame <= bound, r.log


@needs_libdevice
@needs_ptxas
@pytest.mark.parametrize("name", sorted(INSTANCED))
def test_instanced_kernels_assemble(name):
    """The kernels of scenes that share shapegroups (ranged BVH queries
    through the one-lane routine) assemble for sm_90 (see assembled), within the
    megakernels' stack bound; the PRB adjoint spills (60 B, 1.6 kB of stack
    with one BSDF type), within the camera adjoints' bound."""
    assert "jaxrender_bvh_closest" in ptx.generate_llvm_ir(kernel(name), 0)
    for sm, r in assembled(name, sms=MEGAKERNEL_SMS).items():
        assert 0 < r.registers <= 255, r.log
        bound = 3072 if name.startswith("adjoint_prb") else 8 * ir.bvh_query.STACK_SIZE + 640
        assert r.stack_frame <= bound, r.log


@needs_libdevice
@needs_ptxas
@pytest.mark.parametrize("name", sorted(POLARIZED))
def test_polarized_kernels_assemble(name):
    """The polarized variant's stokes primal and rb adjoint keep IEEE
    arithmetic and assemble for sm_90 (see assembled), within a stack bound that
    catches growth of their spills (see POLARIZED)."""
    assert ieee_violations(gpu_ptx(name, 80), ALL_APPROX) == []
    for sm, r in assembled(name, sms=MEGAKERNEL_SMS).items():
        assert 0 < r.registers <= 255, r.log
        assert r.stack_frame <= 3072, r.log


def test_emulator_knows_which_functions_it_approximates():
    from jaxrender.lowering import emulate
    c_name = {"erf": "erff", "tan": "tanf", "atan": "atanf", "pow": "powf", "asin": "asinf", "acos": "acosf"}
    want = {ptx.LIBDEVICE[c_name[op]][0]: ins for op, ins in APPROX.items()}
    assert {f: {i} for f, i in emulate.APPROXIMATE_FUNCTIONS.items()} == want
