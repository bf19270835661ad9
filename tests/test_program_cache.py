"""The disk cache of generated programs (``engine.programs``): a later process skips code generation for a kernel it
met before; any change to what the program depends on misses; corrupt or stale entries are warned about and
replaced. Results are checked against numpy (integer-valued inputs, so exact). Every test has its own TG_CACHE_DIR
and no compiled kernels from earlier tests ("a new process")."""
import json
import warnings

import numpy as np
import pytest

import tgcore
from tgcore.codegen import prepare_kernel
from tgcore.codegen.heuristic import heuristic_opts
from tgcore.engine import beam, programs, realize
from tgcore.engine.programs import ProgramStats
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

RNG = np.random.default_rng(0)
A = RNG.integers(-3, 4, (64, 48)).astype(np.float32)
B = RNG.integers(-3, 4, (48, 32)).astype(np.float32)


def computed(device: str = "CPU") -> np.ndarray:
    return ((Tensor(A, device=device) @ Tensor(B, device=device)).relu() * 2).numpy()


EXPECTED = np.maximum(A @ B, 0) * 2


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    for flag in ("TG_PROGRAM_CACHE", "BEAM", "TG_SPEC", "TG_PM_INTERP", "TG_REWRITE_LOG", "DEBUG", "VIZ"):
        monkeypatch.delenv(flag, raising=False)  # (CI runs with TG_SPEC=1, which reads no stored program)
    new_process(monkeypatch)


def new_process(monkeypatch) -> None:
    """As in a new process: no compiled kernels, no memoized BEAM lookups (the files stay)."""
    monkeypatch.setattr(realize, "_runners", {})
    beam.winners.forget()


@pytest.fixture
def generated(monkeypatch) -> list:
    """The kernels code generation runs for (its calls from ``realize`` are counted)."""
    calls: list = []
    real = realize.get_program

    def counting(ast, *args, **kwargs):
        calls.append(ast)
        return real(ast, *args, **kwargs)
    monkeypatch.setattr(realize, "get_program", counting)
    return calls


def entries(tmp_path) -> list:
    return sorted((tmp_path / "programs").glob("*/*.json"))


@pytest.mark.parametrize("device", ["CPU", "CPU:X86", "PYTHON"])
def test_a_later_process_runs_no_code_generation(device, tmp_path, monkeypatch, generated):
    if device == "CPU:X86":
        pytest.importorskip("tg_x86")
    np.testing.assert_array_equal(computed(device), EXPECTED)
    made = len(generated)
    assert made >= 1 and len(entries(tmp_path)) == made
    new_process(monkeypatch)
    hits = ProgramStats.hits
    np.testing.assert_array_equal(computed(device), EXPECTED)
    assert len(generated) == made  # nothing generated again
    assert ProgramStats.hits == hits + made


@pytest.mark.parametrize("change", ["version", "renderer setting", "threads", "code"])
def test_a_changed_key_part_misses(change, tmp_path, monkeypatch, generated):
    computed()
    made = len(generated)
    new_process(monkeypatch)
    dev = open_device("CPU")
    if change == "version":
        monkeypatch.setattr(tgcore, "__version__", tgcore.__version__ + ".post1")
    elif change == "renderer setting":  # (what code generation reads from the renderer; a program made otherwise)
        monkeypatch.setattr(dev.renderer, "unrolled_trips", dev.renderer.unrolled_trips + 8, raising=False)
    elif change == "threads":
        monkeypatch.setattr(dev, "threads", dev.threads + 1, raising=False)
    else:  # another tgcore source
        monkeypatch.setattr(programs, "_code_digests", {k: "0" * 64 for k in programs._code_digests})
    np.testing.assert_array_equal(computed(), EXPECTED)
    assert len(generated) == 2 * made
    assert len(entries(tmp_path)) == 2 * made  # stored under the new key beside the old


