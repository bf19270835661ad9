"""`tg gguf info` as a user runs it (a subprocess of the installed `tg`), and the plugin module itself."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tg_gguf import plugin
from tg_gguf_testutil import small_builder, smollm2_reader, write

import tgcore


def tg(*args: str) -> subprocess.CompletedProcess:
    """Run the installed ``tg`` script (the one beside this interpreter) as a user would."""
    script = Path(sys.executable).with_name("tg")
    if not script.exists():  # an interpreter outside its environment's bin/: same entry function
        cmd = [sys.executable, "-c", "import sys; from tgcore.cli import main; sys.exit(main(sys.argv[1:]))"]
    else:
        cmd = [str(script)]
    env = dict(os.environ, TG_STRICT_PLUGINS="1")
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, env=env)


def test_info_on_smollm2():
    path, reader = smollm2_reader()
    out = tg("gguf", "info", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = dict(line.split(None, 1) if "  " not in line else map(str.strip, line.split("  ", 1))
                 for line in out.stdout.splitlines()[:8])
    field = lambda key: reader.fields[key].contents()
    assert lines["architecture"] == field("general.architecture") == "llama"
    assert lines["name"] == field("general.name")
    assert lines["context length"] == str(field("llama.context_length"))
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    assert lines["tokenizer"] == f"{field('tokenizer.ggml.model')} ({n_tokens} tokens)"
    params = sum(int(t.n_elements) for t in reader.tensors)
    assert lines["parameters"].startswith(f"{params:,} ")
    mix: dict[str, list[int]] = {}
    for t in reader.tensors:
        row = mix.setdefault(t.tensor_type.name, [0, 0])
        row[0] += 1
        row[1] += int(t.n_bytes)
    text = out.stdout
    for name, (count, nbytes) in mix.items():
        assert any(line.split()[:3] == [name, str(count), f"{nbytes:,}"] for line in text.splitlines()), name
    assert "token_embd.weight" not in text


def test_info_tensors_table():
    path, reader = smollm2_reader()
    out = tg("gguf", "info", "--tensors", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    table = lines[lines.index(next(line for line in lines if line.split() == ["name", "type", "shape", "bytes"])) + 1:]
    rows = {line.split()[0]: line.split()[1:] for line in table}
    assert len(rows) == len(reader.tensors)
    for t in reader.tensors:
        shape = "x".join(str(int(d)) for d in reversed(t.shape.tolist()))
        assert rows[t.name] == [t.tensor_type.name, shape, f"{int(t.n_bytes):,}"], t.name


def test_info_on_small_file(tmp_path):
    out = tg("gguf", "info", "--tensors", str(write(tmp_path, small_builder().build().data)))
    assert out.returncode == 0, out.stderr
    assert "tiny ☃" in out.stdout and "context length  128" in out.stdout
    assert "tokenizer       - (3 tokens)" not in out.stdout  # tokens here are not tokenizer.ggml.tokens


@pytest.mark.parametrize("case", ["corrupt", "missing", "not_gguf", "directory", "truncated"])
def test_info_errors_are_one_line(tmp_path, case):
    data = small_builder().build().data
    path = {
        "corrupt": lambda: write(tmp_path, data[:24] + b"\xff" * 8 + data[32:]),
        "missing": lambda: tmp_path / "nope.gguf",
        "not_gguf": lambda: write(tmp_path, b"hello world\n", "x.gguf"),
        "directory": lambda: tmp_path,
        "truncated": lambda: write(tmp_path, data[:100]),
    }[case]()
    out = tg("gguf", "info", str(path))
    assert out.returncode == 1
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("tg gguf info: ")
    assert "Traceback" not in out.stderr
    if case in ("corrupt", "not_gguf", "truncated"):
        assert "invalid GGUF at byte" in out.stderr
    if case == "missing":
        assert "no such file" in out.stderr


def test_gguf_without_subcommand_prints_usage():
    out = tg("gguf")
    assert out.returncode == 2 and "info" in out.stderr


def test_plugin_module_is_cheap_to_import():
    code = ("import sys; import tgcore; before = set(sys.modules); import tg_gguf.plugin; "
            "new = set(sys.modules) - before; "
            "bad = [m for m in new if m.split('.')[0] in ('numpy', 'gguf', 'mmap_x')]; "
            "assert not bad, bad; assert 'tg_gguf.quants' not in new and 'tg_gguf.cli' not in new, new")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_plugin_hooks_register_with_a_fresh_host(tmp_path):
    from tgcore.plugins.manager import PluginHost
    host = PluginHost(entry_points=[], env={"TG_STRICT_PLUGINS": "1"}).load()
    info = host.add_plugin(plugin, "gguf", "tg-gguf", "0")
    assert info.ok, info.status
    (entry,) = [e for e in host.registry.loaders if e.name == "gguf"]
    assert entry.suffixes == (".gguf",) and entry.magic == (b"GGUF",)
    gf = entry.load(str(write(tmp_path, small_builder().build().data)))
    assert gf.metadata["general.architecture"] == "llama"
    with pytest.raises(TypeError, match="no options"):
        entry.load(str(tmp_path / "model.gguf"), device="CPU")
    assert plugin.TG_HOOKSPEC_VERSION == tgcore.HOOKSPEC_VERSION
