"""The snapshot store: AMR hierarchies compressed into a folder of snapshots, each a Zarr v3
hierarchy in one zip file (docs/format.md section 15). The format, the commit protocol and the
reads are in Rust (``crates/store``); this package turns hierarchies and arguments into calls."""

from amrzip._core import StoreError
from amrzip.store.dataset import Dataset, FieldView, LevelView, check, check_snapshot_name, open_store, snapshots
from amrzip.store.writer import write

__all__ = ["Dataset", "FieldView", "LevelView", "StoreError", "check", "check_snapshot_name", "open_store", "snapshots", "write"]
