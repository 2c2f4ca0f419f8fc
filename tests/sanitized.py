"""The C extensions' AddressSanitizer/UBSan builds, for the tests scripts/sanitize runs."""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType


def sanitized_build(variable: str, name: str) -> ModuleType | None:
    """The extension built by scripts/sanitize at the path in environment ``variable``
    (loaded as module ``name``), or None when that is not set (a plain test run)."""
    path = os.environ.get(variable)
    if not path:
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
