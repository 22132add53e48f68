"""``python -m amrzip``: the same as the ``amrzip`` command."""

from amrzip.cli import main

main()
