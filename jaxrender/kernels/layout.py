"""Where every value sits in the buffers the rendering kernels read.

One place for row widths, column offsets and table strides: the scene
builder (``jaxrender.scene``) fills its arrays by these names and the kernel
plugins read them by the same names, so no other file spells a width or an
offset. Type ids are not here: each plugin registry owns its own
(``bsdfs.registry``, ``emitters``, ``shapes``, ``textures``).

:func:`scene_inputs` declares the buffers every rendering kernel takes; an
integrator adds its own scalars (``integrators.base``).

Example::

    row = np.zeros(layout.SHAPE_ROW)
    row[layout.SHAPE_RADIUS] = 2.0                      # scene side
    r = geo.shape_value(s, layout.SHAPE_RADIUS)         # kernel side
"""
from __future__ import annotations

from .. import ir
from ..ir.bvh_query import LEAF_WORDS, NODE_WORDS

# --- triangles, in BVH leaf order --------------------------------------------
TRI_ROW = 9                    # tris: p0, p1, p2
ATTR_ROW = 2                   # tri_attr: BSDF index, emitter index (-1: none)
ATTR_BSDF, ATTR_EMITTER = 0, 1
TRI_UV_ROW = 6                 # tri_uv: (u, v) of the three vertices
TRI_NORMALS_ROW = 9            # tri_normals: world vertex normals (a zero row: face normal)

# --- the binary BVH with skip links (scenes with analytic shapes) --------------
BVH_BOUNDS_ROW = 6             # box min, box max
BVH_LINKS_ROW = 3              # skip, first primitive, primitive count (0: interior)
LINK_SKIP, LINK_FIRST, LINK_COUNT = 0, 1, 2

# --- analytic shapes: one shape_data row each ---------------------------------
SHAPE_ROW = 32
SHAPE_TO_WORLD = 0             # 3 x 4, row-major (12 floats)
SHAPE_TO_OBJECT = 12           # 3 x 4, row-major
SHAPE_NORMAL = 24              # a disk's world normal (3 floats)
SHAPE_RADIUS = 27              # a sphere's radius
SHAPE_SIGN = 28                # -1: normals flipped
SHAPE_AREA = 29
SHAPE_KIND = 30                # shapes.ANALYTIC id

# --- BSDFs ---------------------------------------------------------------------
# Floats of parameters per BSDF; the last one is the twosided flag. The
# widest built-in row is principled's (17 floats: a colour, 11 floats, its
# IOR and three sampling rates).
BSDF_ROW = 18
TWOSIDED_SLOT = BSDF_ROW - 1
# Floats per BSDF in the bsdf_table buffer (primitives/bsdf_tables.py): the
# largest precomputed table a BSDF has (roughplastic: 64 transmittances and
# the internal reflectance).
BSDF_TABLE_STRIDE = 65

# --- textures --------------------------------------------------------------------
TEX_META_ROW = 8               # tex_meta (i32)
TEX_OFFSET, TEX_WIDTH, TEX_HEIGHT, TEX_CHANNELS, TEX_KIND, TEX_WRAP, TEX_FILTER, TEX_DEPTH = range(8)
TEX_UV_ROW = 6                 # tex_uv: to_uv, 2 x 3 row-major
BSDF_TEX_ROW = 2               # bsdf_tex: first slot, slot count
BSDF_TEX_FIRST, BSDF_TEX_COUNT = 0, 1
TEX_SLOT_ROW = 4               # tex_slots: row start, width, texture, luminance flag
SLOT_START, SLOT_WIDTH, SLOT_TEXTURE, SLOT_LUMINANCE = 0, 1, 2, 3
MAX_TEX_SLOTS = 4              # textured parameters per BSDF

