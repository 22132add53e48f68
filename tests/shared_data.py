"""Where the real AMR files are: ../shared/data beside the project, or $AMRZIP_TEST_DATA.
Tests that need them skip with this reason when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _data_dir():
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    if here.is_dir():
        return here
    env = os.environ.get("AMRZIP_TEST_DATA")
    return Path(env) if env and Path(env).is_dir() else None


DATA = _data_dir()
AMREX = DATA / "amrex" if DATA else None
CHOMBO = DATA / "chombo" / "bisicles" if DATA else None
REASON = "real AMR test data not found (../shared/data beside the project, or set AMRZIP_TEST_DATA)"
needs_data = pytest.mark.skipif(DATA is None, reason=REASON)


def real_files() -> list[str]:
    """Every real AMR file of the data folder, as paths below it: AMReX plotfile folders (those
    holding a Header) and HDF5 files (AMReX or Chombo), so that a file added there is tested
    without naming it here."""
    if DATA is None:
        return []
    found = [p.parent for p in DATA.rglob("Header")]
    found += [p for p in DATA.rglob("*") if p.is_file() and p.suffix.lower() in (".h5", ".hdf5")]
    return sorted(p.relative_to(DATA).as_posix() for p in found)
