"""Hardware access for the mlx5 driver: BAR registers, DMA-able memory with bus addresses, PCI config.

In:  a PCI function (the real one: a ConnectX NIC, vendor 0x15b3, found through sysfs; or the software
     device model in ``tg_mlx_rdma.testing.mlx5_model``, which implements the same interface).
Out: ``HardwareAccess``: ``bar_read32/bar_write32/bar_write64`` (raw host-order words: the driver passes
     ``to_be32(x)`` so the device sees ``x`` big-endian), ``dma_alloc(size) -> DmaBuffer`` (a memoryview
     and the bus address the device uses for it), ``map_dma(view)`` (the same for memory the process already
     has, e.g. a tensor's; optional), ``pci_config_read``.

The real path (``SysfsPci``): ``/sys/bus/pci/devices/*/vendor`` finds the NIC, BAR 0 is mapped from
``resource0`` and PCI config read from ``config``; DMA memory is locked anonymous memory whose physical
addresses come from ``/proc/self/pagemap`` (needs root, and an IOMMU in passthrough or a VFIO
no-IOMMU setup so physical = bus address). Buffers are made of physically contiguous hugepages only
where the kernel gives them; a buffer that is not contiguous is refused. A machine without PCI gets
``NoPCIe``, one without a ConnectX ``NoConnectXDevice``: both say what was looked at.
"""
from __future__ import annotations

import abc
import ctypes
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DmaBuffer", "HardwareAccess", "HardwareError", "NoConnectXDevice", "NoPCIe", "SysfsPci",
           "find_connectx", "MELLANOX_VENDOR"]

MELLANOX_VENDOR = 0x15B3
PCI_DEVICES = Path("/sys/bus/pci/devices")
PAGE = 4096


class HardwareError(RuntimeError):
    """The hardware (or its access path) is missing or misbehaves."""


class NoPCIe(HardwareError):
    """This machine has no PCI bus visible to us."""


class NoConnectXDevice(HardwareError):
    """PCI is there, but no Mellanox/NVIDIA ConnectX function."""


@dataclass
class DmaBuffer:
    """Memory both the CPU (``view``) and the device (``addr``, a bus address) can access."""

    view: memoryview
    addr: int
    size: int
    keep: object = field(default=None, repr=False)  # what owns the memory (an mmap, a shared-memory block)


class HardwareAccess(abc.ABC):
    """What the driver needs from a PCI function. Offsets are bytes from the start of BAR 0."""

    @abc.abstractmethod
    def bar_read32(self, offset: int) -> int:
        """The 4 bytes at ``offset`` as a host-order u32 (``from_be32`` gives the device's value)."""

    @abc.abstractmethod
    def bar_write32(self, offset: int, value: int) -> None:
        """Store the host-order u32 ``value`` (``to_be32(x)`` for a device field ``x``)."""

    @abc.abstractmethod
    def bar_write64(self, offset: int, value: int) -> None:
        """Store the host-order u64 ``value`` in one access (doorbells)."""

    @abc.abstractmethod
    def dma_alloc(self, size: int) -> DmaBuffer:
        """Zeroed memory of at least ``size`` bytes, 4 KiB aligned, with its bus address."""

    def dma_free(self, buf: DmaBuffer) -> None:  # noqa: B027  (optional)
        """Give ``buf`` back (the default keeps it until the object is dropped)."""

    def map_dma(self, view: memoryview) -> DmaBuffer:
        """Let the device reach memory the process already has (a tensor's): the returned buffer's ``view`` is
        ``view`` and its ``addr`` a bus address contiguous over all of it (VFIO maps it into the IOVA space; the
        model into its own). Raises ``HardwareError`` when this access path cannot (the caller copies instead)."""
        raise HardwareError(f"{type(self).__name__} cannot map process memory for the device")

    def unmap_dma(self, buf: DmaBuffer) -> None:  # noqa: B027  (optional)
        """Undo ``map_dma`` (the memory key over it must be destroyed first)."""

    @abc.abstractmethod
    def pci_config_read(self, offset: int, size: int) -> int:
        """A little-endian value of ``size`` bytes from PCI configuration space."""

    def close(self) -> None:  # noqa: B027  (optional)
        """Release the device."""


