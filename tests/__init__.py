"""fedray's tests, one sub-package per floor of the package (tests/core, tests/data, ... tests/tools),
plus tests/reproductions (the papers' experiments and tables) and tests/notebooks.

Every folder is a package, so test modules import as ``tests.<floor>.test_<name>`` (pytest's default
``prepend`` import mode puts the repository root on ``sys.path``) and helpers as ``from tests import raynodes``.
"""
