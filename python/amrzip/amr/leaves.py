"""Leaf cells: the cells of each level that no finer level covers. They tile the domain once, so
they are where an AMR snapshot's data lives (covered cells are averages of the finer data above
them); errors and domain averages are measured over them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from amrzip.amr.hierarchy import Hierarchy


@dataclass
class Leaves:
    """Where a hierarchy's leaf cells are: one boolean mask per (level, box) and each leaf cell's volume."""

    masks: dict  # (level, box) -> bool array over the box, True on leaf cells
    volumes: np.ndarray  # per leaf cell, in the order of values()

    @classmethod
    def of(cls, h: Hierarchy) -> "Leaves":
        masks, vols = {}, []
        for L, lev in enumerate(h.levels):
            cell = math.prod(lev.dx)
            for i in range(lev.num_boxes):
                m = ~h.covered_mask(L, i)
                masks[(L, i)] = m
                vols.append(np.full(int(m.sum()), cell))
        return cls(masks, np.concatenate(vols) if vols else np.zeros(0))

    @property
    def count(self) -> int:
        return int(self.volumes.size)

    def values(self, boxes) -> np.ndarray:
        """The leaf cells of ``boxes`` (a hierarchy field as {(level, box): array}) as one float64 vector."""
        return np.concatenate([np.asarray(boxes[key], dtype=np.float64)[m] for key, m in self.masks.items()])


def volume_weighted_mean(leaf: np.ndarray, volumes: np.ndarray) -> float:
    """sum(value * cell volume) / total volume over the leaf cells: the field's domain average."""
    return float(np.dot(leaf, volumes) / volumes.sum())


def mean_change(orig_mean: float, dec_mean: float, vrange: float) -> tuple[float, str]:
    """Relative change of a volume-weighted mean: over |mean|, or over the value range (marked 'range') when the
    mean is zero to within 1e-6 of the range (a velocity, say), where a change relative to it means nothing."""
    diff = abs(dec_mean - orig_mean)
    if abs(orig_mean) > 1e-6 * vrange:
        return diff / abs(orig_mean), "mean"
    return (diff / vrange if vrange > 0 else 0.0), "range"


# --- rate-distortion ------------------------------------------------------------------------------------------
