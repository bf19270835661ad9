"""Profiles (PROFILE=1, `tg profile`), performance counters and the `tg viz` printers."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tgcore.engine import profile
from tgcore.runtime.perfcounters import COUNTERS, Counter, ThreadCounters, perf_event_open
from tgcore.viz import VizError, chrome_trace, diff_table, kernel_rows, load_profile, pick, pmc_table, profile_table

PROGRAM = textwrap.dedent("""
    import numpy as np
    import tgcore
    from tgcore import Tensor
    a = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
    print(float((a @ a).sum().numpy()))
    step = tgcore.jit(lambda x: (x * 2 + 1).sum().realize())
    for _ in range(6):
        step(Tensor(np.ones(100, np.float32)).realize())
""")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real profile of PROGRAM, recorded on the CPU device in a child process."""
    folder = tmp_path_factory.mktemp("profile")
    out = folder / "p.json"
    env = {**os.environ, "PROFILE": "1", "TG_PROFILE_OUT": str(out), "TG_PROFILE_QUIET": "1", "DEV": "CPU",
           "TG_CACHE_DIR": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == float((lambda a: (a @ a).sum())(__import__("numpy").arange(64.).reshape(8, 8)))
    return load_profile(out)


def test_profile_file_holds_every_run(recorded: dict) -> None:
    assert recorded["format"] == "tgcore-profile" and recorded["version"] == 1
    kinds = [e["kind"] for e in recorded["events"]]
    assert "compile" in kinds and "kernel" in kinds
    # the JIT: the first call runs normally, the second captures, the other four replay
    assert kinds.count("jit_capture") == 1 and kinds.count("jit_replay") == 4
    jit_rows = recorded["jit_kernels"]
    assert [(k["kind"], k["count"]) for k in jit_rows] == [("reduce", 4)]
    assert jit_rows[0]["mem"] == 4 * (100 * 4 + 4)  # four replays, each reads 100 floats and writes one
    for e in recorded["events"]:
        assert e["dur_ns"] >= 0 and e["start_ns"] >= 0
    starts = [e["start_ns"] for e in recorded["events"] if e["kind"] == "compile"]
    assert starts == sorted(starts)


def test_off_runs_no_recording_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no profile active the engine neither times kernels nor calls into a profiler (eager runs, a JIT
    capture and replays, a compile)."""
    import numpy as np

    import tgcore
    from tgcore import Tensor
    from tgcore.engine.stats import KernelTimes
    from tgcore.helpers import Context

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a profiler method ran with profiling off")
    for name in ("kernel", "span", "counters_before", "counters_after", "now_ns"):
        monkeypatch.setattr(profile.Profiler, name, refuse)
    monkeypatch.setattr(profile, "ACTIVE", None)
    with Context(DEBUG=0):
        assert not KernelTimes.wanted()
        x = Tensor(np.arange(7, dtype=np.float32))
        np.testing.assert_array_equal((x * 3 + 1).numpy(), np.arange(7) * 3 + 1)
        step = tgcore.jit(lambda t: (t * 2 - 5).sum().realize())
        for _ in range(4):
            assert step(Tensor(np.ones(9, np.float32)).realize()).item() == -27.0


def test_software_counters_count_this_process() -> None:
    counters = ThreadCounters(["task-clock", "page-faults"])
    before = counters.read()
    if "task-clock" in counters.refused:
        pytest.skip(f"the kernel refuses perf counters here: {counters.refused['task-clock']}")
    total = sum(i * i for i in range(200_000))  # some user-space work on this thread
    after = counters.read()
    counters.close()
    assert total > 0
    assert after["task-clock"] - before["task-clock"] > 1_000_000  # well over a millisecond of CPU time


def test_refused_counters_are_left_out_with_the_reason() -> None:
    def refuse_hardware(counter: Counter, tid: int) -> int:
        if counter.type != 1:  # PERF_TYPE_SOFTWARE works, the PMU is refused
            raise OSError(errno.EACCES, "Permission denied")
        return perf_event_open(counter, tid)
    counters = ThreadCounters(["cycles", "instructions", "task-clock"], open_fn=refuse_hardware)
    values = counters.read()
    counters.close()
    assert set(counters.refused) == {"cycles", "instructions"}
    assert "perf_event_paranoid" in counters.refused["cycles"]
    assert "cycles" not in values
    with pytest.raises(ValueError, match="unknown counter"):
        ThreadCounters(["cyclez"])


def test_profiler_with_an_injected_refusal_still_profiles() -> None:
    class Refusing:
        refused = {"cycles": "not permitted (see /proc/sys/kernel/perf_event_paranoid)"}

        def read(self) -> dict[str, int]:
            return {"task-clock": 0}

    class Dev:
        name = "FAKE"

        def profile_counters(self) -> Refusing:
            return Refusing()

    p = profile.Profiler()
    probe = p.counters_before(Dev())
    p.kernel("k", "FAKE", "elementwise", 1e-3, ops=10, mem=20, counters=p.counters_after(probe))
    data = p.to_json()
    assert data["devices"]["FAKE"]["refused"] == Refusing.refused
    assert data["events"][0]["counters"] == {"task-clock": 0}
    assert "not counted: cycles: not permitted" in pmc_table(data, None, None)


def synthetic() -> dict:
    p = profile.Profiler(counters=False)
    for _ in range(2):
        p.kernel("gemm", "CPU", "reduce", 0.5, ops=2_000_000_000, mem=1_000_000,
                 counters={"cycles": 100, "instructions": 250})
    p.kernel("add", "CPU", "elementwise", 0.25, ops=0, mem=3_000_000_000)
    p.kernel("add", "CPU", "elementwise", 0.001, ops=0, mem=3_000_000, jit=True)
    return json.loads(json.dumps(p.to_json()))


def test_kernel_table_figures() -> None:
    data = synthetic()
    rows = {r.name: r for r in kernel_rows(data)}
    assert rows["gemm"].count == 2 and rows["gemm"].total_ns == 1_000_000_000
    assert rows["add"].count == 2 and rows["add"].jit
    table = profile_table(data, {"gflops": 8.0, "gbps": 24.0})
    gemm_line = next(line for line in table.splitlines() if "| gemm" in line)
    # 4e9 FLOP in 1 s: 4 GFLOPS, half of an 8 GFLOPS peak; 2 MB in 1 s: 0.00 GB/s
    assert "4.00" in gemm_line and "50% fma" in gemm_line
    add_line = next(line for line in table.splitlines() if "| add" in line)
    # 3.003 GB in 0.251 s: 11.96 GB/s, 50% of 24 GB/s
    assert "11.96" in add_line and "50% bw" in add_line
    pmc = pmc_table(data, "gemm", None)
    header, _, row = pmc.splitlines()[:3]
    assert [c.strip() for c in header.split("|")[1:-1]] == ["kernel", "device", "runs", "cycles", "instructions", "ipc"]
    assert [c.strip() for c in row.split("|")[1:-1]] == ["gemm", "CPU", "2", "200", "500", "2.50"]


def test_unknown_names_get_the_closest_match() -> None:
    data = synthetic()
    with pytest.raises(VizError, match="did you mean 'gemm'"):
        pmc_table(data, "gem", None)
    with pytest.raises(VizError, match="did you mean 'instructions'"):
        pmc_table(data, None, ["instruction"])
    assert pick("cycles", list(COUNTERS), "counter") == "cycles"


def test_diff_compares_kernel_by_kernel() -> None:
    a = synthetic()
    b = synthetic()
    b["events"] = [e for e in b["events"] if e["name"] != "add"]
    b["jit_kernels"] = []
    b["events"][0]["dur_ns"] *= 3  # one of the two gemm runs: 1.5 s then 0.5 s, mean 1.0 s against 0.5 s
    text = diff_table(a, b)
    gemm = next(line for line in text.splitlines() if "CPU/gemm" in line)
    assert [c.strip() for c in gemm.split("|")[1:-1]] == ["CPU/gemm", "2", "500000.00", "2", "1000000.00", "2.00x"]
    add = next(line for line in text.splitlines() if "CPU/add" in line)
    assert [c.strip() for c in add.split("|")[1:-1]][3:] == ["-", "-", "-"]  # only in A


def test_chrome_trace_has_the_required_fields(recorded: dict) -> None:
    trace = json.loads(json.dumps(chrome_trace(recorded)))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and len(complete) == len(recorded["events"])
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(names) == {e["tid"] for e in complete}
    assert any(n.endswith("kernels") for n in names.values())


def test_bad_files_are_clear_errors(tmp_path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(VizError, match="not a readable profile"):
        load_profile(tmp_path / "junk.json")
    (tmp_path / "other.json").write_text('{"format": "something"}')
    with pytest.raises(VizError, match="not a tgcore profile"):
        load_profile(tmp_path / "other.json")
    with pytest.raises(VizError, match="no such profile"):
        load_profile(tmp_path / "missing.json")


def test_tg_profile_and_viz_commands(tmp_path) -> None:
    script = tmp_path / "s.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "TG_CACHE_DIR": str(tmp_path / "cache"), "DEV": "CPU"}
    out = tmp_path / "p.json"
    tg = [sys.executable, "-m", "tgcore.cli"]
    done = subprocess.run([*tg, "profile", "--no-peak", "--out", str(out), "--", sys.executable, str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| kernel" in done.stdout and "jit replay: 4 x" in done.stdout
    listed = subprocess.run([*tg, "viz", "list", str(out)], env=env, capture_output=True, text=True, timeout=60)
    assert "jit_replay" in listed.stdout and listed.returncode == 0
    wrong = subprocess.run([*tg, "viz", "pmc", str(out), "--item", "nope_kernel"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.startswith("tg: unknown kernel") and "Traceback" not in wrong.stderr
    exported = subprocess.run([*tg, "viz", "export", str(out), "--out", str(tmp_path / "t.json")], env=env,
                              capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0 and json.loads((tmp_path / "t.json").read_text())["traceEvents"]
