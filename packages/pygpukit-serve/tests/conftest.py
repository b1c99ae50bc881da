"""The served model (float32: greedy tokens are compared exactly), shared by the engine and server tests."""

from __future__ import annotations

import pytest
from serve_testing import write_model

from pygpukit_llm import load


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("serve-qwen2"))


@pytest.fixture(scope="session")
def model(model_path):
    return load(model_path, "float32", progress=False)
