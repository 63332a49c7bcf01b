"""The library: one module (or package) per op family. Importing this imports every family, which
registers its specs; a new family is a new module here, nothing else to wire."""

import importlib
import pkgutil

FAMILIES = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
"""The op families (modules and packages under ``kernelworks.ops``), in import order."""

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")

__all__ = ["FAMILIES"]
