"""Fixtures of the control-flow tests (helpers: support.py)."""

from __future__ import annotations

import os

import pytest

import runtime_shim.warn
from tests.devices import REAL_GPU


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated modules warn once per process; each test starts with none seen."""
    monkeypatch.setattr(runtime_shim.warn, "_SEEN", set())


@pytest.fixture
def triton_interpreter() -> None:
    """`_cuda_N` variants run on CPU tensors in Triton's interpreter."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1" and not REAL_GPU:
        pytest.skip("TRITON_INTERPRET is not 1 (set by tests/conftest.py without GPU)")
