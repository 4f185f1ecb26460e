"""Shared test setup: tests marked `gpu` skip themselves on a machine without CUDA."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@functools.cache
def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