# --- emitters ------------------------------------------------------------------------
EMITTER_META_ROW = 4           # emitter_meta (i32)
META_TYPE = 0                  # emitters.TYPE_ID
META_FIRST = 1                 # area: first light triangle; on an analytic shape: its shape_data row
META_COUNT = 2                 # area: light triangles
META_TEXTURE = 3               # envmap: its texture
EMITTER_GEOM_ROW = 4           # emitter_geom: position (point, spot) / direction (directional, sunsky's sun), area
GEOM_AREA = 3
GEOM_SUN_CONE = 3              # sunsky: 1 - cos of the sun cone's half angle
EMITTER_FRAME_ROW = 48         # emitter_frame: world-to-local 3x3 (row-major), then per-type constants
FRAME_SPOT_COS_CUTOFF, FRAME_SPOT_COS_BEAM, FRAME_SPOT_CUTOFF, FRAME_SPOT_INV_WIDTH = 9, 10, 11, 12
# sunsky (its own row layout): the sky model's 9 coefficients (coefficient k, channel c at 3 k + c), its
# radiance (RGB, times sky_scale), the sun's radiance (RGB, times sun_scale), the zenith (world), two
# tangents completing the sun direction to a frame, the probability of sampling the sky (else the sun),
# complex_sun's polynomial table (a texture index; -1: a uniform sun) and sin^2 of the cone's half angle
FRAME_SKY_PARAMS, FRAME_SKY_RADIANCE, FRAME_SUN_RADIANCE = 0, 27, 30
FRAME_ZENITH, FRAME_SUN_T1, FRAME_SUN_T2, FRAME_SKY_PROB = 33, 36, 39, 42
FRAME_SUN_TABLE, FRAME_SUN_SIN2 = 43, 44
ENV_FRAME_ROW = 9              # env_frame: the envmap's to_world rotation (row-major)

# --- the sensor ----------------------------------------------------------------------------
CAMERA_ROW = 22                # camera: to_world (16, row-major), tan_x, tan_y, near_clip, far_clip,
                               # aperture_radius, focus_distance (the thin lens's; sensors/)
CAMERA_TO_WORLD, CAMERA_TAN_X, CAMERA_TAN_Y, CAMERA_NEAR_CLIP, CAMERA_FAR_CLIP = 0, 16, 17, 18, 19
CAMERA_APERTURE, CAMERA_FOCUS = 20, 21
# --- film segments of the camera's boundary term (integrators/boundary.py) ------------------
SEGMENT_ROW = 18               # segments: ends on the film (grid pixels), their world points, side, kind,
                               # and a mesh edge's triangle, the slots of its ends and where the segment's
                               # ends lie along it (0..1), so that its points can follow moving triangles,
                               # and the instance whose copy of a shapegroup's edge it is (-1: none)
SEG_S0, SEG_S1, SEG_P0, SEG_P1 = 0, 2, 4, 7
SEG_SIDE = 10                  # +1 / -1: the region lies towards side * (-e.y, e.x), e = s1 - s0
SEG_KIND = 11                  # SEG_SILHOUETTE: moves with its world points; SEG_FILM_EDGE: fixed on the film;
                               # SEG_CURVE_KIND: an analytic shape's silhouette or rim, a curve in angle
SEG_SILHOUETTE, SEG_FILM_EDGE, SEG_CURVE_KIND = 0.0, 1.0, 2.0
SEG_SHAPE, SEG_CURVE = 4, 5    # a curve's shape_data row and which curve (integrators/boundary.curve_point)
SEG_TRI, SEG_SLOT0, SEG_SLOT1, SEG_LO, SEG_HI = 12, 13, 14, 15, 16   # SEG_TRI -1: not a mesh edge
SEG_INSTANCE = 17
# Hard shadows' edges (geometry derivatives under point, spot and directional lights): a
# welded edge that is a silhouette seen from a delta light, with that light.
SHADOW_ROW = 7                 # shadow_edges: the edge's first triangle, the slots of its ends and of that
                               # triangle's third vertex, its second triangle (-1: none), the light (emitter row),
                               # the instance whose copy of a shared shapegroup's edge it is (-1: none);
                               # an analytic shape's outline: triangle -1, its shape_data row and which curve
                               # (shapes.curve_point's) in the slots' places
