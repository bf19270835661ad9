"""Build llama.cpp's native `llama-bench`, `llama-server` and `llama-quantize` for benchmarks (never a dependency).

    python plugins/tg-llm/bench/build_llama_cpp.py [--sdist FILE] [--version 0.3.36] [--out DIR] [--jobs N]

The sources are the ones llama-cpp-python's sdist vendors (`pip download --no-binary :all:` fetches it when
`--sdist` is not given). The ISA flags are explicit, from this CPU's CPUID (tgcore.runtime.cpufeatures), never
`GGML_NATIVE`: a native build turns on AMX where the CPU advertises it, and on machines whose kernel does not grant
AMX state the tools die with SIGILL. Prints the three binaries' paths; `bench/llm.py --llama-bench PATH` and
`bench/serve.py --llama-server PATH` use them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tgcore.helpers import cache_dir, cpu_count
from tgcore.runtime.cpufeatures import cpu_features

DEFAULT_VERSION = "0.3.36"
TARGETS = ("llama-bench", "llama-server", "llama-quantize")

# ggml's CMake switch -> the CPUID feature (tgcore.runtime.cpufeatures names) it needs
ISA_SWITCHES = {
    "GGML_AVX": "avx", "GGML_AVX2": "avx2", "GGML_FMA": "fma", "GGML_F16C": "f16c", "GGML_AVX_VNNI": "avx_vnni",
    "GGML_AVX512": "avx512f", "GGML_AVX512_VBMI": "avx512vbmi", "GGML_AVX512_VNNI": "avx512_vnni",
    "GGML_AVX512_BF16": "avx512_bf16",
}
ALWAYS_OFF = ("GGML_NATIVE", "GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16", "LLAMA_CURL", "BUILD_SHARED_LIBS",
              "LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES")


def cmake_flags() -> list[str]:
    have = cpu_features().features
    flags = [f"-D{name}={'ON' if feature in have else 'OFF'}" for name, feature in ISA_SWITCHES.items()]
    flags.append(f"-DGGML_BMI2={'ON' if 'avx2' in have else 'OFF'}")  # (BMI2 comes with every AVX2 CPU we target)
    return flags + [f"-D{name}=OFF" for name in ALWAYS_OFF] + ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TOOLS=ON"]


def fetch_sdist(version: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
                    "--no-binary", ":all:", "-d", str(into), "-q"], check=True)
    (found,) = into.glob("llama_cpp_python-*.tar.gz")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python sdist (default: pip download it)")
    parser.add_argument("--version", default=DEFAULT_VERSION, help="llama-cpp-python version to download")
    parser.add_argument("--out", type=Path, help="build folder (default: TG_CACHE_DIR/llama.cpp/VERSION)")
    parser.add_argument("--jobs", type=int, default=cpu_count())
    args = parser.parse_args()
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            print(f"build_llama_cpp: {tool} is needed (apt-get install -y cmake g++)", file=sys.stderr)
            return 2
    out = args.out or cache_dir() / "llama.cpp" / args.version
    sources = out / "src"
    if not (sources / "CMakeLists.txt").exists():
        with tempfile.TemporaryDirectory() as tmp:
            sdist = args.sdist or fetch_sdist(args.version, Path(tmp))
            with tarfile.open(sdist) as tar:
                prefix = f"{tar.getnames()[0].split('/')[0]}/vendor/llama.cpp/"
                members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
                for m in members:
                    m.name = m.name[len(prefix):]
                tar.extractall(sources, members=[m for m in members if m.name], filter="data")
    build = out / "build"
    flags = cmake_flags()
    print("cmake " + " ".join(flags), flush=True)
    subprocess.run(["cmake", "-S", str(sources), "-B", str(build), *flags], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "-j", str(args.jobs), "--target", *TARGETS], check=True,
                   env={**os.environ, "MAKEFLAGS": ""})
    for target in TARGETS:
        print(build / "bin" / target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
