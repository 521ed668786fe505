"""Scene description, Mitsuba XML/dict loading, meshes, images, BVH build."""
