"""yt frontend for amrzip snapshot stores: ``yt.load("run")`` opens the latest snapshot of the
store folder ``run`` (``snapshot="name"`` another one) as AMR grids, read lazily (docs/yt.md).

yt finds this package through the ``yt.frontends`` entry point that an installed amrzip
declares, so ``yt.load`` works without importing amrzip first; importing it registers the
classes with yt. Without yt installed it defines nothing.
"""

from importlib.util import find_spec

__all__ = []
if find_spec("yt") is not None:
    from amrzip.yt_frontend.data_structures import AMRZipDataset, AMRZipGrid, AMRZipHierarchy
    from amrzip.yt_frontend.fields import AMRZipFieldInfo
    from amrzip.yt_frontend.io import IOHandlerAMRZip

    __all__ += ["AMRZipDataset", "AMRZipGrid", "AMRZipHierarchy", "AMRZipFieldInfo", "IOHandlerAMRZip"]
