"""Fuzzing: bad input is a clean error or a finite image, never a crash,
a hang or a NaN image.

Mutated XML scenes (attribute values, dropped and duplicated elements,
renamed tags) run in a subprocess, where a crash of generated code would
show as a failed example instead of killing the test run; mutated params
dicts (wrong shapes and dtypes, NaN, inf, strings, large and negative
values) run in this process against one compiled kernel. Examples are few
(a CI budget of seconds), their seeds derived from the test, so a failure
reproduces.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxrender

SCENE = """<scene version="3.0.0">
  <integrator type="path"><integer name="max_depth" value="3"/></integrator>
  <sensor type="perspective">
    <float name="fov" value="45"/>
    <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
    <film type="hdrfilm"><integer name="width" value="8"/><integer name="height" value="8"/>
      <rfilter type="gaussian"/></film>
    <sampler type="independent"><integer name="sample_count" value="1"/></sampler>
  </sensor>
  <bsdf type="diffuse" id="white"><rgb name="reflectance" value="0.7, 0.7, 0.7"/></bsdf>
  <bsdf type="roughconductor" id="metal"><float name="alpha" value="0.3"/></bsdf>
  <shape type="rectangle" id="floor">
    <transform name="to_world"><rotate x="1" angle="-90"/><translate y="-1"/></transform>
    <ref id="white"/>
  </shape>
  <shape type="sphere" id="ball"><point name="center" value="0, 0, 0"/><float name="radius" value="0.5"/>
    <ref id="metal"/></shape>
  <shape type="rectangle" id="lamp">
    <transform name="to_world"><translate y="2"/><rotate x="1" angle="90"/></transform>
    <emitter type="area"><rgb name="radiance" value="4, 4, 4"/></emitter>
  </shape>
  <emitter type="constant"><rgb name="radiance" value="0.1"/></emitter>
</scene>
"""

# Runs in a fresh process: applies each mutation, loads, renders; prints one
# JSON line per example ("error" for a SceneError, "ok" with the image's
# finiteness, or the unexpected exception).
WORKER = textwrap.dedent("""
    import json, random, sys, xml.etree.ElementTree as ET
    import numpy as np
    import jaxrender

    scene, seeds = sys.argv[1], json.loads(sys.argv[2])
    WEIRD = ["", "nan", "inf", "-inf", "-1", "0", "1e38", "-1e38", "3.5", "abc", "1, 2", "1,2,3,4,5",
             "true", "0x10", " ", "1e-45", "99999999999"]
    TAGS = ["float", "integer", "rgb", "point", "vector", "string", "boolean", "bsdf", "shape", "ref", "transform"]
    for seed in seeds:
        rng = random.Random(seed)
        root = ET.fromstring(scene)
        elements = [e for e in root.iter() if e is not root]
        for _ in range(rng.randint(1, 3)):
            e = rng.choice(elements)
            kind = rng.randrange(4)
            if kind == 0 and e.attrib:
                e.set(rng.choice(sorted(e.attrib)), rng.choice(WEIRD))
            elif kind == 1:
                for parent in root.iter():
                    if e in list(parent):
                        parent.remove(e)
                        break
            elif kind == 2:
                for parent in root.iter():
                    if e in list(parent):
                        parent.append(ET.fromstring(ET.tostring(e)))
                        break
            else:
                e.tag = rng.choice(TAGS)
        text = ET.tostring(root, encoding="unicode")
        try:
            img = np.asarray(jaxrender.render(jaxrender.load_dict(
                __import__("jaxrender.scene.xml_loader", fromlist=["x"]).parse_xml(text)), spp=1))
            result = {"seed": seed, "ok": True, "finite": bool(np.isfinite(img).all())}
        except jaxrender.SceneError as exc:
            result = {"seed": seed, "ok": False, "error": str(exc)[:200]}
        except Exception as exc:  # noqa: BLE001 - what the test is looking for
            result = {"seed": seed, "ok": False, "unexpected": f"{type(exc).__name__}: {exc}"[:400], "xml": text}
        print(json.dumps(result), flush=True)
""")


def test_mutated_xml_scenes_raise_scene_errors_or_render_finite_images():
    seeds = list(range(60))
    proc = subprocess.run([sys.executable, "-c", WORKER, SCENE, json.dumps(seeds)], capture_output=True, text=True,
                          timeout=600)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    # A crash (signal) or a hang would leave examples without a result.
    assert proc.returncode == 0 and len(results) == len(seeds), (proc.returncode, proc.stderr[-2000:])
    unexpected = [r for r in results if "unexpected" in r]
    assert not unexpected, unexpected[:3]
    nonfinite = [r for r in results if r["ok"] and not r["finite"]]
    assert not nonfinite, nonfinite[:3]
    # The mutations reach both outcomes (the test is not vacuous).
    assert any(r["ok"] for r in results) and any(not r["ok"] for r in results)


@pytest.fixture(scope="module")
def scene():
    from jaxrender.scene.xml_loader import parse_xml
    s = jaxrender.load_dict(parse_xml(SCENE))
    np.asarray(jaxrender.render(s, spp=1))     # compile once
    return s


def _bad_values(shape):
    """Replacement values for a parameter of ``shape``: some valid, most not."""
    n = int(np.prod(shape))
    finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
    same_shape = st.lists(finite, min_size=n, max_size=n).map(lambda v: np.asarray(v, np.float32).reshape(shape))
    special = st.sampled_from([np.nan, np.inf, -np.inf]).map(lambda x: np.full(shape, x, np.float32))
    wrong_shape = st.integers(0, 5).filter(lambda k: (k,) != tuple(shape)).map(lambda k: np.zeros(k, np.float32))
    dtypes = st.sampled_from([np.int32, np.float64, np.bool_, np.uint8]).map(lambda t: np.ones(shape, t))
    junk = st.sampled_from(["abc", None, [1, "x"], {"a": 1}])
    return st.one_of(same_shape, special, wrong_shape, dtypes, junk)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_params_raise_scene_errors_or_render_finite_images(scene, data):
    keys = sorted(scene.params)
    key = data.draw(st.sampled_from(keys))
    value = data.draw(_bad_values(np.shape(scene.params[key])))
    try:
        img = np.asarray(jaxrender.render(scene, {key: value}, spp=1))
    except jaxrender.SceneError:
        return
    assert np.isfinite(img).all(), (key, value)
