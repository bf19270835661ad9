"""The driver's and the device model's PRM layouts against the real headers, byte for byte.

References: rdma-core's ``mlx5dv.h`` (Debian ``libibverbs-dev``) for WQE segments and CQEs; Linux's
``mlx5_ifc.h`` and ``mlx5/device.h`` (Debian ``linux-headers-*-common``) for commands, the command
entry, the mailbox block and the init segment. Under ``CI=true`` a missing header fails; elsewhere the
checks fall back to offsets frozen below from those headers (PRM sections "Send WQE Format", "CQE
Format", "Command Queue Entry", "Command Mailbox", "Initialization Segment").
"""
from __future__ import annotations

import struct

import pytest
from c_headers import IN_CI, MLX5DV_H, c_struct_offsets, find_ifc_header, ifc_fields, use_headers
from tg_mlx_rdma.mlx5 import prm
from tg_mlx_rdma.testing import mlx5_model as model

# Frozen from the headers above (used only when they are missing outside CI).
FROZEN_C = {
    "mlx5_wqe_ctrl_seg": {"opmod_idx_opcode": (0, 4), "qpn_ds": (4, 4), "signature": (8, 1), "fm_ce_se": (11, 1),
                          "imm": (12, 4), "__size__": (0, 16)},
    "mlx5_wqe_data_seg": {"byte_count": (0, 4), "lkey": (4, 4), "addr": (8, 8), "__size__": (0, 16)},
    "mlx5_wqe_raddr_seg": {"raddr": (0, 8), "rkey": (8, 4), "__size__": (0, 16)},
    "mlx5_cqe64": {"byte_cnt": (44, 4), "sop_drop_qpn": (56, 4), "wqe_counter": (60, 2), "signature": (62, 1),
                   "op_own": (63, 1), "__size__": (0, 64)},
    "mlx5_err_cqe": {"vendor_err_synd": (54, 1), "syndrome": (55, 1), "s_wqe_opcode_qpn": (56, 4),
                     "wqe_counter": (60, 2), "op_own": (63, 1), "__size__": (0, 64)},
}
FROZEN_DEVICE = {
    "mlx5_cmd_layout": {"type": (0, 1), "inlen": (4, 4), "in_ptr": (8, 8), "in": (16, 16), "out": (32, 16),
                        "out_ptr": (48, 8), "outlen": (56, 4), "token": (60, 1), "sig": (61, 1),
                        "status_own": (63, 1), "__size__": (0, 64)},
    "mlx5_cmd_prot_block": {"data": (0, 512), "next": (560, 8), "block_num": (568, 4), "token": (573, 1),
                            "ctrl_sig": (574, 1), "sig": (575, 1), "__size__": (0, 576)},
    "mlx5_init_seg": {"fw_rev": (0, 4), "cmdif_rev_fw_sub": (4, 4), "cmdq_addr_h": (16, 4),
                      "cmdq_addr_l_sz": (20, 4), "cmd_dbell": (24, 4), "initializing": (508, 4)},
}


def verbs_struct(name: str) -> dict[str, tuple[int, int]]:
    if MLX5DV_H.exists():
        use_headers("verbs")
        got = c_struct_offsets(name)
        for field, where in FROZEN_C[name].items():  # the frozen copy must stay true
            assert got[field] == where, (name, field)
        return got
    if IN_CI:
        pytest.fail(f"CI needs {MLX5DV_H} (apt-get install libibverbs-dev)")
    return FROZEN_C[name]


def device_struct(name: str) -> dict[str, tuple[int, int]]:
    if find_ifc_header() is not None:
        use_headers("device")
        got = c_struct_offsets(name, prefix_only=True)
        for field, where in FROZEN_DEVICE[name].items():
            assert got[field] == where, (name, field)
        return got
    if IN_CI:
        pytest.fail("CI needs Linux's mlx5 headers (apt-get install linux-headers-amd64)")
    return FROZEN_DEVICE[name]


@pytest.fixture
def ifc() -> None:
    if find_ifc_header() is None:
        if IN_CI:
            pytest.fail("CI needs mlx5_ifc.h (apt-get install linux-headers-amd64)")
        pytest.skip("mlx5_ifc.h not installed (apt-get install linux-headers-amd64); the command offsets are "
                    "checked against it in CI")


def be(value: int, n: int) -> bytes:
    return value.to_bytes(n, "big")


def place(buf: bytearray, offset: int, data: bytes) -> None:
    buf[offset:offset + len(data)] = data


# ------------------------------------------------------------------------------------------ WQE / CQE vs mlx5dv.h

