"""Fixtures shared by the core tests."""
import os

import pytest


@pytest.fixture(scope="module")
def spec_on():
    """Every rewrite in the module checks its stage's spec (``TG_SPEC=1``), also when the suite runs without it."""
    old = os.environ.get("TG_SPEC")
    os.environ["TG_SPEC"] = "1"
    yield
    if old is None:
        os.environ.pop("TG_SPEC", None)
    else:
        os.environ["TG_SPEC"] = old