def find_connectx(root: Path = PCI_DEVICES) -> list[Path]:
    """The sysfs directories of the ConnectX functions, or ``NoPCIe`` / ``NoConnectXDevice``."""
    if not root.is_dir():
        raise NoPCIe(f"no PCIe: {root} does not exist on this machine (a container or VM without PCI "
                     "passthrough?); use the device model (tgcore.transport('mlx5', model=True)) or the mpi transport")
    found, seen = [], 0
    for dev in sorted(root.iterdir()):
        seen += 1
        try:
            vendor = int((dev / "vendor").read_text().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor == MELLANOX_VENDOR:
            found.append(dev)
    if not found:
        raise NoConnectXDevice(f"no ConnectX device: none of the {seen} PCI functions under {root} has vendor "
                               f"{MELLANOX_VENDOR:#06x} (Mellanox/NVIDIA); use the device model or the mpi transport")
    return found


class SysfsPci(HardwareAccess):
    """A ConnectX function through sysfs: BAR 0 mapped from ``resource0``, DMA memory with pagemap addresses."""

    def __init__(self, device: str | Path | None = None, root: Path = PCI_DEVICES) -> None:
        self.path = Path(device) if device is not None else find_connectx(root)[0]
        try:
            self._config = (self.path / "config").open("rb")
            fd = os.open(self.path / "resource0", os.O_RDWR | os.O_SYNC)
        except OSError as e:
            raise HardwareError(f"cannot open {self.path} (needs root, and the device unbound from mlx5_core): "
                                f"{e}") from e
        try:
            self._bar = mmap.mmap(fd, os.fstat(fd).st_size or (1 << 25), mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._bar_base = ctypes.addressof(ctypes.c_char.from_buffer(self._bar))
        self._buffers: list[mmap.mmap] = []

    def bar_read32(self, offset: int) -> int:
        return ctypes.c_uint32.from_address(self._bar_base + offset).value  # one 32-bit load

    def bar_write32(self, offset: int, value: int) -> None:
        ctypes.c_uint32.from_address(self._bar_base + offset).value = value

    def bar_write64(self, offset: int, value: int) -> None:
        ctypes.c_uint64.from_address(self._bar_base + offset).value = value

    def pci_config_read(self, offset: int, size: int) -> int:
        self._config.seek(offset)
        return int.from_bytes(self._config.read(size), "little")

    def dma_alloc(self, size: int) -> DmaBuffer:
        size = -(-size // PAGE) * PAGE
        buf = mmap.mmap(-1, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
        view = memoryview(buf)
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlock(ctypes.c_void_p(base), ctypes.c_size_t(size)) != 0:
            raise HardwareError(f"mlock of {size} bytes of DMA memory failed (errno {ctypes.get_errno()})")
        phys = [_physical(base + off) for off in range(0, size, PAGE)]
        if any(b - a != PAGE for a, b in zip(phys, phys[1:], strict=False)):
            raise HardwareError(f"{size} bytes of DMA memory are not physically contiguous; use hugepages or VFIO")
        self._buffers.append(buf)
        return DmaBuffer(view, phys[0], size, buf)

    def map_dma(self, view: memoryview) -> DmaBuffer:
        """Lock ``view``'s pages; physically contiguous memory only (no IOMMU mapping here: no VFIO)."""
        import numpy as np
        base = int(np.frombuffer(view, dtype=np.uint8).ctypes.data)
        start, end = base - base % PAGE, -(-(base + view.nbytes) // PAGE) * PAGE
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlock(ctypes.c_void_p(start), ctypes.c_size_t(end - start)) != 0:
            raise HardwareError(f"mlock of {end - start} bytes failed (errno {ctypes.get_errno()})")
        phys = [_physical(a) for a in range(start, end, PAGE)]
        if any(b - a != PAGE for a, b in zip(phys, phys[1:], strict=False)):
            libc.munlock(ctypes.c_void_p(start), ctypes.c_size_t(end - start))
            raise HardwareError(f"{view.nbytes} bytes of process memory are not physically contiguous (needs VFIO)")
        return DmaBuffer(view, phys[0] + base - start, view.nbytes, (start, end))

    def close(self) -> None:
        self._config.close()


def _physical(virtual: int) -> int:
    """The physical address of a locked page, from ``/proc/self/pagemap`` (bit 63 present, bits 0..54 frame)."""
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(virtual // PAGE * 8)
        entry = int.from_bytes(f.read(8), "little")
    if not entry >> 63 or not entry & ((1 << 55) - 1):
        raise HardwareError("cannot read physical addresses from /proc/self/pagemap (needs root)")
    return (entry & ((1 << 55) - 1)) * PAGE + virtual % PAGE