@pytest.mark.parametrize(("opcode", "code"), [("SEND", 0x0A), ("RDMA_WRITE", 0x08)])
def test_control_segment_bytes(opcode: str, code: int) -> None:
    off = verbs_struct("mlx5_wqe_ctrl_seg")
    assert off["__size__"][1] == prm.CtrlSeg.SIZE
    seg = prm.CtrlSeg(opcode=prm.WQE_OPCODES[opcode], wqe_index=0x1234, qpn=0xABCDE, ds=3, fm_ce_se=prm.CE_CQE_ALWAYS)
    want = bytearray(16)
    # mlx5dv_set_ctrl_seg: opmod_idx_opcode = htobe32(opmod << 24 | pi << 8 | opcode), qpn_ds = htobe32(qpn << 8 | ds)
    place(want, off["opmod_idx_opcode"][0], be((0x1234 << 8) | code, 4))
    place(want, off["qpn_ds"][0], be((0xABCDE << 8) | 3, 4))
    want[off["fm_ce_se"][0]] = 0x08  # MLX5_WQE_CTRL_CQ_UPDATE: a signalled completion
    assert bytes(seg) == bytes(want)
    assert bytes(seg)[11] == 0x08 and bytes(seg)[3] == code


def test_data_and_remote_address_segments() -> None:
    d = verbs_struct("mlx5_wqe_data_seg")
    seg = prm.DataSeg(byte_count=0x10000, lkey=0x1234_5678, addr=0x0011_2233_4455_6677)
    want = bytearray(16)
    place(want, d["byte_count"][0], be(0x10000, 4))
    place(want, d["lkey"][0], be(0x1234_5678, 4))
    place(want, d["addr"][0], be(0x0011_2233_4455_6677, 8))
    assert bytes(seg) == bytes(want)
    r = verbs_struct("mlx5_wqe_raddr_seg")
    seg = prm.RaddrSeg(raddr=0x7766_5544_3322_1100, rkey=0xCAFE_F00D)
    want = bytearray(16)
    place(want, r["raddr"][0], be(0x7766_5544_3322_1100, 8))
    place(want, r["rkey"][0], be(0xCAFE_F00D, 4))
    assert bytes(seg) == bytes(want)


def test_cqe_fields() -> None:
    c, e = verbs_struct("mlx5_cqe64"), verbs_struct("mlx5_err_cqe")
    assert c["__size__"][1] == e["__size__"][1] == prm.Cqe64.SIZE == 64
    raw = bytearray(64)
    place(raw, c["byte_cnt"][0], be(123456, 4))
    place(raw, c["sop_drop_qpn"][0], be((0x0A << 24) | 0x00BEEF, 4))
    place(raw, c["wqe_counter"][0], be(0xFFFE, 2))
    raw[e["syndrome"][0]] = 0x04
    raw[e["vendor_err_synd"][0]] = 0x51
    raw[c["op_own"][0]] = (0xD << 4) | 1
    cqe = prm.Cqe64(bytes(raw))
    assert (cqe.byte_cnt, cqe.qpn, cqe.wqe_counter, cqe.opcode, cqe.owner) == (123456, 0xBEEF, 0xFFFE, 0xD, 1)
    assert (cqe.syndrome, cqe.vendor_err_synd, cqe.s_wqe_opcode) == (0x04, 0x51, 0x0A)
    assert (c["byte_cnt"][0], c["sop_drop_qpn"][0], c["wqe_counter"][0], c["op_own"][0]) == (44, 56, 60, 63)


def test_model_writes_wqe_and_cqe_fields_where_the_header_says() -> None:
    c, ctrl = verbs_struct("mlx5_cqe64"), verbs_struct("mlx5_wqe_ctrl_seg")
    assert model.WQE_CTRL["opcode"][0] == ctrl["opmod_idx_opcode"][0]
    assert model.WQE_CTRL["qpn"][0] == ctrl["qpn_ds"][0]
    assert model.WQE_CTRL["fm_ce_se"] == (ctrl["fm_ce_se"][0] - 3, 0, 8)  # the dword's low byte = byte 11
    assert model.CQE_SIZE == c["__size__"][1]


# ------------------------------------------------------------------------------------------ commands vs device.h

