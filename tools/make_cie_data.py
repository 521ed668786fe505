"""Regenerate ``jaxrender/data/cie.npz``: the CIE 1931 2-degree colour matching
functions and the CIE standard illuminant D65, at 5 nm from 360 to 830 nm
(95 samples, float64), for ``jaxrender.scene.spectra``.

    pip download --no-deps colour-science==0.4.7 && unzip colour_science-*.whl -d /tmp/cs/x
    python tools/make_cie_data.py [/tmp/cs/x] [--check]

The argument is the folder holding the unpacked ``colour`` package (default
``/tmp/cs/x``). Only the dict literals of colour-science's data modules are
parsed; the package is not imported, so its dependencies are not needed.

* ``xyz`` (95, 3): ``MSDS_CMFS["CIE 1931 2 Degree Standard Observer"]`` (1 nm
  from 360 to 830 nm, CIE 018:2019 / CIE S 014-1), every fifth sample.
* ``d65`` (95,): ``SDS_ILLUMINANTS["D65"]`` (CIE S 014-2 / ISO 11664-2, 5 nm),
  which colour-science 0.4.7 tabulates only from 300 to 780 nm. The CIE table
  goes on to 830 nm; it is built as the D-series formula S0 + M1 S1 + M2 S2 with
  M1 = -0.295, M2 = -0.689 (S0, S1, S2 being tabulated at 10 nm and linearly
  interpolated to 5 nm), which is also what colour-science's
  ``sd_CIE_illuminant_D_series`` computes for D65. This script checks that
  this rule reproduces colour-science's D65 table to 1e-3 (the table keeps 6
  significant figures) over 300..780 nm, and uses it (with colour-science's
  S0, S1, S2, which reach 830 nm) for 785..830 nm, unrounded; the CIE table
  prints these rounded to 4 decimals (differences <= 5e-5, e.g. 61.87795
  here against 61.8779 at 795 nm).
``--check`` compares with the committed file and exits 1 if they differ.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "jaxrender" / "data" / "cie.npz"
WAVELENGTHS = np.arange(360.0, 830.0 + 1e-9, 5.0)
M1, M2 = -0.295, -0.689


def _dict_literal(path: Path, key: str) -> dict[float, object]:
    """Parse the dict literal stored under ``key`` in a colour-science data module."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == key and isinstance(v, ast.Dict):
                    return ast.literal_eval(v)
    raise KeyError(f"{key!r} not found in {path}")


def load(root: Path) -> tuple[dict, dict, dict]:
    """(cmf {λ: (x, y, z)}, d65 {λ: v}, basis {name: {λ: v}}) from an unpacked colour-science."""
    ds = root / "colour" / "colorimetry" / "datasets"
    cmf = _dict_literal(ds / "cmfs.py", "CIE 1931 2 Degree Standard Observer")
    d65 = _dict_literal(ds / "illuminants" / "sds.py", "D65")
    basis_file = ds / "illuminants" / "sds_d_illuminant_series.py"
    basis = {name: _dict_literal(basis_file, name) for name in ("S0", "S1", "S2")}
    return cmf, d65, basis


def build(root: Path) -> dict[str, np.ndarray]:
    cmf, d65, basis = load(root)
    xyz = np.array([cmf[float(w)] if float(w) in cmf else cmf[int(w)] for w in WAVELENGTHS], dtype=np.float64)

    def d_series(w: float) -> float:
        return basis["S0"][w] + M1 * basis["S1"][w] + M2 * basis["S2"][w]

    # Check the CIE construction rule against colour-science's own D65 table.
    err = 0.0
    for w, v in d65.items():
        w = float(w)
        ref = d_series(w)
        err = max(err, abs(ref - v))
    if err > 1e-3:
        raise SystemExit(f"D-series rule does not reproduce colour-science's D65 (max error {err})")
    d65_full = dict((float(w), float(v)) for w, v in d65.items())
    last = max(d65_full)
    for w in WAVELENGTHS[WAVELENGTHS > last]:
        w = float(w)
        d65_full[w] = d_series(w)
    d = np.array([d65_full[float(w)] for w in WAVELENGTHS], dtype=np.float64)
    print(f"colour-science D65 ends at {last} nm; extended to 830 nm "
          f"(rule reproduces its table within {err:.1e}): {d[WAVELENGTHS > last]}")
    return {"wavelengths": WAVELENGTHS.copy(), "xyz": xyz, "d65": d}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="/tmp/cs/x", help="folder holding the unpacked 'colour' package")
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = ap.parse_args()
    data = build(Path(args.root))
    assert data["xyz"].shape == (95, 3) and data["d65"].shape == (95,)
    if args.check:
        old = np.load(OUT)
        same = all(np.array_equal(old[k], v) for k, v in data.items())
        print("identical" if same else "DIFFERENT")
        sys.exit(0 if same else 1)
    np.savez_compressed(OUT, **data)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
