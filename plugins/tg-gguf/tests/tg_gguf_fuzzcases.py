"""Fuzz worker: ``python tg_gguf_fuzzcases.py SEED N`` mutates a small valid GGUF file N times.

Each mutant must either load (and then every tensor's bytes read and dequantize) or raise
``GGUFError``. Anything else (another exception, a case over its time limit) is printed as one
JSON line; the last line is a JSON summary. Runs in its own process, under an address-space
limit, so a crash, a hang or a huge allocation cannot take the test runner down with it.
"""
from __future__ import annotations

import json
import os
import random
import resource
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASE_SECONDS = 5.0
ADDRESS_SPACE = 3 << 30


class CaseTimeout(Exception):
    pass


def seed_file():
    from tg_gguf import GGMLType
    from tg_gguf_testutil import small_builder
    b = small_builder()
    b.tensor("q4_0.weight", (64, 2), GGMLType.Q4_0)
    b.tensor("q4_1.weight", (32,), GGMLType.Q4_1)
    b.tensor("bf16.weight", (3, 2), GGMLType.BF16)
    return b.build()


def mutate(rng: random.Random, built) -> bytes:
    data = bytearray(built.data)
    kind = rng.choice(["flip", "truncate", "length", "length", "length+truncate"])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
    if kind.startswith("length"):
        pos, size = rng.choice(built.length_fields)
        old = int.from_bytes(data[pos:pos + size], "little")
        top = 2 ** (8 * size)
        value = rng.choice([
            top - 1, top // 2, top // 2 - 1, 2**32, 2**32 + 1, rng.randrange(top),
            len(data) - pos + rng.randint(-16, 16), old + rng.randint(1, 64), max(0, old - rng.randint(1, 8)),
            0, old * 2, old * 1024,
        ]) % top
        data[pos:pos + size] = value.to_bytes(size, "little")
    if kind.endswith("truncate"):
        del data[rng.randrange(len(data)):]
    return bytes(data)


def run_case(data: bytes) -> None:
    import tg_gguf
    from tg_gguf.quants import DEQUANTIZERS, dequantize_numpy
    try:
        gf = tg_gguf.from_bytes(data)
    except tg_gguf.GGUFError as e:
        assert 0 <= e.offset <= len(data), f"offset {e.offset} outside the {len(data)}-byte file"
        assert f"at byte {e.offset}: " in str(e) and e.reason
        return
    for name, info in gf.tensor_info.items():
        raw = gf.tensor_bytes(name)
        assert len(bytes(raw)) == info.nbytes
        if info.type in DEQUANTIZERS:
            assert dequantize_numpy(info.type, raw, info.shape).shape == info.shape


def main() -> int:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    def on_alarm(signum, frame):
        raise CaseTimeout(f"case took over {CASE_SECONDS} s")
    signal.signal(signal.SIGALRM, on_alarm)
    import numpy  # noqa: F401  (imported before the cases so its start-up is not timed)
    built = seed_file()
    run_case(built.data)  # the seed itself must load
    rng = random.Random(seed)
    failures = loaded = 0
    for i in range(count):
        data = mutate(rng, built)
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            run_case(data)
        except BaseException as e:  # noqa: BLE001 - everything that is not GGUFError is a finding
            failures += 1
            print(json.dumps({"case": i, "error": f"{type(e).__name__}: {e}"[:500], "data": data.hex()}), flush=True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            import tg_gguf
            tg_gguf.from_bytes(data)
            loaded += 1
        except Exception:  # noqa: BLE001
            pass
    print(json.dumps({"cases": count, "failures": failures, "loaded": loaded}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