def test_command_entry_and_mailbox_vs_device_h() -> None:
    lay = device_struct("mlx5_cmd_layout")
    f = {x.name: x for x in prm.CmdEntry.fields()}
    assert prm.CmdEntry.SIZE == lay["__size__"][1]
    for ours, theirs in (("type", "type"), ("inlen", "inlen"), ("in_ptr", "in_ptr"), ("inline_in", "in"),
                         ("inline_out", "out"), ("out_ptr", "out_ptr"), ("outlen", "outlen"), ("token", "token"),
                         ("signature", "sig"), ("ownership", "status_own"), ("status", "status_own")):
        assert f[ours].offset == lay[theirs][0], ours
    blk = device_struct("mlx5_cmd_prot_block")
    f = {x.name: x for x in prm.Mailbox.fields()}
    assert prm.Mailbox.SIZE == blk["__size__"][1]
    for ours, theirs in (("data", "data"), ("next", "next"), ("block_number", "block_num"), ("token", "token"),
                         ("ctrl_signature", "ctrl_sig"), ("signature", "sig")):
        assert f[ours].offset == blk[theirs][0], ours
    # the model's own tables
    assert model.ENTRY["in_ptr"][0] == lay["in_ptr"][0] and model.ENTRY["out_ptr"][0] == lay["out_ptr"][0]
    assert model.ENTRY["outlen"][0] == lay["outlen"][0] and model.ENTRY_IN == lay["in"][0]
    assert model.ENTRY_OUT == lay["out"][0] and model.ENTRY["token"][0] == lay["token"][0]
    assert model.BLOCK["next"][0] == blk["next"][0] and model.BLOCK["number"][0] == blk["block_num"][0]
    assert model.BLOCK["token"] == (blk["token"][0] - 1, 16, 8) and model.BLOCK_SIZE == blk["__size__"][1]


def test_init_segment_vs_device_h() -> None:
    seg = device_struct("mlx5_init_seg")
    ours = {"fw_rev": prm.INIT_FW_REV, "cmdif_rev_fw_sub": prm.INIT_CMDIF_REV_FW_SUB,
            "cmdq_addr_h": prm.INIT_CMDQ_ADDR_H, "cmdq_addr_l_sz": prm.INIT_CMDQ_ADDR_L_SZ,
            "cmd_dbell": prm.INIT_CMD_DBELL, "initializing": prm.INIT_INITIALIZING}
    theirs = {"fw_rev": model.FW_REV, "cmdif_rev_fw_sub": model.CMDIF_REV_FW_SUB, "cmdq_addr_h": model.CMDQ_H,
              "cmdq_addr_l_sz": model.CMDQ_L, "cmd_dbell": model.CMD_DBELL, "initializing": model.INITIALIZING}
    for name, (offset, _) in seg.items():
        if name in ours:
            assert ours[name] == offset == theirs[name], name


# ------------------------------------------------------------------------------------- command fields vs mlx5_ifc.h

@pytest.mark.parametrize("layout", prm.COMMAND_LAYOUTS, ids=lambda c: c.__name__)
def test_driver_command_fields_vs_ifc(ifc: None, layout: type) -> None:
    fields = ifc_fields(layout.IFC_NAME)
    for path, bit, width in layout.ROWS:
        assert path in fields, f"{layout.__name__}: mlx5_ifc_{layout.IFC_NAME}_bits has no field {path}"
        assert fields[path] == (bit, width), f"{layout.__name__}.{path}: ours {(hex(bit), width)}, " \
                                             f"mlx5_ifc.h {(hex(fields[path][0]), fields[path][1])}"


def test_driver_command_sizes_and_arrays_vs_ifc(ifc: None) -> None:
    from c_headers import ifc_size
    assert ifc_fields("manage_pages_in")["pas"][0] == 8 * prm.MANAGE_PAGES_PAS
    for name in ("create_eq_in", "create_cq_in", "create_qp_in"):
        assert ifc_fields(name)["pas"][0] == 8 * prm.QUEUE_PAS == 8 * model.PAS_AT
    assert ifc_fields("query_hca_cap_out")["capability"] == (8 * prm.HCA_CAP_OFFSET, 8 * prm.HCA_CAP_SIZE)
    assert 8 * model.CAP_AT == 8 * prm.HCA_CAP_OFFSET and model.CAP_BYTES == prm.HCA_CAP_SIZE
    assert ifc_fields("query_hca_vport_gid_out")["gids_num"][0] + 0x20 == 8 * prm.QUERY_GID_GID
    for layout in prm.COMMAND_LAYOUTS:
        if layout.IFC_NAME != "cmd_hca_cap" and not layout.IFC_NAME.startswith("query_hca_vport_gid_out"):
            assert layout.SIZE == ifc_size(layout.IFC_NAME) // 8, layout.__name__


def model_bit(spec: tuple[int, int, int]) -> tuple[int, int]:
    """A model field (byte of its big-endian dword, low bit, width) as mlx5_ifc.h's (bit offset, width)."""
    byte, low, width = spec
    if width in (64, 128):
        return 8 * byte, width
    return 8 * byte + 32 - low - width, width


