"""Write jaxrender/data/conductor_spectra.npz: the measured complex index
of refraction (eta, k against wavelength) of every named conductor
``material`` Mitsuba 3 knows, for the spectral variant, and
conductor_spectra_SOURCES.txt with each file's own header (where its
numbers come from).

The data are measured optical constants (facts), distributed with Mitsuba
3 as ``mitsuba/data/ior/<name>.eta.spd`` / ``<name>.k.spd`` (the set PBRT
also ships; mostly from the Luxpop database, after Palik's Handbook of
Optical Constants of Solids). This script reads them from an installed
``mitsuba`` package:

    pip install mitsuba==3.9.1 && python3 tools/make_conductor_spectra.py [--check]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxrender.scene.conductors import MATERIALS  # noqa: E402
from jaxrender.scene.spectra import read_spd  # noqa: E402

OUT = ROOT / "jaxrender" / "data" / "conductor_spectra.npz"
SOURCES = ROOT / "jaxrender" / "data" / "conductor_spectra_SOURCES.txt"


def header(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.lstrip().startswith("#"):
            break
        lines.append(line.lstrip("#; ").rstrip())
    return [x for x in lines if x]


def main() -> None:
    import mitsuba
    ior = Path(mitsuba.__file__).resolve().parent / "data" / "ior"
    arrays, notes = {}, [
        "conductor_spectra.npz: measured eta and k of Mitsuba 3's named conductors, read from",
        f"mitsuba {mitsuba.__version__}'s data/ior/<name>.<eta|k>.spd by tools/make_conductor_spectra.py.",
        "Arrays <name>.eta.wavelengths / <name>.eta / <name>.k.wavelengths / <name>.k (nm, float64).",
        "Each file's own header follows.", ""]
    for name in MATERIALS:
        if name == "none":
            continue
        for part in ("eta", "k"):
            path = ior / f"{name}.{part}.spd"
            wl, values = read_spd(str(path))
            arrays[f"{name}.{part}.wavelengths"], arrays[f"{name}.{part}"] = wl, values
            notes.append(f"{name}.{part}.spd: " + " | ".join(header(path)))
    if "--check" in sys.argv:
        with np.load(OUT) as f:
            same = set(f.files) == set(arrays) and all(np.array_equal(f[k], v) for k, v in arrays.items())
        print("identical" if same else "DIFFERENT")
        sys.exit(0 if same else 1)
    np.savez_compressed(OUT, **arrays)
    SOURCES.write_text("\n".join(notes) + "\n")
    print(f"{OUT}: {len(arrays) // 4} materials")


if __name__ == "__main__":
    main()
