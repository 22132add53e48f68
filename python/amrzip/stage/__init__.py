"""A staging service for AMR boxes (docs/staging.md): programs running at the same time share
boxes through memory servers instead of files.

One or more metadata servers place each box on the least-loaded node and data server (the
AMRZone paper's Algorithm 1), keep a polytree index over the levels and answer region queries
(Algorithm 2); data servers hold the payloads, optionally compressed by the codec. Transport is
ZeroMQ over TCP::

    from amrzip.stage import Client, LocalService

    with LocalService(dservers=4) as service, service.client() as c:
        c.put(0, 0, ((0, 0, 0), (31, 31, 31)), array)
        c.index(0, ref_ratio=2)
        boxes = c.query(0, ((8, 8, 8), (15, 15, 15)), fetch=True)

The names below import ZeroMQ (pyzmq) when first used, so that ``import amrzip`` does not.
"""

_EXPORTS = {
    "Client": "amrzip.stage.client",
    "StagedBox": "amrzip.stage.client",
    "LocalService": "amrzip.stage.launch",
    "StagingError": "amrzip.stage.protocol",
    "StagingTimeout": "amrzip.stage.protocol",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amrzip.stage' has no attribute {name!r}")
    import importlib
    import importlib.util

    if importlib.util.find_spec("zmq") is None:
        raise ImportError("amrzip.stage needs ZeroMQ's Python binding: pip install pyzmq")
    return getattr(importlib.import_module(module), name)
