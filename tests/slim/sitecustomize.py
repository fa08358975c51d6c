"""Loaded by every Python process started with this folder on PYTHONPATH: makes
the optional extras unimportable, as on a bare ``pip install spotfleet``
(the core only). tests/test_slim_core.py uses it for the controller, the node
agents it starts and the CLI."""

import importlib.abc
import sys

BLOCKED = frozenset({"boto3", "botocore", "google", "numpy", "matplotlib", "psycopg", "psycopg_binary"})


class _BlockExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in spotfleet's core)", name=name)
        return None


sys.meta_path.insert(0, _BlockExtras())
