"""Reads grid data from the store for yt's selections, decoding only what they touch.

For a selection (a slice, a region, a projection's grids), each grid it touches is read over the
smallest index box holding its selected cells, so the store decodes only the chunks that box
crosses. yt masks cells that finer grids cover out of every selection, and the store leaves
them out too: they are read as NaN (nothing finer is decoded to rebuild them) unless the
selector asks for some (a ``max_level`` selection, say), when they are rebuilt as the mean of
the finer cells, as AMR codes store them. Whole grids (``grid[field]``) are read with covered
cells rebuilt.

yt reads the same grids again and again (per field, per ghost zone of each neighbour): the
snapshot keeps each decoded chunk in its cache, so a second read of a region copies cells and
decodes nothing, and nothing is cached here twice.
"""

from __future__ import annotations

import numpy as np
from yt.geometry.selection_routines import GridSelector
from yt.utilities.io_handler import BaseIOHandler


class IOHandlerAMRZip(BaseIOHandler):
    _dataset_type = "amrzip"
    _particle_reader = False

    def _read_fluid_selection(self, chunks, selector, fields, size):
        chunks = list(chunks)
        if isinstance(selector, GridSelector):
            grids = [g for chunk in chunks for g in chunk.objs]
            if len(grids) != 1:
                raise RuntimeError(f"a grid selection holds {len(grids)} grids, not one")
            return {f: self._whole_grid(grids[0], f[1]) for f in fields}
        if size is None:
            size = sum(g.count(selector) for chunk in chunks for g in chunk.objs)
        rv = {f: np.empty(size, dtype="=f8") for f in fields}
        ind = 0
        for chunk in chunks:
            for g in chunk.objs:
                mask = g._get_selector_mask(selector)
                if mask is None:
                    continue
                lo, hi = _extent(mask)
                window = tuple(slice(l, h + 1) for l, h in zip(lo, hi))
                selected = mask[window]
                covered = "average" if (selected & ~g.child_mask[window]).any() else "nan"
                n = int(selected.sum())
                for f in fields:
                    rv[f][ind : ind + n] = self._read(g, f[1], lo, hi, covered)[selected]
                ind += n
        return rv

    def _whole_grid(self, grid, field: str) -> np.ndarray:
        hi = tuple(int(d) - 1 for d in grid.ActiveDimensions)
        return self._read(grid, field, (0, 0, 0), hi, "average").astype(np.float64, copy=False)

    def _read(self, grid, field: str, lo, hi, covered: str) -> np.ndarray:
        """Cells ``lo``..``hi`` (inclusive, counted from the grid's corner, three components)
        of ``field`` on ``grid``, shaped as yt's three dimensions."""
        dim = self.ds.dimensionality
        corner = grid.box[0]
        region = (tuple(c + int(l) for c, l in zip(corner, lo[:dim])), tuple(c + int(h) for c, h in zip(corner, hi[:dim])))
        data = self.ds.store.read(field, region=region, level=grid.Level, covered=covered)
        return data.reshape(tuple(int(h) - int(l) + 1 for l, h in zip(lo, hi)))


def _extent(mask: np.ndarray):
    """The inclusive (lo, hi) index box of the True cells of a 3-D mask (which has some)."""
    lo, hi = [], []
    for axis in range(3):
        along = np.flatnonzero(mask.any(axis=tuple(a for a in range(3) if a != axis)))
        lo.append(int(along[0]))
        hi.append(int(along[-1]))
    return lo, hi
