"""The amrzip C library and header of this installation, for building C and C++ programs:
``amrzip config --cflags``, ``--libs [--static]`` and ``--pkg-config-path`` print what these
functions return. The files sit beside this module (``include/``, ``lib/``), copied in by
``make setup`` and shipped in the wheel. See docs/capi.md.
"""

from __future__ import annotations

import os

__all__ = ["include_dir", "library_dir", "pkg_config_path", "shared_library", "static_library", "cflags", "libs"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def _existing(path: str) -> str:
    if not os.path.exists(path):
        raise FileNotFoundError(f"the amrzip C library is not in this installation ({path} is missing; 'make setup' builds it)")
    return path


def include_dir() -> str:
    """The folder holding ``amrzip.h``."""
    return os.path.dirname(_existing(os.path.join(_HERE, "include", "amrzip.h")))


def library_dir() -> str:
    """The folder holding ``libamrzip.so`` and ``libamrzip.a``."""
    return os.path.dirname(shared_library())


def pkg_config_path() -> str:
    """The folder holding ``amrzip.pc``, for ``PKG_CONFIG_PATH``."""
    return os.path.dirname(_pc_file())


def shared_library() -> str:
    return _existing(os.path.join(_HERE, "lib", "libamrzip.so"))


def static_library() -> str:
    return _existing(os.path.join(_HERE, "lib", "libamrzip.a"))


def _pc_file() -> str:
    return _existing(os.path.join(_HERE, "lib", "pkgconfig", "amrzip.pc"))


def cflags() -> list[str]:
    """Compiler flags: where the header is."""
    return [f"-I{include_dir()}"]


def libs(static: bool = False) -> list[str]:
    """Linker flags: the shared library, found at run time through an rpath to its folder (which
    is on no default search path); or, with ``static``, the static archive and the system
    libraries it needs (``static_libs`` of ``amrzip.pc``)."""
    if static:
        return [static_library(), *_static_system_libs()]
    folder = library_dir()
    return [f"-L{folder}", f"-Wl,-rpath,{folder}", "-lamrzip"]


def _static_system_libs() -> list[str]:
    with open(_pc_file(), encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition("=")
            if key == "static_libs":
                return value.split()
    raise ValueError(f"{f.name} has no static_libs line")
