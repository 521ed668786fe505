"""Counter-based random numbers: Philox4x32-10 known answers (Random123) and
an independent numpy implementation; reproducibility of (seed, item, dim)
samples; statistical uniformity; the PCG hash."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.primitives import launch

MASK = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments


from lanes import LANES, run  # noqa: E402

# Random123 kat_vectors, philox4x32 with 10 rounds: (counter, key) -> output.
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------

def philox_py(counter, key, rounds=10):
    """Philox4x32 in plain Python integers, straight from Salmon et al."""
    c = list(counter)
    k = list(key)
    for r in range(rounds):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
    return tuple(c)


def philox_np(counter: np.ndarray, key: np.ndarray, rounds=10) -> np.ndarray:
    """Vectorised Philox4x32: counter (n, 4) u32, key (n, 2) u32 -> (n, 4) u32.
    Products of two u32 fit in u64 exactly."""
    m = np.uint64(MASK)
    c = [counter[:, j].astype(np.uint64) for j in range(4)]
    k0, k1 = key[:, 0].astype(np.uint64), key[:, 1].astype(np.uint64)
    for r in range(rounds):
        if r:
            k0 = (k0 + np.uint64(W0)) & m
            k1 = (k1 + np.uint64(W1)) & m
        p0 = c[0] * np.uint64(M0)
        p1 = c[2] * np.uint64(M1)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m]
    return np.stack(c, axis=1).astype(np.uint32)


def pcg_hash_np(x: np.ndarray) -> np.ndarray:
    """PCG hash (Jarzynski & Olano 2020) in u64 arithmetic masked to 32 bits."""
    m = np.uint64(MASK)
    s = (x.astype(np.uint64) * np.uint64(747796405) + np.uint64(2891336453)) & m
    w = (((s >> ((s >> np.uint64(28)) + np.uint64(4))) ^ s) * np.uint64(277803737)) & m
    return ((w >> np.uint64(22)) ^ w).astype(np.uint32)


def uniform_np(seed, item, dim, stream=0) -> np.ndarray:
    """The documented construction of ir.rng.uniform4: Philox of the counter
    (item, dim, stream, 0) under the key (seed, 0x5EED5EED), each lane's top
    24 bits scaled by 2**-24."""
    item = np.asarray(item, np.uint32)
    n = item.shape[0]
    ctr = np.stack([item, np.broadcast_to(np.asarray(dim, np.uint32), (n,)),
                    np.broadcast_to(np.asarray(stream, np.uint32), (n,)), np.zeros(n, np.uint32)], axis=1)
    key = np.stack([np.broadcast_to(np.asarray(seed, np.uint32), (n,)), np.full(n, 0x5EED5EED, np.uint32)], axis=1)
    r = philox_np(ctr, key)
    return ((r >> np.uint32(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def test_references_agree_with_random123():
    for ctr, key, want in KAT:
        assert philox_py(ctr, key) == want
        np.testing.assert_array_equal(philox_np(np.array([ctr], np.uint32), np.array([key], np.uint32))[0], want)
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2 ** 32, (50, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2 ** 32, (50, 2), dtype=np.uint64).astype(np.uint32)
    for rounds in (1, 7, 10):
        got = philox_np(ctr, key, rounds)
        for j in range(50):
            assert tuple(int(v) for v in got[j]) == philox_py(tuple(map(int, ctr[j])), tuple(map(int, key[j])), rounds)


# ---------------------------------------------------------------------------
# Philox in a kernel
# ---------------------------------------------------------------------------

@functools.cache
def philox_kernel(rounds: int = 10) -> ir.Kernel:
    def body(ctr, key):
        i = ir.item_index()
        return ir.rng.philox4x32(ctr[i], key[i], rounds=rounds)
    return ir.trace(body, {"ctr": ir.In("u32", (4,)), "key": ir.In("u32", (2,))},
                    {"out": ir.Out("u32", (4,))}, name=f"philox{rounds}")


def test_philox_known_answers_from_buffers():
    ctr = np.array([c for c, _, _ in KAT], np.uint32)
    key = np.array([k for _, k, _ in KAT], np.uint32)
    out = np.asarray(launch(philox_kernel(), (len(KAT),), ctr=ctr, key=key)["out"])
    np.testing.assert_array_equal(out, np.array([w for _, _, w in KAT], np.uint32))


def test_philox_known_answers_folded_at_trace_time():
    # All-constant inputs: the whole generator folds while tracing, and the
    # folded values must be the same bits as the compiled code.
    def body(x):
        return [v for _, (c, k, _) in enumerate(KAT) for v in ir.rng.philox4x32(c, k)]
    k = ir.trace(body, {"x": ir.In("u32")}, {"out": ir.Out("u32", (len(KAT), 4))})
    assert "mulhi" not in k.text
    out = np.asarray(launch(k, (2,), x=np.zeros(1, np.uint32))["out"])
    want = np.array([w for _, _, w in KAT], np.uint32)
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_array_equal(out[1], want)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("rounds", [10, 7])
def test_philox_matches_numpy_on_random_counters_and_keys(rounds, lanes):
    rng = np.random.default_rng(rounds)
    n = 100_000
    ctr = rng.integers(0, 2 ** 32, (n, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2 ** 32, (n, 2), dtype=np.uint64).astype(np.uint32)
    # Edge patterns: all zeros / all ones / single bits / small counters.
    ctr[:32] = (1 << np.arange(32, dtype=np.uint64))[:, None].astype(np.uint32)
    ctr[32:64] = np.arange(32, dtype=np.uint32)[:, None]
    key[:64:2] = 0
    key[1:64:2] = MASK
    out = np.asarray(run(philox_kernel(rounds), (n,), lanes, ctr=ctr, key=key)["out"])
    np.testing.assert_array_equal(out, philox_np(ctr, key, rounds))


# ---------------------------------------------------------------------------
# uniform / uniform4: reproducibility
# ---------------------------------------------------------------------------

@functools.cache
def uniform_buffer_kernel() -> ir.Kernel:
    """Sample keyed on explicit (seed, item, dim, stream) buffers."""
    def body(seed, item, dim, stream):
        i = ir.item_index()
        u = ir.rng.uniform(seed.value, item[i], dim[i], stream.value)
        u4 = ir.rng.uniform4(seed.value, item[i], dim[i], stream.value)
        return {"u": u, "u4": u4}
    return ir.trace(body, {"seed": ir.Scalar("u32"), "item": ir.In("u32"), "dim": ir.In("u32"),
                           "stream": ir.Scalar("u32")},
                    {"u": ir.Out("f32"), "u4": ir.Out("f32", (4,))}, name="uniform_buf")


@functools.cache
def uniform_item_kernel() -> ir.Kernel:
    """Sample keyed on the work item index; two dimensions per item."""
    def body(seed, dim):
        i = ir.item_index()
        return {"a": ir.rng.uniform(seed.value, i, dim.value),
                "b": ir.rng.uniform(seed.value, i, dim.value + 1)}
    return ir.trace(body, {"seed": ir.Scalar("u32"), "dim": ir.Scalar("u32")},
                    {"a": ir.Out("f32"), "b": ir.Out("f32")}, name="uniform_item")


def sample_items(n, seed, dim):
    out = launch(uniform_item_kernel(), (n,), seed=np.uint32(seed), dim=np.uint32(dim))
    return np.asarray(out["a"]), np.asarray(out["b"])


def sample_buffer(seed, item, dim, stream=0):
    item = np.asarray(item, np.uint32)
    dim = np.broadcast_to(np.asarray(dim, np.uint32), item.shape).copy()
    out = launch(uniform_buffer_kernel(), (len(item),), seed=np.uint32(seed), item=item, dim=dim,
                 stream=np.uint32(stream))
    return np.asarray(out["u"]), np.asarray(out["u4"])


def test_uniform_matches_documented_philox_construction():
    rng = np.random.default_rng(1)
    n = 20_000
    item = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    dim = rng.integers(0, 64, n).astype(np.uint32)
    for seed, stream in ((0, 0), (12345, 0), (MASK, 7)):
        u, u4 = sample_buffer(seed, item, dim, stream)
        ref = np.stack([uniform_np(seed, item[j:j + 1], dim[j], stream)[0] for j in range(50)])
        np.testing.assert_array_equal(u4[:50], ref)
        ctr = np.stack([item, dim, np.full(n, stream, np.uint32), np.zeros(n, np.uint32)], axis=1)
        key = np.stack([np.full(n, seed, np.uint32), np.full(n, 0x5EED5EED, np.uint32)], axis=1)
        r = philox_np(ctr, key)
        want = ((r >> np.uint32(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)
        np.testing.assert_array_equal(u4, want)
        np.testing.assert_array_equal(u, want[:, 0])  # uniform is lane 0 of uniform4


def test_uniform_reproducible_across_launches_sizes_and_orderings():
    seed, dim = 2024, 3
    a1, b1 = sample_items(10_000, seed, dim)
    a2, b2 = sample_items(10_000, seed, dim)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    # Launch size does not change any sample: a prefix of a larger launch.
    a3, b3 = sample_items(25_000, seed, dim)
    np.testing.assert_array_equal(a3[:10_000], a1)
    np.testing.assert_array_equal(b3[:10_000], b1)
    a4, _ = sample_items(17, seed, dim)
    np.testing.assert_array_equal(a4, a1[:17])
    # Work-item ordering: item i computes the sample of perm[i].
    perm = np.random.default_rng(5).permutation(25_000).astype(np.uint32)
    u, _ = sample_buffer(seed, perm, dim)
    np.testing.assert_array_equal(u, a3[perm])
    u, _ = sample_buffer(seed, perm, dim + 1)
    np.testing.assert_array_equal(u, b3[perm])
    # Repeated keys give repeated values; reversed order gives reversed values.
    u, _ = sample_buffer(seed, np.array([7, 7, 3, 7, 3], np.uint32), dim)
    assert u[0] == u[1] == u[3] == a1[7] and u[2] == u[4] == a1[3]
    u, _ = sample_buffer(seed, np.arange(999, -1, -1, dtype=np.uint32), dim)
    np.testing.assert_array_equal(u, a1[:1000][::-1])


@functools.cache
def uniform_loop_kernel() -> ir.Kernel:
    """Draw dims 0..n[i]-1 in a loop (a path tracer's bounces), keeping the
    last sample and the sum; the loop draws dim k on iteration k."""
    def body(seed, n):
        i = ir.item_index()

        def step(k, s):
            u = ir.rng.uniform(seed.value, i, k)
            return u, s[1] + u
        return ir.fori_loop(ir.UInt(0), n[i], step, (ir.Float(-1.0), ir.Float(0.0)))
    return ir.trace(body, {"seed": ir.Scalar("u32"), "n": ir.In("u32")}, {"out": ir.Out("f32", (2,))},
                    name="uniform_loop")


@pytest.mark.parametrize("lanes", LANES)
def test_uniform_inside_loop_matches_direct_samples(lanes):
    n_items, max_dims, seed = 1001, 12, 77
    n = np.random.default_rng(8).integers(0, max_dims + 1, n_items).astype(np.uint32)
    out = np.asarray(run(uniform_loop_kernel(), (n_items,), lanes, seed=np.uint32(seed), n=n)["out"])
    item = np.arange(n_items, dtype=np.uint32)
    direct = np.stack([sample_buffer(seed, item, d)[0] for d in range(max_dims)], axis=1)
    for i in range(n_items):
        k = int(n[i])
        assert out[i, 0] == (direct[i, k - 1] if k else np.float32(-1.0))
        acc = np.float32(0.0)
        for d in range(k):
            acc = np.float32(acc + direct[i, d])
        assert out[i, 1] == acc


def test_uniform_different_seeds_dims_streams_give_different_numbers():
    n = 10_000
    item = np.arange(n, dtype=np.uint32)
    base, _ = sample_buffer(1, item, 0, 0)
    for seed, dim, stream in ((2, 0, 0), (1, 1, 0), (1, 0, 1), (1 << 31, 0, 0), (1, 1 << 20, 0)):
        u, _ = sample_buffer(seed, item, dim, stream)
        assert (u == base).mean() < 1e-3, (seed, dim, stream)


def _corr(a, b):
    return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


def test_uniform_decorrelated_across_dims_seeds_items_and_lanes():
    n = 1_000_000
    tol = 5.0 / math.sqrt(n)  # 5 standard errors of a correlation estimate
    a, b = sample_items(n, 7, 0)           # dims 0 and 1
    c, _ = sample_items(n, 8, 0)           # another seed, dim 0
    d, _ = sample_items(n, 7, 1 << 16)     # a far dimension
    pairs = {"dim0-dim1": (a, b), "seed7-seed8": (a, c), "dim0-dim65536": (a, d),
             "item i vs i+1": (a[:-1], a[1:]), "item i vs i+2 (dim1)": (b[:-2], b[2:])}
    for name, (x, y) in pairs.items():
        assert abs(_corr(x, y)) < tol, name
    _, u4 = sample_buffer(7, np.arange(n // 4, dtype=np.uint32), 0)
    for i in range(4):
        for j in range(i + 1, 4):
            assert abs(_corr(u4[:, i], u4[:, j])) < 5.0 / math.sqrt(n // 4), (i, j)


# ---------------------------------------------------------------------------
# uniform: statistical quality
# ---------------------------------------------------------------------------

def chi2_sf(stat: float, dof: int) -> float:
    try:
        from scipy.stats import chi2
        return float(chi2.sf(stat, dof))
    except ImportError:  # Wilson-Hilferty normal approximation
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


def chi2_uniform_pvalue(counts: np.ndarray) -> float:
    counts = counts.ravel().astype(np.float64)
    expected = counts.sum() / counts.size
    stat = float(((counts - expected) ** 2 / expected).sum())
    return chi2_sf(stat, counts.size - 1)


@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF])
def test_uniform_chi_square_1d(seed):
    n = 1_000_000
    a, b = sample_items(n, seed, 0)
    for u in (a, b):
        assert u.dtype == np.float32
        assert u.min() >= 0.0 and u.max() < 1.0
        scaled = u.astype(np.float64) * 2.0 ** 24
        np.testing.assert_array_equal(scaled, np.floor(scaled))  # multiples of 2**-24
        counts = np.bincount((u * 100).astype(np.int64), minlength=100)
        assert counts.size == 100
        p = chi2_uniform_pvalue(counts)
        assert p > 1e-3, p
        # Same conclusion from scipy's own test, when available.
        try:
            from scipy.stats import chisquare
        except ImportError:
            pass
        else:
            assert chisquare(counts).pvalue > 1e-3
        assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
        assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / n)  # var of (u-1/2)^2 is 1/180


def test_uniform_chi_square_2d_consecutive_dims():
    n = 1_000_000
    for seed, dim in ((3, 0), (3, 10), (99, 1)):
        a, b = sample_items(n, seed, dim)  # dims `dim` and `dim + 1` of the same item
        counts = np.zeros((10, 10), np.int64)
        np.add.at(counts, ((a * 10).astype(np.int64), (b * 10).astype(np.int64)), 1)
        assert chi2_uniform_pvalue(counts) > 1e-3, (seed, dim)
    # The four lanes of uniform4: consecutive lanes as 2-D points.
    _, u4 = sample_buffer(5, np.arange(n // 4, dtype=np.uint32), 2)
    for j in range(3):
        counts = np.zeros((10, 10), np.int64)
        np.add.at(counts, ((u4[:, j] * 10).astype(np.int64), (u4[:, j + 1] * 10).astype(np.int64)), 1)
        assert chi2_uniform_pvalue(counts) > 1e-3, j
    # A broken generator fails this test (the test has power): sorting pairs.
    s = np.sort(np.stack([a, b]), axis=0)
    counts = np.zeros((10, 10), np.int64)
    np.add.at(counts, ((s[0] * 10).astype(np.int64), (s[1] * 10).astype(np.int64)), 1)
    assert chi2_uniform_pvalue(counts) < 1e-3


# ---------------------------------------------------------------------------
# pcg_hash
# ---------------------------------------------------------------------------

@functools.cache
def pcg_kernel() -> ir.Kernel:
    def body(x, xi):
        i = ir.item_index()
        return {"h": ir.rng.pcg_hash(x[i]), "hi": ir.rng.pcg_hash(xi[i]),
                "hh": ir.rng.pcg_hash(ir.rng.pcg_hash(x[i]) ^ i)}
    return ir.trace(body, {"x": ir.In("u32"), "xi": ir.In("i32")},
                    {"h": ir.Out("u32"), "hi": ir.Out("u32"), "hh": ir.Out("u32")}, name="pcg")


@pytest.mark.parametrize("lanes", LANES)
def test_pcg_hash_matches_numpy(lanes):
    rng = np.random.default_rng(9)
    x = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x[:6] = [0, 1, 2, MASK, 0x80000000, 0x7FFFFFFF]
    out = {k: np.asarray(v) for k, v in run(pcg_kernel(), (len(x),), lanes, x=x, xi=x.view(np.int32)).items()}
    want = pcg_hash_np(x)
    np.testing.assert_array_equal(out["h"], want)
    np.testing.assert_array_equal(out["hi"], want)  # an Int input hashes its bit pattern
    np.testing.assert_array_equal(out["hh"], pcg_hash_np(want ^ np.arange(len(x), dtype=np.uint32)))
    for j in range(6):  # and a scalar pure-Python version of the published code
        assert int(out["h"][j]) == pcg_hash_py(int(x[j]))


def pcg_hash_py(v: int) -> int:
    state = (v * 747796405 + 2891336453) & MASK
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & MASK
    return (word >> 22) ^ word


def test_pcg_hash_constant_folding_agrees():
    vals = [0, 1, 2, 12345, 0x80000000, MASK, 2891336453]

    def body(x):
        return [ir.rng.pcg_hash(v) for v in vals]
    k = ir.trace(body, {"x": ir.In("u32")}, {"h": ir.Out("u32", (len(vals),))})
    assert "mul" not in k.text  # fully folded
    out = np.asarray(launch(k, (1,), x=np.zeros(1, np.uint32))["h"])[0]
    np.testing.assert_array_equal(out, pcg_hash_np(np.array(vals, np.uint32)))
