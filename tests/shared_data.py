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