SHADOW_TRI, SHADOW_SLOT0, SHADOW_SLOT1, SHADOW_INNER, SHADOW_TRI_B, SHADOW_LIGHT, SHADOW_INSTANCE = 0, 1, 2, 3, 4, 5, 6

# --- participating media (read by volumetric integrators only: media_inputs) ------------
MEDIUM_ROW = 9                 # medium_data: sigma_t (scale applied), albedo, phase parameter, sample_emitters,
MEDIUM_SIGMA_T, MEDIUM_ALBEDO, MEDIUM_PHASE_G, MEDIUM_SAMPLE_EMITTERS = 0, 3, 6, 7
# and (spectral) what the stored sigma_t spectrum is multiplied by (a float extinction, scale) (else 1)
MEDIUM_EXTINCTION_SCALE = 8
# A heterogeneous medium's row: its majorant (scale times a bound of the sigma_t
# values, scene.loaders.media.grid_majorant; in each channel) where a homogeneous one has sigma_t, then its
# sigma_t and albedo volumes (tex_meta rows, as floats) and its scale.
MEDIUM_MAJORANT, MEDIUM_SIGMA_T_VOLUME, MEDIUM_ALBEDO_VOLUME, MEDIUM_SCALE = 0, 3, 4, 5
# A volume's block of texels (scene/volumes.py) starts with this header:
# world-to-local 3 x 4 (row-major), then the world box of the unit cube.
VOLUME_TO_LOCAL, VOLUME_BBOX_MIN, VOLUME_BBOX_MAX, VOLUME_HEADER = 0, 12, 15, 18
MEDIUM_META_ROW = 2            # medium_meta (i32): kind (Structure.media), phase (Structure.phases)
MEDIUM_KIND, MEDIUM_PHASE = 0, 1
PRIM_MEDIA_ROW = 2             # prim_media (i32, leaf order): interior, exterior medium (-1: none)
MEDIA_INTERIOR, MEDIA_EXTERIOR = 0, 1


# --- instanced shapegroups (scene/instancing.py; read only by instanced structures) -----
GROUP_ROW = 5                  # groups (i32): node start, node count, block start, block count, first primitive row
GROUP_NODES, GROUP_BLOCKS, GROUP_FIRST_ROW = 0, 2, 4
INSTANCE_ROW = 24              # instances (f32): world-to-group 3 x 4, group-to-world 3 x 4 (row-major)
INSTANCE_TO_GROUP, INSTANCE_TO_WORLD = 0, 12


def instance_inputs() -> dict:
    """The buffers a kernel of an instanced structure reads besides :func:`scene_inputs`."""
    return {
        "group_nodes": ir.In("i32", (NODE_WORDS,)),       # every group's 8-wide BVH (local indices)
        "group_leaves": ir.In("i32", (LEAF_WORDS,)),
        "groups": ir.In("i32", (GROUP_ROW,)),
        "instances": ir.In("f32", (INSTANCE_ROW,)),        # in the leaf order of the instance BVH
        "instance_group": ir.In("i32"),
        "instance_bounds": ir.In("f32", (BVH_BOUNDS_ROW,)),  # skip-link BVH over the instances' world boxes
        "instance_links": ir.In("i32", (BVH_LINKS_ROW,)),
    }


def media_inputs() -> dict:
    """The buffers a volumetric integrator reads besides :func:`scene_inputs`
    (no rows in a scene without media)."""
    return {
        "medium_data": ir.In("f32", (MEDIUM_ROW,)),
        "medium_meta": ir.In("i32", (MEDIUM_META_ROW,)),
        "prim_media": ir.In("i32", (PRIM_MEDIA_ROW,)),
        "camera_medium": ir.Scalar("i32"),                 # the medium the sensor is in, -1 none
    }


# The spectral variant's tables (``spectral_data``, kernels/spectrum.py):
# per 5 nm row, linear-sRGB colour matching functions (3), D65, y-bar.
SPECTRAL_ROW = 5


