"""The mlx5 command queue: 64-byte entries, mailbox chains, signatures, ownership, status and syndrome.

In:  a ``HardwareAccess`` (after the init segment told us the queue's size and stride) and commands as
     input bytes (a PRM layout's bytes plus any trailing arrays) with the output size wanted.
Out: the output bytes, or ``CommandError`` (the command ran and failed: status + syndrome) /
     ``CommandDeliveryError`` (the device could not even read it: bad signature, bad pointers, ...),
     both naming the command.

How one command runs (PRM "Command Queue"): the first 16 input bytes go inline in the entry, the rest
in a chain of 512-byte mailbox blocks (``next`` pointers, block numbers, a token); the same for the
output. The entry's signature makes the XOR of its 64 bytes 0xff, each block's control signature and
signature do the same over their ranges. Software sets the ownership bit (hardware owns it), rings
the doorbell bit of the entry in the init segment and polls until the device hands ownership back;
then the entry's delivery status and the output's status byte and syndrome say how it went.
"""
from __future__ import annotations

import time
from functools import reduce

from tg_mlx_rdma.endian import from_be32, to_be32
from tg_mlx_rdma.mlx5 import prm
from tg_mlx_rdma.mlx5.hw import DmaBuffer, HardwareAccess, HardwareError

__all__ = ["CommandDeliveryError", "CommandError", "CommandQueue", "xor8"]


class CommandError(RuntimeError):
    """The device ran the command and returned a bad status; ``syndrome`` is the firmware's detail."""

    def __init__(self, command: str, status: int, syndrome: int) -> None:
        self.command, self.status, self.syndrome = command, status, syndrome
        name = prm.CMD_STATUS.get(status, "unknown status")
        super().__init__(f"mlx5 command {command} failed: status {name} ({status:#x}), syndrome {syndrome:#x}")


class CommandDeliveryError(RuntimeError):
    """The device could not take the command (signature, pointer, length errors)."""

    def __init__(self, command: str, status: int) -> None:
        self.command, self.status = command, status
        name = prm.DELIVERY_STATUS.get(status, "unknown delivery status")
        super().__init__(f"mlx5 command {command} was not delivered: {name} ({status:#x})")


def xor8(data: bytes | memoryview) -> int:
    """XOR of all bytes."""
    return reduce(lambda a, b: a ^ b, bytes(data), 0)


