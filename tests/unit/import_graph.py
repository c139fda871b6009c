"""Reading a module's imports from its source, for the tests that hold the repository's layout
(``test_layout``) and its test tiers (``test_tiers``)."""

from __future__ import annotations

import ast


def import_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` in ``module`` names (relative levels resolved from the
    module's package: a package's ``__init__`` is its own package)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    parts = parts[:len(parts) - node.level + (1 if is_package else 0)]
    return ".".join(parts + ([node.module] if node.module else []))
