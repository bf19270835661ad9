"""Hardware access: ConnectX discovery through sysfs, and the clear errors on machines without one."""
from __future__ import annotations

from pathlib import Path

import pytest
from tg_mlx_rdma.mlx5.hw import PCI_DEVICES, NoConnectXDevice, NoPCIe, SysfsPci, find_connectx


def fake_function(root: Path, slot: str, vendor: int) -> None:
    d = root / slot
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"{vendor:#06x}\n")


def test_no_pci_bus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NoPCIe, match=r"no PCIe: .*does not exist on this machine"):
        find_connectx(tmp_path / "missing")


def test_no_connectx_is_a_clear_error(tmp_path: Path) -> None:
    fake_function(tmp_path, "0000:00:00.0", 0x8086)
    fake_function(tmp_path, "0000:00:01.0", 0x10DE)
    with pytest.raises(NoConnectXDevice, match=r"no ConnectX device: none of the 2 PCI functions .* 0x15b3"):
        find_connectx(tmp_path)


def test_connectx_functions_are_found_by_vendor(tmp_path: Path) -> None:
    fake_function(tmp_path, "0000:00:00.0", 0x8086)
    fake_function(tmp_path, "0000:3b:00.0", 0x15B3)
    fake_function(tmp_path, "0000:3b:00.1", 0x15B3)
    assert [p.name for p in find_connectx(tmp_path)] == ["0000:3b:00.0", "0000:3b:00.1"]


def test_this_machine_says_why_there_is_no_nic() -> None:
    """This machine has no ConnectX (the tests run on the model): opening the real device explains why."""
    if PCI_DEVICES.is_dir() and any((d / "vendor").is_file() and (d / "vendor").read_text().strip() == "0x15b3"
                                    for d in PCI_DEVICES.iterdir()):
        pytest.skip("this machine has a ConnectX NIC")
    expected = NoConnectXDevice if PCI_DEVICES.is_dir() else NoPCIe
    with pytest.raises(expected, match="no ConnectX device|no PCIe"):
        SysfsPci()
