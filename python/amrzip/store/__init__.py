"""The snapshot store: AMR hierarchies compressed into a Zarr v3 hierarchy (see ``layout``)."""

from amrzip.store.dataset import Dataset, FieldView, LevelView, open_store, snapshots
from amrzip.store.layout import StoreError
from amrzip.store.writer import write

__all__ = ["Dataset", "FieldView", "LevelView", "StoreError", "open_store", "snapshots", "write"]
