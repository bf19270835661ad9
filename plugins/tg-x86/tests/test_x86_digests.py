"""The machine code of a named corpus of kernels (``digests/corpus.py``) is the code whose digests are committed in
``digests/machine_code.json`` (AVX2; ``machine_code_avx512.json`` at the AVX-512 level):
a refactoring of selection, allocation or encoding keeps every byte.

The reference here is the code as it was when the digests were written (its correctness is what the rest of the
suite, the core suite on CPU:X86 and the capstone fuzzing check); this test says only *that* bytes changed and
where. A change meant to alter the code regenerates the file and names the change in its commit:

    python plugins/tg-x86/tests/digests/corpus.py --write
"""
from __future__ import annotations

import json

import pytest
from digests.corpus import DIGEST_FILES, ISAS, THREADS, WORKLOADS, digests

REGENERATE = "python plugins/tg-x86/tests/digests/corpus.py --write"


@pytest.mark.parametrize("isa", ISAS)
def test_corpus_is_pinned(isa):
    stored = json.loads(DIGEST_FILES[isa].read_text())
    assert (stored["isa"], stored["threads"]) == (isa, THREADS), \
        f"machine_code.json was written for isa={stored['isa']} threads={stored['threads']}; regenerate: {REGENERATE}"
    assert {key.split("/")[0] for key in stored["kernels"]} == set(WORKLOADS), \
        f"the workloads of corpus.py and machine_code.json differ; regenerate: {REGENERATE}"


@pytest.mark.parametrize("isa", ISAS)
def test_machine_code_unchanged(isa):
    stored: dict[str, str] = json.loads(DIGEST_FILES[isa].read_text())["kernels"]
    found = digests(isa=isa)
    changed = sorted(k for k in stored.keys() & found.keys() if stored[k] != found[k])
    gone, new = sorted(stored.keys() - found.keys()), sorted(found.keys() - stored.keys())
    if changed or gone or new:
        lines = [f"machine code differs from digests/{DIGEST_FILES[isa].name} on {len(changed)} of {len(stored)} "
                 "kernels"]
        lines += [f"  changed: {k}" for k in changed]
        lines += [f"  no longer made: {k}" for k in gone] + [f"  new: {k}" for k in new]
        lines.append(f"if the change is intended, regenerate the digests ({REGENERATE}) and name it in the commit")
        raise AssertionError("\n".join(lines))
    assert len(found) >= 90   # the corpus did make its kernels
