"""Fixtures: the same tests run on the CPU backend (CI) and on a GPU.

GPU-only tests carry ``@pytest.mark.gpu`` and skip cleanly without one (the
repository's conftest.py).
"""

from __future__ import annotations

import pytest

from gp_testing import require_nvrtc


@pytest.fixture
def need_nvrtc():
    return require_nvrtc()
