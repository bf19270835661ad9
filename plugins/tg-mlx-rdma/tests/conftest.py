"""Shared helpers: find Open MPI + mpi4py (skip locally, fail in CI when missing) and run mpirun jobs."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tgcore.testing import in_ci

HERE = Path(__file__).parent
WORKER = HERE / "mpi_worker.py"
IN_CI = in_ci()
APT = "apt-get install -y openmpi-bin libopenmpi-dev"


def mpi_missing() -> str | None:
    if shutil.which("mpirun") is None:
        return f"mpirun not found ({APT})"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install mpi4py, after the MPI packages)"
    return None


@pytest.fixture
def need_mpi() -> None:
    reason = mpi_missing()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI must run the MPI tests: {reason}")
        pytest.skip(reason)


def mpirun_args(np_: int, *, net: str | None = None, oversubscribe: bool = False) -> list[str]:
    """``mpirun`` for ``np_`` ranks of this Python; ``net`` "shm" or "tcp" forces the byte transport."""
    args = ["mpirun", "-np", str(np_)]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")  # Open MPI refuses root without it (CI runs as root)
    if oversubscribe:
        args.append("--oversubscribe")  # more ranks than cores
    if net is not None:  # ob1 is the PML that uses the BTLs below (ucx would bypass them)
        args += ["--mca", "pml", "ob1", "--mca", "btl", {"shm": "self,vader", "tcp": "self,tcp"}[net]]
    return args + [sys.executable]


def run_job(np_: int, argv: list[str], timeout: float, *, net: str | None = None, oversubscribe: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = mpirun_args(np_, net=net, oversubscribe=oversubscribe) + argv
    full_env = {**os.environ, "TG_STRICT_PLUGINS": "1", **(env or {})}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=HERE)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
