"""The native pool hands out core_ids one at a time to whichever thread runs: every core_id of every split
kernel runs exactly once, in kernel order, also when the machine is busy (threads descheduled mid-job) and
when a kernel has more core_ids than the pool has threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tgcore.runtime import cpu
from tgcore.runtime.cpu import ClangCompiler, CPUProgram, run_on_cores

pytestmark = pytest.mark.skipif(not cpu._pool_supported(), reason="the native pool is for Linux x86-64/AArch64")

# count[core_id] += 1; flags[0] is set when a chunk starts before all chunks of the earlier kernels are done
# (``before`` of them: counted in flags[1]), flags[2] when a core_id sees steps out of order
SRC = """
void tick(int* restrict count, int* restrict flags, int step, int before, int core_id) {
  if (__atomic_load_n(&flags[1], __ATOMIC_ACQUIRE) < before) flags[0] = 1;
  if (count[64 + core_id] > step) flags[2] = 1;
  count[core_id] += 1;
  count[64 + core_id] = step;
  volatile int spin = 0; for (int i = 0; i < (core_id * 37 + step) % 300; i++) spin += i;  /* uneven chunks */
  __atomic_add_fetch(&flags[1], 1, __ATOMIC_ACQ_REL);
}
"""


def tick() -> CPUProgram:
    return CPUProgram("tick", ClangCompiler().compile(SRC))


class Busy:
    """Threads spinning in Python (two per core): the pool's workers get descheduled now and then."""

    def __init__(self, n: int) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._spin, daemon=True) for _ in range(n)]

    def _spin(self) -> None:
        x = 0
        while not self.stop.is_set():
            x += 1

    def __enter__(self) -> Busy:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def arrays() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(128, np.int32), np.zeros(3, np.int32)


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_each_core_id_runs_once_per_call(threads):
    prg = tick()
    count, flags = arrays()
    with Busy(2):
        for step in range(300):
            run_on_cores(prg.fxn, (count.ctypes.data, flags.ctypes.data, step, step * threads), threads)
    np.testing.assert_array_equal(count[:threads], 300)
    np.testing.assert_array_equal(count[threads:64], 0)
    assert list(flags) == [0, 300 * threads, 0]


@pytest.mark.parametrize("busy", [0, 2])
def test_graph_of_split_kernels_runs_each_core_id_once_in_order(busy):
    prg = tick()
    count, flags = arrays()
    splits = [2, 1, 3, 2, 8, 2, 1, 5] * 25
    before = np.concatenate([[0], np.cumsum(splits)[:-1]])
    graph = cpu.NativeGraph.build([(prg, (count.ctypes.data, flags.ctypes.data, step, int(before[step])), t)
                                   for step, t in enumerate(splits)])
    assert graph is not None
    with Busy(busy):
        graph.run()
    want = np.zeros(8, np.int32)
    for t in splits:
        want[:t] += 1
    np.testing.assert_array_equal(count[:8], want)
    assert list(flags) == [0, sum(splits), 0]
