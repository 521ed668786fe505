"""The README's Python snippets run as written, in order, in one namespace
(later snippets use what earlier ones defined, as a reader would)."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_python_snippets_run():
    blocks = snippets()
    assert len(blocks) >= 4
    namespace: dict = {}
    try:
        for k, code in enumerate(blocks):
            exec(compile(code, f"README.md snippet {k + 1}", "exec"), namespace)
    finally:
        from jaxrender.kernels.bsdfs import registry
        if registry.TYPES.pop("matte", None) is not None:   # the snippet's plugin: leave the registry as found
            for hook in registry._on_change:
                hook()
    assert namespace["image"].shape == (256, 256, 3)
    assert namespace["value"] > 0                      # the optax loop ran
    assert namespace["g"].shape == (3,)                 # the registered BSDF's gradient
    assert namespace["n"].shape == (10000,)             # the kernel-language example


def test_readme_points_nowhere_outside_the_repository():
    text = README.read_text()
    assert "../" not in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (README.parent / target).exists(), target
