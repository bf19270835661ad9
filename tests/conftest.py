"""Fixtures shared by the core tests."""
import os

import pytest

# Modules whose tests never run a kernel on the default device. A plugin's session runs the core suite again on its
# own device (`DEV=...`); it leaves these out (`-m "not device_independent"`), since the core session ran them.
DEVICE_INDEPENDENT = {
    "test_cpufeatures", "test_dtype", "test_packaging", "test_pattern", "test_plugin_dists", "test_regalloc",
    "test_rewrite", "test_runtime_cpu_pool", "test_runtime_cpu_pool_claims", "test_runtime_helpers", "test_spec",
    "test_symbolic", "test_symbolic_fuzz", "test_third_party_backend", "test_uop",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "device_independent: the test runs no kernel on the default device")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in DEVICE_INDEPENDENT:
            item.add_marker(pytest.mark.device_independent)


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