class CommandQueue:
    """Runs one command at a time through entry 0 of the queue."""

    TIMEOUT = 10.0  # seconds a command may take

    def __init__(self, hw: HardwareAccess) -> None:
        self.hw = hw
        low = from_be32(hw.bar_read32(prm.INIT_CMDQ_ADDR_L_SZ))
        self.log_size, self.log_stride = (low >> 4) & 0xF, low & 0xF
        if (1 << self.log_stride) < prm.CmdEntry.SIZE:
            raise HardwareError(f"command queue stride {1 << self.log_stride} is smaller than an entry (64 bytes)")
        self.page = hw.dma_alloc(4096)
        self.entry = prm.CmdEntry(self.page.view, 0)
        self._pool: DmaBuffer | None = None
        self.token = 0
        self.corrupt_next_signature = False  # a test hook: the next entry goes out with a wrong signature

    def publish_address(self) -> None:
        """Tell the device where the queue is (high word first; writing the low word starts it)."""
        addr = self.page.addr
        self.hw.bar_write32(prm.INIT_CMDQ_ADDR_H, to_be32(addr >> 32))
        self.hw.bar_write32(prm.INIT_CMDQ_ADDR_L_SZ, to_be32(addr & 0xFFFFF000))

    # ------------------------------------------------------------------------------------ mailboxes
    @staticmethod
    def _blocks_for(nbytes: int) -> int:
        return -(-max(nbytes - prm.CMD_INLINE, 0) // prm.MAILBOX_DATA)

    def _ensure_pool(self, blocks: int) -> None:
        """Mailbox memory for ``blocks`` blocks (kept and reused; grown by doubling)."""
        have = self._pool.size // prm.MAILBOX_STRIDE if self._pool is not None else 0
        if blocks > have:
            if self._pool is not None:
                self.hw.dma_free(self._pool)
            self._pool = self.hw.dma_alloc(max(blocks, 2 * have, 8) * prm.MAILBOX_STRIDE)

    def _chain(self, first: int, count: int) -> tuple[list[prm.Mailbox], int]:
        """``count`` zeroed, linked mailbox blocks from pool slot ``first``, and the first block's bus address."""
        if count == 0:
            return [], 0
        pool = self._pool
        assert pool is not None
        blocks = []
        for i in range(count):
            at = (first + i) * prm.MAILBOX_STRIDE
            pool.view[at:at + prm.Mailbox.SIZE] = bytes(prm.Mailbox.SIZE)
            block = prm.Mailbox(pool.view, at)
            block.block_number = i
            block.token = self.token
            block.next = pool.addr + at + prm.MAILBOX_STRIDE if i + 1 < count else 0
            blocks.append(block)
        return blocks, pool.addr + first * prm.MAILBOX_STRIDE

    @staticmethod
    def _sign(block: prm.Mailbox) -> None:
        lo, hi = prm.MAILBOX_CTRL
        block.ctrl_signature = 0
        block.signature = 0
        block.ctrl_signature = 0xFF ^ xor8(block.buffer[lo:hi])
        block.signature = 0xFF ^ xor8(block.buffer[:prm.Mailbox.SIZE - 1])

    # ------------------------------------------------------------------------------------ one command
    def execute(self, name: str, data: bytes, outlen: int) -> bytes:
        """Run command ``name`` (its input bytes ``data``); return ``outlen`` output bytes."""
        self.token = (self.token % 255) + 1
        n_in, n_out = self._blocks_for(len(data)), self._blocks_for(outlen)
        self._ensure_pool(n_in + n_out)
        (in_blocks, in_ptr), (out_blocks, out_ptr) = self._chain(0, n_in), self._chain(n_in, n_out)
        rest = data[prm.CMD_INLINE:]
        for i, block in enumerate(in_blocks):
            chunk = rest[i * prm.MAILBOX_DATA:(i + 1) * prm.MAILBOX_DATA]
            block.buffer[:len(chunk)] = chunk
            self._sign(block)
        for block in out_blocks:
            self._sign(block)
        e = self.entry
        e.buffer[:] = bytes(prm.CmdEntry.SIZE)
        e.type = prm.CMD_TYPE_PCIE
        e.inlen = len(data)
        e.in_ptr = in_ptr
        e.inline_in = data[:prm.CMD_INLINE]
        e.out_ptr = out_ptr
        e.outlen = outlen
        e.token = self.token
        e.ownership = 1
        e.signature = 0xFF ^ xor8(e.buffer)
        if self.corrupt_next_signature:
            self.corrupt_next_signature = False
            e.signature ^= 0x5A
        self.hw.bar_write32(prm.INIT_CMD_DBELL, to_be32(1 << 0))
        self._wait_done(name)
        if e.status:
            raise CommandDeliveryError(name, e.status)
        out = bytes(e.inline_out) + b"".join(bytes(b.buffer[:prm.MAILBOX_DATA]) for b in out_blocks)
        out = out[:outlen]
        status, syndrome = out[0], int.from_bytes(out[4:8], "big")
        if status:
            raise CommandError(name, status, syndrome)
        return out

    def _wait_done(self, name: str) -> None:
        deadline = time.monotonic() + self.TIMEOUT
        spins = 0
        while self.entry.ownership:
            spins += 1
            if spins > 64:
                if time.monotonic() > deadline:
                    raise HardwareError(f"mlx5 command {name} did not complete within {self.TIMEOUT:g} s "
                                        "(the device never returned ownership of the entry)")
                time.sleep(0.0001)