def scene_inputs(spectrum=None) -> dict:
    """The buffers every rendering kernel reads (name -> ``ir.In``), for
    the colour type ``spectrum`` (``spectrum.SpectrumType``, default RGB):
    its emitter rows, and for a spectral one its tables."""
    emitter_width = 3 if spectrum is None else spectrum.emitter_width
    extra = ({"spectral_data": ir.In("f32", (SPECTRAL_ROW,)), "spectral_curves": ir.In("f32")}
             if spectrum is not None and spectrum.spectral else {})
    return {**extra,
        "tris": ir.In("f32", (TRI_ROW,)),
        "tri_attr": ir.In("i32", (ATTR_ROW,)),
        "bvh_bounds": ir.In("f32", (BVH_BOUNDS_ROW,)),
        "bvh_links": ir.In("i32", (BVH_LINKS_ROW,)),
        "bsdf_type": ir.In("i32"),                        # bsdfs.registry type id per BSDF
        "bsdf_data": ir.In("f32", (BSDF_ROW,)),
        "emitter_radiance": ir.In("f32", (emitter_width,)),
        "light_tris": ir.In("i32"),                       # emissive triangles (leaf order), grouped by emitter
        "light_cdf": ir.In("f32"),                        # cumulative area within each emitter's group
        "emitter_meta": ir.In("i32", (EMITTER_META_ROW,)),
        "emitter_geom": ir.In("f32", (EMITTER_GEOM_ROW,)),
        "env_emitter": ir.Scalar("i32"),                  # the constant or envmap emitter, -1 if none
        "tri_uv": ir.In("f32", (TRI_UV_ROW,)),            # 0 rows: no textures
        "bsdf_tex": ir.In("i32", (BSDF_TEX_ROW,)),
        "tex_slots": ir.In("i32", (TEX_SLOT_ROW,)),
        "tex_meta": ir.In("i32", (TEX_META_ROW,)),
        "tex_uv": ir.In("f32", (TEX_UV_ROW,)),
        "texels": ir.In("f32"),                           # every texture's values, flat
        "env_dist": ir.In("f32"),                         # envmap sampling tables (emitters/envmap.py)
        "env_frame": ir.In("f32", (ENV_FRAME_ROW,)),
        "camera": ir.In("f32", (CAMERA_ROW,)),
        "filter_kind": ir.Scalar("i32"),                  # the pixel filter: sensors/filters.KINDS index,
        "filter_radius": ir.Scalar("f32"),                # radius and shape constants (filters.constants)
        "filter_a": ir.Scalar("f32"),
        "filter_b": ir.Scalar("f32"),
        "width": ir.Scalar("u32"),                        # the sample grid (work items), sensors/film.py
        "item_offset": ir.Scalar("u32"),                  # grid item of the launch's first work item
        "height": ir.Scalar("u32"),
        "grid_x0": ir.Scalar("f32"),                      # film pixel of the grid's first item
        "grid_y0": ir.Scalar("f32"),
        "film_width": ir.Scalar("f32"),                   # the whole film, in pixels
        "film_height": ir.Scalar("f32"),
        "spp": ir.Scalar("u32"),
        "seed": ir.Scalar("u32"),
        "sampler_jitter": ir.Scalar("u32"),               # the sampler's jitter flag (samplers/)
        "sampler_strength": ir.Scalar("u32"),             # its orthogonal-array strength
        "bsdf_table": ir.In("f32"),                       # BSDF_TABLE_STRIDE floats a BSDF
        "emitter_frame": ir.In("f32", (EMITTER_FRAME_ROW,)),
        "tri_normals": ir.In("f32", (TRI_NORMALS_ROW,)),  # 0 rows: no vertex normals
        "prim_shape": ir.In("i32"),                       # per leaf entry: -1 (triangle) or shape_data row
        "shape_data": ir.In("f32", (SHAPE_ROW,)),
        "wide_nodes": ir.In("i32", (NODE_WORDS,)),        # triangle-only scenes: the 8-wide BVH
        "wide_leaves": ir.In("i32", (LEAF_WORDS,)),
    }
