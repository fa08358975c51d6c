"""Fixtures shared by every provider's tests: a moto server on loopback for the
AWS adapter (the contract suite in ``test_contract.py`` and ``aws/`` use it)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from tests.moto_process import moto_server


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server subprocess on a free loopback port, for the whole session."""
    with moto_server() as url:
        yield url


@pytest.fixture
def moto(moto_endpoint: str) -> str:
    """The endpoint, with moto's state reset so every test starts from an empty account."""
    req = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return moto_endpoint
