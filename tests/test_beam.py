"""BEAM: a search times candidate opts lists and stores the fastest; later processes reuse it without timing.

Results are checked against numpy (integer-valued inputs, so exact); the cache against files written and
corrupted by hand. Every test has its own TG_CACHE_DIR and no compiled kernels from earlier tests."""
import copy
import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest

import tgcore
from tgcore.codegen import prepare_kernel
from tgcore.codegen.optimize import OptOps
from tgcore.codegen.search import candidates
from tgcore.engine import beam, realize
from tgcore.engine.beam import BeamStats
from tgcore.helpers import Context
from tgcore.runtime.cpufeatures import AVX512, cpu_features
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

RNG = np.random.default_rng(0)
A = RNG.integers(-3, 4, (64, 48)).astype(np.float32)
B = RNG.integers(-3, 4, (48, 32)).astype(np.float32)


def matmul() -> np.ndarray:
    return (Tensor(A, device="CPU") @ Tensor(B, device="CPU")).numpy()


def elementwise() -> np.ndarray:
    return (Tensor(A, device="CPU") * 3 - 1).relu().numpy()


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TG_PROGRAM_CACHE", "0")  # (what code generation does with opts is tested here, not its cache)
    forget_compiled(monkeypatch)


def forget_compiled(monkeypatch) -> None:
    """As in a new process: no compiled kernels, no memoized cache lookups (the files stay)."""
    monkeypatch.setattr(realize, "_runners", {})
    beam.winners.forget()


def entries(tmp_path) -> list:
    return sorted((tmp_path / "beam").glob("*/*.json"))


def matmul_kernel():
    """The prepared matmul kernel, its renderer and its cache key on CPU."""
    dev = open_device("CPU")
    t = Tensor.empty(*A.shape, device="CPU") @ Tensor.empty(*B.shape, device="CPU")
    kernel = prepare_kernel(create_schedule([t.uop], "CPU")[0][-1].ast, dev.renderer)
    return kernel, dev.renderer, beam.cache_key(dev.name, kernel, dev.renderer, dev.threads)