def test_a_corrupt_entry_is_ignored_with_a_warning_and_replaced(tmp_path, monkeypatch, generated):
    computed()
    files = entries(tmp_path)
    good = {f: f.read_bytes() for f in files}
    files[0].write_bytes(b"not json")
    body = json.loads(good[files[-1]])
    body["spec"]["text" if "text" in body["spec"] else "base64"] = "int main;"  # edited: the checksum fails
    files[-1].write_text(json.dumps(body))
    new_process(monkeypatch)
    made = len(generated)
    with pytest.warns(UserWarning, match="program cache entry") as caught:
        np.testing.assert_array_equal(computed(), EXPECTED)
    reasons = " ".join(str(w.message) for w in caught)
    assert "not valid JSON" in reasons and "checksum" in reasons
    assert len(generated) == made + len({files[0], files[-1]})
    for f in files:  # replaced by valid entries
        json.loads(f.read_bytes())
    new_process(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(computed(), EXPECTED)


def test_an_entry_of_another_key_is_ignored(tmp_path, monkeypatch, generated):
    computed()
    files = entries(tmp_path)
    if len(files) < 2:
        pytest.skip("one kernel only")
    files[1].write_bytes(files[0].read_bytes())  # a valid entry in the wrong place
    new_process(monkeypatch)
    with pytest.warns(UserWarning, match="another key"):
        np.testing.assert_array_equal(computed(), EXPECTED)


def test_a_beam_winner_stored_later_makes_the_entry_stale(tmp_path, monkeypatch, generated):
    computed()
    made = len(generated)
    dev = open_device("CPU")
    t = Tensor.empty(*A.shape, device="CPU") @ Tensor.empty(*B.shape, device="CPU")
    kernel = prepare_kernel(create_schedule([t.uop], "CPU")[0][-1].ast, dev.renderer)
    key = beam.cache_key(dev.name, kernel, dev.renderer, dev.threads)
    assert key is not None
    opts = heuristic_opts(kernel.ast, dev.renderer, dev.threads, kernel.work)[:1]  # another list than the heuristic's
    beam.winners.store(key, beam.Winner(tuple(opts), 1), {})
    new_process(monkeypatch)
    hits = beam.BeamStats.hits
    with pytest.warns(UserWarning, match="BEAM winner"):
        np.testing.assert_array_equal(computed(), EXPECTED)
    assert len(generated) > made and beam.BeamStats.hits > hits  # generated again, with the winner


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch, generated):
    monkeypatch.setenv("TG_PROGRAM_CACHE", "0")
    computed()
    assert entries(tmp_path) == []
    made = len(generated)
    new_process(monkeypatch)
    computed()
    assert len(generated) == 2 * made


def test_a_rewrite_trace_sees_the_passes_of_a_cached_kernel(tmp_path, monkeypatch, generated):
    """``VIZ=1`` records what code generation does: with a trace active the cache is not read."""
    from tgcore.uop import trace
    computed()
    made = len(generated)
    new_process(monkeypatch)
    monkeypatch.setattr(trace, "ACTIVE", trace.Tracer())
    np.testing.assert_array_equal(computed(), EXPECTED)
    assert len(generated) == 2 * made and len(trace.ACTIVE.kernels) >= made


def test_spec_checks_see_the_passes_of_a_cached_kernel(tmp_path, monkeypatch, generated):
    """``TG_SPEC=1`` checks every rewrite of code generation: the cache is not read then."""
    computed()
    made = len(generated)
    new_process(monkeypatch)
    monkeypatch.setenv("TG_SPEC", "1")
    np.testing.assert_array_equal(computed(), EXPECTED)
    assert len(generated) == 2 * made


# A few kernel kinds a model meets (a matmul with its epilogue, a softmax's reductions, a jitted KV-cache write at
# a bound position and the sum that reads it), run in a real process that prints what it computed and what the
# program cache did. Each process gets its own string-hash seed: a key part that depended on set or dict order,
# ids or addresses would differ between them.
KINDS_SCRIPT = """
import json, sys
import numpy as np
import tgcore
from tgcore.engine.programs import ProgramStats
from tgcore.tensor import Tensor
from tgcore.uop import UOp
rng = np.random.default_rng(0)
a, b = rng.integers(-3, 4, (64, 48)).astype(np.float32), rng.integers(-3, 4, (48, 32)).astype(np.float32)
out = {"mm": ((Tensor(a, device=sys.argv[1]) @ Tensor(b, device=sys.argv[1])).relu() * 2).numpy().tolist(),
       "softmax": Tensor(a, device=sys.argv[1]).softmax(-1).numpy().tolist()}
pos = UOp.variable("pos", 0, 7)
cache = Tensor(np.zeros((8, 2), np.float32), device=sys.argv[1])
@tgcore.jit
def step(x, p):
    cache.shrink(((p, p + 1), None)).assign(x.reshape(1, 2))
    return cache.sum(0)
out["kv"] = [step(Tensor(np.full(2, p + 1, np.float32), device=sys.argv[1]), pos.bind(p)).numpy().tolist()
             for p in range(4)]
from tgcore.engine.realize import CompileCounter
out["generated"], out["hits"], out["counted"] = ProgramStats.misses, ProgramStats.hits, CompileCounter.generated
print(json.dumps(out))
"""


def run_kinds(device: str, hash_seed: str) -> dict:
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-c", KINDS_SCRIPT, device], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("device", ["CPU", "CPU:X86"])
def test_a_second_process_generates_no_program_for_the_same_kernels(device, tmp_path):
    if device == "CPU:X86":
        pytest.importorskip("tg_x86")
    first, second = run_kinds(device, "1"), run_kinds(device, "2")
    kv = np.zeros((8, 2), np.float32)
    for p, total in enumerate(first["kv"]):
        kv[p] = p + 1
        np.testing.assert_array_equal(total, kv.sum(0))
    np.testing.assert_array_equal(first["mm"], EXPECTED)
    e = np.exp(A - A.max(-1, keepdims=True))
    np.testing.assert_allclose(first["softmax"], e / e.sum(-1, keepdims=True), rtol=1e-5)
    assert first["generated"] >= 4 and first["hits"] == 0
    assert second["generated"] == 0 and second["hits"] == first["generated"]
    assert first["counted"] == first["generated"] and second["counted"] == 0  # (CompileCounter.generated agrees)
    assert {k: second[k] for k in ("mm", "softmax", "kv")} == {k: first[k] for k in ("mm", "softmax", "kv")}
