"""Calling conventions a kernel can be compiled for: System V AMD64 (Linux, macOS, BSD) and Windows x64.

In:  nothing (facts of the two ABIs). Out: ``SYSV``, ``WIN64`` and ``HOST`` (the one ctypes calls with on
this platform), read by the frame code (``machine._frame_layout``).

What differs for our kernels (``void f(ptr..., int32..., int32 core_id)``, integer arguments only):
    System V   arguments in rdi rsi rdx rcx r8 r9, then on the stack above the return address;
               callee-saved rbx rbp r12-r15; no vector register is preserved.
    Windows    arguments in rcx rdx r8 r9, then on the stack above a 32-byte "home" area the caller
               reserves (where the callee may store the four register arguments); callee-saved rbx rbp
               rdi rsi r12-r15 and the low 128 bits of xmm6-xmm15.
Both: 16-byte stack alignment at the call, rsp = 8 mod 16 at entry, the upper ymm halves free.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Abi:
    name: str
    arg_regs: tuple[str, ...]            # integer argument registers, in order
    callee_saved: tuple[str, ...]        # gprs a function must preserve
    callee_saved_vec: tuple[int, ...]    # xmm registers (low 128 bits) a function must preserve
    home_area: int                       # bytes the caller reserves above the return address for register args

    def __repr__(self) -> str:
        return f"Abi({self.name})"


SYSV = Abi("sysv", ("rdi", "rsi", "rdx", "rcx", "r8", "r9"), ("rbx", "rbp", "r12", "r13", "r14", "r15"), (), 0)
WIN64 = Abi("win64", ("rcx", "rdx", "r8", "r9"), ("rbx", "rbp", "rdi", "rsi", "r12", "r13", "r14", "r15"),
            tuple(range(6, 16)), 32)
HOST = WIN64 if sys.platform == "win32" else SYSV