def write_entry(path, body: dict) -> None:
    """An entry as the format says: the body plus sha256 of its sorted-keys JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    checksum = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    path.write_text(json.dumps({**body, "checksum": checksum}))


def test_search_picks_a_list_and_the_results_stay_exact(tmp_path):
    before = BeamStats.timed
    with Context(BEAM=4):
        np.testing.assert_array_equal(matmul(), A @ B)
        np.testing.assert_array_equal(elementwise(), np.maximum(A * 3 - 1, 0))
    assert BeamStats.timed - before >= 4  # each kernel timed at least the heuristic's and the empty list
    stored = [json.loads(p.read_text()) for p in entries(tmp_path)]
    assert sorted(e["meta"]["kernel"] for e in stored) == ["E_64_48", "r_64_32_48"]
    for e in stored:
        assert e["budget"] == 4 and all(op in OptOps.__members__ for op, _, _ in e["opts"])
        assert e["meta"]["tried"] >= 2 and e["meta"]["time_s"] > 0


def test_candidates_start_with_the_heuristic_then_nothing_and_are_distinct():
    kernel, renderer, _ = matmul_kernel()
    lists = candidates(kernel.ast, renderer, 2, kernel.work, 12)
    from tgcore.codegen.heuristic import heuristic_opts
    assert lists[0] == heuristic_opts(kernel.ast, renderer, 2, kernel.work) and lists[1] == []
    assert len({tuple(o) for o in lists}) == len(lists) == 12
    row_tiles = {o.amount for opts in lists for o in opts if o.op is OptOps.UNROLL and o.axis == 0}
    assert len(row_tiles) >= 3  # several register tiles among them


def test_a_stored_winner_is_reused_without_timing(tmp_path, monkeypatch, capsys):
    with Context(BEAM=3):
        matmul()
    (path,) = entries(tmp_path)
    winner = json.loads(path.read_text())["opts"]
    forget_compiled(monkeypatch)
    timed, hits, searches = BeamStats.timed, BeamStats.hits, BeamStats.searches
    capsys.readouterr()
    with Context(BEAM=0, DEBUG=3):
        out = matmul()
    np.testing.assert_array_equal(out, A @ B)
    assert (BeamStats.timed, BeamStats.searches, BeamStats.hits) == (timed, searches, hits + 1)
    printed = f"r_64_32_48: opts [{', '.join(f'{op}({axis},{amount})' for op, axis, amount in winner)}]"
    assert printed in capsys.readouterr().out


def test_a_larger_beam_searches_again(tmp_path, monkeypatch):
    with Context(BEAM=2):
        matmul()
    forget_compiled(monkeypatch)
    searches = BeamStats.searches
    with Context(BEAM=3):
        matmul()
    assert BeamStats.searches == searches + 1
    (path,) = entries(tmp_path)
    assert json.loads(path.read_text())["budget"] == 3


def test_a_miss_without_beam_uses_the_heuristic_and_times_nothing(tmp_path):
    timed, hits = BeamStats.timed, BeamStats.hits
    np.testing.assert_array_equal(matmul(), A @ B)
    assert (BeamStats.timed, BeamStats.hits) == (timed, hits)
    assert entries(tmp_path) == []


def test_the_key_names_cpu_renderer_isa_and_version(monkeypatch):
    kernel, renderer, key = matmul_kernel()
    threads = open_device("CPU").threads

    def digest(r=renderer) -> str:
        return beam.cache_key("CPU", kernel, r, threads).digest
    assert digest() == key.digest  # stable
    assert beam.cache_key("CPU:X86", kernel, renderer, threads).digest != key.digest
    assert beam.cache_key("CPU", kernel, renderer, threads + 1).digest != key.digest
    renamed = copy.copy(renderer)
    renamed.name = "C2"
    subclassed = copy.copy(renderer)
    subclassed.__class__ = type("OtherRenderer", (type(renderer),), {})
    assert len({digest(), digest(renamed), digest(subclassed)}) == 3
    with monkeypatch.context() as m:
        other_cpu = dataclasses.replace(cpu_features(), brand="Another CPU")
        m.setattr(beam, "cpu_features", lambda: other_cpu)
        assert digest() != key.digest
    with monkeypatch.context() as m:
        m.setattr(tgcore, "__version__", tgcore.__version__ + ".post1")
        assert digest() != key.digest
    if cpu_features().isa_level is AVX512:
        with monkeypatch.context() as m:  # the other level than the one the key was made with
            m.setenv("TG_ISA", "avx512" if os.environ.get("TG_ISA") == "avx2" else "avx2")
            assert digest() != key.digest
    if renderer.compiler is not None and renderer.compiler.cache_identity() is not None:
        with monkeypatch.context() as m:  # e.g. another gcc, or flags lowered by the ISA check
            m.setattr(type(renderer.compiler), "cache_identity", lambda self: "another compiler")
            assert digest() != key.digest
    assert digest() == key.digest


def test_another_version_misses(tmp_path, monkeypatch):
    with Context(BEAM=2):
        matmul()
    forget_compiled(monkeypatch)
    monkeypatch.setattr(tgcore, "__version__", tgcore.__version__ + ".post1")
    hits = BeamStats.hits
    matmul()
    assert BeamStats.hits == hits


def entry_with(**changes):
    """Writes a well-formed entry for the key, with ``changes`` to its body."""
    def write(path, body):
        write_entry(path, {**body, **changes})
    return write


def edited_after_checksum(path, body):
    write_entry(path, body)
    path.write_text(json.dumps({**json.loads(path.read_text()), "opts": [["UPCAST", 1, 4]]}))


def truncated(path, body):
    write_entry(path, body)
    path.write_bytes(path.read_bytes()[:40])


CORRUPT = {
    "not JSON": lambda path, body: path.write_bytes(b"{not json"),
    "truncated": truncated,
    "not an entry": lambda path, body: path.write_text("[1, 2, 3]"),
    "bad checksum": edited_after_checksum,
    "unknown op": entry_with(opts=[["WARP", 0, 2]]),
    "malformed opt": entry_with(opts=[["UPCAST", "1", 8]]),
    "another key": entry_with(key="f" * 64),
    "another format": entry_with(format=beam.ENTRY_FORMAT + 1),
    "stale opts": entry_with(opts=[["UPCAST", 0, 7]]),  # 7 does not divide the 64 rows
    "axis out of range": entry_with(opts=[["UNROLL", 9, 2]]),
}


@pytest.mark.parametrize("kind", CORRUPT)
def test_a_corrupt_or_stale_entry_warns_and_the_heuristic_is_used(kind, tmp_path):
    _, _, key = matmul_kernel()
    path = beam.winners.path(key.digest)
    path.parent.mkdir(parents=True)
    CORRUPT[kind](path, {"format": beam.ENTRY_FORMAT, "key": key.digest, "opts": [["UPCAST", 1, 8]], "budget": 4,
                         "meta": {}})
    hits = BeamStats.hits
    with pytest.warns(UserWarning, match=path.name):
        out = matmul()
    np.testing.assert_array_equal(out, A @ B)
    assert BeamStats.hits == hits


def test_a_well_formed_entry_is_used(tmp_path, capsys):
    """The same entry as above, unchanged: no warning, and its list is the one compiled."""
    _, _, key = matmul_kernel()
    path = beam.winners.path(key.digest)
    write_entry(path, {"format": beam.ENTRY_FORMAT, "key": key.digest, "opts": [["UPCAST", 1, 8]], "budget": 4,
                       "meta": {}})
    hits = BeamStats.hits
    with Context(DEBUG=3):
        np.testing.assert_array_equal(matmul(), A @ B)
    assert BeamStats.hits == hits + 1
    assert "r_64_32_48: opts [UPCAST(1,8)]" in capsys.readouterr().out


def test_beam_replaces_a_corrupt_entry(tmp_path):
    _, _, key = matmul_kernel()
    path = beam.winners.path(key.digest)
    path.parent.mkdir(parents=True)
    path.write_text("garbage")
    with pytest.warns(UserWarning, match="not valid JSON"), Context(BEAM=2):
        np.testing.assert_array_equal(matmul(), A @ B)
    assert json.loads(path.read_text())["key"] == key.digest


def test_a_long_search_shows_progress_and_a_summary(monkeypatch, capsys):
    monkeypatch.setattr(beam, "PROGRESS_AFTER", 0.0)
    with Context(BEAM=3):
        matmul()
    err = capsys.readouterr().err
    assert "BEAM r_64_32_48: 1/3 candidates" in err and "3/3 candidates" in err
    assert "BEAM r_64_32_48 on CPU: [" in err and "candidates in" in err


def test_a_short_search_is_quiet(capsys, monkeypatch):
    """A search that ends before PROGRESS_AFTER prints nothing (the threshold is raised so that a busy machine,
    where compiling the candidates takes seconds, does not decide the outcome)."""
    monkeypatch.setattr(beam, "PROGRESS_AFTER", 600.0)
    with Context(BEAM=2):
        matmul()
    assert "BEAM" not in capsys.readouterr().err


def test_failing_and_slow_candidates_are_skipped(tmp_path, monkeypatch, capsys):
    """A candidate that fails to lower is skipped (noted at DEBUG>=2); one still running at its cap ends the search,
    the fastest so far winning."""
    real_lower, real_build = beam.lower_kernel, realize.build_program
    calls = []

    def lower(kernel, renderer, opts):
        calls.append(opts)
        if len(calls) == 2:
            raise RuntimeError("this list does not render")
        return real_lower(kernel, renderer, opts)

    def build(dev, spec, disk_cache=True):
        program = real_build(dev, spec, disk_cache)
        if len(calls) < 3:
            return program

        def slow(*args, **kwargs):
            import time
            time.sleep(0.5)
            return program(*args, **kwargs)
        return slow
    monkeypatch.setattr(beam, "lower_kernel", lower)
    monkeypatch.setattr(realize, "build_program", build)
    monkeypatch.setattr(beam, "TIME_CAP", 0.05)
    monkeypatch.setattr(beam, "TIME_CAP_FACTOR", 0)
    with Context(BEAM=4, DEBUG=2):
        matmul()
    err = capsys.readouterr().err
    assert "candidate 2 failed: []: RuntimeError: this list does not render" in err
    assert len(calls) == 3 and "stopped at candidate 3" in err
    (path,) = entries(tmp_path)
    entry = json.loads(path.read_text())
    assert entry["meta"]["tried"] == 1 and "stopped at candidate 3" in entry["meta"]["note"]
    forget_compiled(monkeypatch)
    monkeypatch.setattr(beam, "lower_kernel", real_lower)
    monkeypatch.setattr(realize, "build_program", real_build)
    np.testing.assert_array_equal(matmul(), A @ B)
