"""Fuzz the reader: mutated files (byte flips, truncations, inflated length fields) load or raise GGUFError."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("tg_gguf_fuzzcases.py")


def test_fuzz_mutations_load_or_raise_gguf_error():
    count = int(os.environ.get("TG_FUZZ_EXAMPLES", "2000"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(WORKER), "1234", str(count)], capture_output=True, text=True,
                          timeout=60 + count * 0.05, env=env)
    assert proc.returncode == 0, f"fuzz worker died ({proc.returncode}): {proc.stderr[-3000:]}"
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]
    findings = lines[:-1]
    assert summary["cases"] == count
    assert not findings, "\n".join(f"case {f['case']}: {f['error']}\n  file: {f['data']}" for f in findings[:5])
    # the mutations must exercise both outcomes, or the fuzzer is not testing anything
    assert 0 < summary["loaded"] < count
