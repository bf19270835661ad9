"""``--kv-dtype`` of ``tg llm chat``, ``tg llm bench`` and ``tg serve llm``: the parsers take float16 (the default)
and float32 and refuse others with argparse's one-line error; the model each command builds has caches of the type
asked for (a tiny GGUF file: quick to load)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from tiny_gguf import TinySpec, write_tiny_gguf

COMMANDS = [("llm", "chat"), ("llm", "bench"), ("serve",)]


def parse(command: tuple[str, ...], *argv: str) -> argparse.Namespace:
    if command == ("serve",):
        from tg_llm.server import build_parser
        return build_parser().parse_args(list(argv))
    from tg_llm.cli import add_commands
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    return parser.parse_args([*command, *argv])


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_kv_dtype_flag_takes_float16_and_float32_only(command, capsys) -> None:
    from tg_llm.model import KV_DTYPE
    assert parse(command).kv_dtype == KV_DTYPE == "float16"
    assert parse(command, "--kv-dtype", "float32").kv_dtype == "float32"
    assert parse(command, "--kv-dtype", "float16").kv_dtype == "float16"
    with pytest.raises(SystemExit) as e:
        parse(command, "--kv-dtype", "int8")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--kv-dtype: invalid choice: 'int8'" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kv") / "tiny.gguf"
    write_tiny_gguf(TinySpec(arch="llama", n_layers=1), path)
    return path


def cache_types(model) -> set[str]:
    return {c.dtype.name for layer in model.layers for c in (layer.cache_k, layer.cache_v)}


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_each_command_builds_its_caches_of_the_type_asked_for(tiny_path: Path, kv_dtype: str) -> None:
    from tg_llm.cli import load, load_model
    from tg_llm.server import model_loader
    chat = parse(("llm", "chat"), "--kv-dtype", kv_dtype)
    model, _ = load(tiny_path, "CPU", 32, quiet=True, kv_dtype=chat.kv_dtype)
    assert cache_types(model) == {kv_dtype}
    model.close()
    bench = parse(("llm", "bench"), "--kv-dtype", kv_dtype)
    model = load_model(tiny_path, "CPU", 32, True, 1, None, kv_dtype=bench.kv_dtype)
    assert cache_types(model) == {kv_dtype}
    model.close()
    serve = parse(("serve",), "--kv-dtype", kv_dtype)
    model = model_loader(serve.kv_dtype, None)(tiny_path, device="CPU", max_context=32, progress=None, sequences=2)
    assert cache_types(model) == {kv_dtype}
    model.close()
