"""Kernels split over cores: the native thread pool passes every argument and core id right.

Each kernel writes, for its core, a value computed from all its arguments into every output buffer;
numpy computes the same values. Argument counts cover register-passed and stack-passed arguments, the
Python-pool fallback (more than POOL_MAX_ARGS), negative int32 values, more threads than cores, and a
forked child (whose pool threads do not exist) running a split kernel.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from tgcore.runtime import cpu
from tgcore.runtime.cpu import ClangCompiler, CPUProgram, run_on_cores


def kernel(n_bufs: int, n_vals: int) -> CPUProgram:
    """out_i[core_id] = 1000 * i + sum(vals) * (core_id + 1) for each of n_bufs int buffers."""
    params = [f"int* restrict o{i}" for i in range(n_bufs)] + [f"int v{j}" for j in range(n_vals)]
    total = " + ".join(f"v{j}" for j in range(n_vals)) or "0"
    body = "".join(f"  o{i}[core_id] = {1000 * i} + ({total}) * (core_id + 1);\n" for i in range(n_bufs))
    src = f"void k({', '.join(params + ['int core_id'])}) {{\n{body}}}\n"
    return CPUProgram("k", ClangCompiler().compile(src))


def expected(n_bufs: int, vals: tuple[int, ...], threads: int) -> np.ndarray:
    core = np.arange(threads)
    return np.array([1000 * i + sum(vals) * (core + 1) for i in range(n_bufs)], dtype=np.int32)


def run(n_bufs: int, vals: tuple[int, ...], threads: int) -> np.ndarray:
    prg = kernel(n_bufs, len(vals))
    outs = [np.full(threads, -7, dtype=np.int32) for _ in range(n_bufs)]
    prg(*(o.ctypes.data for o in outs), vals=vals, threads=threads)
    return np.array(outs)


@pytest.mark.skipif(not cpu._pool_supported(), reason="the native pool is for Linux x86-64/AArch64")
def test_native_pool_builds_here():
    assert cpu.native_pool() is not None


@pytest.mark.parametrize("n_bufs,vals", [(1, ()), (3, (5,)), (6, (1, -2)), (10, (7, -9, 11)), (20, (3, 4, -1, 2))])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_every_argument_and_core_id_arrives(n_bufs, vals, threads):
    np.testing.assert_array_equal(run(n_bufs, vals, threads), expected(n_bufs, vals, threads))


def test_more_arguments_than_the_native_pool_takes():
    n_bufs, vals = cpu.POOL_MAX_ARGS, (2, -3)  # 26 arguments: the Python thread pool runs it
    np.testing.assert_array_equal(run(n_bufs, vals, 2), expected(n_bufs, vals, 2))


def test_many_calls_in_a_row():
    prg = kernel(2, 1)
    a, b = np.zeros(2, np.int32), np.zeros(2, np.int32)
    for i in range(2000):
        prg(a.ctypes.data, b.ctypes.data, vals=(i,), threads=2)
        if (a[0], a[1], b[1]) != (i, 2 * i, 1000 + 2 * i):
            pytest.fail(f"call {i}: {a.tolist()} {b.tolist()}")


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_forked_child_runs_split_kernels():
    prg = kernel(2, 1)
    a, b = np.zeros(4, np.int32), np.zeros(4, np.int32)
    run_on_cores(prg.fxn, (a.ctypes.data_as(cpu.ctypes.c_void_p), b.ctypes.data_as(cpu.ctypes.c_void_p), 1), 4)
    pid = os.fork()
    if pid == 0:  # child: the parent's pool threads are not here
        try:
            prg(a.ctypes.data, b.ctypes.data, vals=(5,), threads=4)
            os._exit(0 if a.tolist() == [5, 10, 15, 20] else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung running a split kernel")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not cpu._pool_supported(), reason="the native pool is for Linux x86-64/AArch64")
def test_native_graph_runs_kernels_in_order_with_changed_arguments():
    """acc[core] = acc[core] * 10 + v over a chain of single-thread and split kernels, then new arguments."""
    src = "void step(int* restrict acc, int v, int core_id) { acc[core_id] = acc[core_id] * 10 + v; }\n"
    prg = CPUProgram("step", ClangCompiler().compile(src))
    a, b = np.zeros(3, np.int32), np.zeros(3, np.int32)
    graph = cpu.NativeGraph.build([(prg, (a.ctypes.data, 1), 3), (prg, (a.ctypes.data, 2), 1),
                                   (prg, (a.ctypes.data, 3), 2)])
    assert graph is not None
    graph.run()
    np.testing.assert_array_equal(a, [123, 13, 1])
    graph.set(1, 0, b.ctypes.data)  # the middle kernel now writes b, with value 7
    graph.set(1, 1, 7)
    graph.run()
    np.testing.assert_array_equal(a, [12313, 1313, 11])
    np.testing.assert_array_equal(b, [7, 0, 0])


@pytest.mark.skipif(not cpu._pool_supported(), reason="the native pool is for Linux x86-64/AArch64")
def test_native_graph_times_each_kernel():
    """A kernel that sleeps 3 ms reads at least 3 ms; the kernels' times add up to no more than the call's."""
    src = ("#include <unistd.h>\n"
           "void nap(int* restrict acc, int us, int core_id) { if (core_id == 0) usleep(us); acc[core_id] += 1; }\n")
    prg = CPUProgram("nap", ClangCompiler().compile(src))
    a = np.zeros(2, np.int32)
    graph = cpu.NativeGraph.build([(prg, (a.ctypes.data, 0), 1), (prg, (a.ctypes.data, 3000), 2),
                                   (prg, (a.ctypes.data, 0), 2)])
    assert graph is not None
    assert graph.run() is None
    start = time.perf_counter()
    times = graph.run(timed=True)
    wall = time.perf_counter() - start
    assert times is not None and len(times) == 3
    assert times[1] >= 3e-3 and all(t >= 0 for t in times)
    assert sum(times) <= wall
    np.testing.assert_array_equal(a, [6, 4])


def test_native_graph_declines_programs_it_cannot_call():
    assert cpu.NativeGraph.build([(object(), (), 2)]) is None