MODEL_FIELDS = [  # (model table entry, ifc struct, ifc path)
    (model.OPCODE, "create_qp_in", "opcode"), (model.OP_MOD, "create_qp_in", "op_mod"),
    (model.QPN_IN, "rst2init_qp_in", "qpn"), (model.OUT_STATUS, "create_qp_out", "status"),
    (model.OUT_SYNDROME, "create_qp_out", "syndrome"), (model.OUT_OBJ, "create_qp_out", "qpn"),
    (model.OUT_OBJ, "alloc_pd_out", "pd"), (model.OUT_OBJ, "alloc_uar_out", "uar"),
    (model.OUT_OBJ, "create_cq_out", "cqn"), (model.OUT_OBJ, "create_mkey_out", "mkey_index"),
    (model.MKEY_IN, "destroy_mkey_in", "mkey_index"),
    (model.OUT_EQN, "create_eq_out", "eq_number"), (model.ISSI_CURRENT, "set_issi_in", "current_issi"),
    (model.ISSI_CURRENT, "query_issi_out", "current_issi"), (model.ISSI_SUPPORTED_DW0, "query_issi_out",
                                                            "supported_issi_dw0"),
    (model.PAGES_NUM_OUT, "query_pages_out", "num_pages"),
    (model.PAGES_ENTRIES_IN, "manage_pages_in", "input_num_entries"),
    (model.GID_INDEX_IN, "query_hca_vport_gid_in", "gid_index"),
    (model.GIDS_NUM_OUT, "query_hca_vport_gid_out", "gids_num"),
    *[(model.CAP[k], "cmd_hca_cap", k) for k in model.CAP],
    *[(model.MKEY[k], "create_mkey_in", f"memory_key_mkey_entry.{v}") for k, v in (
        ("a", "a"), ("rw", "rw"), ("rr", "rr"), ("lw", "lw"), ("lr", "lr"), ("access_mode", "access_mode_1_0"),
        ("qpn", "qpn"), ("key", "mkey_7_0"), ("pd", "pd"), ("start", "start_addr"), ("len", "len"))],
    *[(model.EQ[k], "create_eq_in", f"eq_context_entry.{v}") for k, v in (("log_size", "log_eq_size"),
                                                                          ("uar", "uar_page"))],
    *[(model.CQ[k], "create_cq_in", f"cq_context.{v}") for k, v in (
        ("cqe_sz", "cqe_sz"), ("log_size", "log_cq_size"), ("uar", "uar_page"), ("eqn", "c_eqn_or_apu_element"),
        ("dbr", "dbr_addr"))],
    *[(model.QP[k], "init2rtr_qp_in", f"qpc.{v}") for k, v in (
        ("state", "state"), ("st", "st"), ("pm_state", "pm_state"), ("pd", "pd"), ("mtu", "mtu"),
        ("log_msg_max", "log_msg_max"), ("log_rq_size", "log_rq_size"), ("log_rq_stride", "log_rq_stride"),
        ("no_sq", "no_sq"), ("log_sq_size", "log_sq_size"), ("uar", "uar_page"), ("remote_qpn", "remote_qpn"),
        ("grh", "primary_address_path.grh"), ("rlid", "primary_address_path.rlid"),
        ("rgid", "primary_address_path.rgid_rip"), ("port", "primary_address_path.vhca_port_num"),
        ("cqn_snd", "cqn_snd"), ("rwe", "rwe"), ("cqn_rcv", "cqn_rcv"), ("dbr", "dbr_addr"), ("rq_type", "rq_type"))],
]


@pytest.mark.parametrize(("spec", "struct_name", "path"), MODEL_FIELDS, ids=lambda x: x if isinstance(x, str) else "")
def test_model_command_fields_vs_ifc(ifc: None, spec: tuple[int, int, int], struct_name: str, path: str) -> None:
    assert model_bit(spec) == ifc_fields(struct_name)[path], f"model field {struct_name}.{path}"


def test_model_and_driver_read_each_others_fields() -> None:
    """No header needed: what the driver packs, the model's tables read back (and the reverse)."""
    cmd = prm.Init2RtrIn(qpn=0x123456, qpc__remote_qpn=0xABCDEF, qpc__rwe=1, qpc__cqn_rcv=0x42, qpc__dbr_addr=1 << 40)
    cmd.qpc__primary_address_path__rgid_rip = bytes(range(16))
    raw = bytearray(bytes(cmd))
    assert model.get(raw, model.QPN_IN) == 0x123456
    assert model.get(raw, model.QP["remote_qpn"]) == 0xABCDEF and model.get(raw, model.QP["rwe"]) == 1
    assert model.get(raw, model.QP["cqn_rcv"]) == 0x42 and model.get(raw, model.QP["dbr"]) == 1 << 40
    assert model.get(raw, model.QP["rgid"]) == int.from_bytes(bytes(range(16)), "big")
    out = bytearray(struct.calcsize(">4I"))
    model.put(out, model.OUT_STATUS, 0x10)
    model.put(out, model.OUT_SYNDROME, 0xDEADBEEF)
    back = prm.CmdOut(bytes(out))
    assert (back.status, back.syndrome) == (0x10, 0xDEADBEEF)
