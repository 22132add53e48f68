"""The AMR model: boxes, levels, hierarchies (see :mod:`amrzip.amr.hierarchy`)."""

from amrzip.amr.hierarchy import Box, Hierarchy, Level, box_shape

__all__ = ["Box", "Hierarchy", "Level", "box_shape"]
