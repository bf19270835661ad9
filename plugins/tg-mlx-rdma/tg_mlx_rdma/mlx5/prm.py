"""The driver's PRM layouts and constants: init segment, command queue, command in/out, WQE and CQE.

In:  the ConnectX Programmer's Reference Manual (PRM), as also published in Linux's
     ``include/linux/mlx5/mlx5_ifc.h`` (command layouts, bit offsets MSB first), ``device.h``
     (init segment, command entry, mailbox block) and rdma-core's ``mlx5dv.h`` (WQE segments, CQE).
Out: ``Record`` classes (big-endian) and tables of opcodes, status codes and syndromes.

Command layouts are written as ``(ifc path, bit offset, width)`` rows; ``IFC_NAME`` names the
``mlx5_ifc_<name>_bits`` struct they come from, so the tests check every row against the header.
A dotted path (``qpc.pd``) becomes the attribute ``qpc__pd``.
"""
from __future__ import annotations

from tg_mlx_rdma.record import Field, Record

# ----------------------------------------------------------------------------------------------- command opcodes
OPCODES: dict[str, int] = {
    "QUERY_HCA_CAP": 0x100, "INIT_HCA": 0x102, "TEARDOWN_HCA": 0x103, "ENABLE_HCA": 0x104,
    "DISABLE_HCA": 0x105, "QUERY_PAGES": 0x107, "MANAGE_PAGES": 0x108, "SET_HCA_CAP": 0x109,
    "QUERY_ISSI": 0x10A, "SET_ISSI": 0x10B, "CREATE_MKEY": 0x200, "DESTROY_MKEY": 0x202,
    "CREATE_EQ": 0x301, "CREATE_CQ": 0x400,
    "CREATE_QP": 0x500, "RST2INIT_QP": 0x502, "INIT2RTR_QP": 0x503, "RTR2RTS_QP": 0x504, "2ERR_QP": 0x507,
    "2RST_QP": 0x50A, "QUERY_QP": 0x50B, "QUERY_HCA_VPORT_GID": 0x764, "ALLOC_PD": 0x800, "ALLOC_UAR": 0x802,
}
OPCODE_NAMES = {v: k for k, v in OPCODES.items()}

# command status (output byte 0), PRM "Command Return Status"
CMD_STATUS: dict[int, str] = {
    0x0: "OK", 0x1: "INTERNAL_ERR", 0x2: "BAD_OP", 0x3: "BAD_PARAM", 0x4: "BAD_SYS_STATE", 0x5: "BAD_RESOURCE",
    0x6: "RESOURCE_BUSY", 0x8: "EXCEED_LIM", 0x9: "BAD_RES_STATE", 0xA: "BAD_INDEX", 0xF: "NO_RESOURCES",
    0x10: "BAD_QP_STATE", 0x30: "BAD_PKT", 0x40: "BAD_SIZE", 0x50: "BAD_INPUT_LEN", 0x51: "BAD_OUTPUT_LEN",
}
# command delivery status (status_own bits 7:1 of the command entry), PRM "Command Queue Entry"
DELIVERY_STATUS: dict[int, str] = {
    0x0: "OK", 0x1: "SIGNATURE_ERR", 0x2: "TOKEN_ERR", 0x3: "BAD_BLOCK_NUMBER", 0x4: "BAD_OUTPUT_POINTER",
    0x5: "BAD_INPUT_POINTER", 0x6: "INTERNAL_ERR", 0x7: "INPUT_LEN_ERR", 0x8: "OUTPUT_LEN_ERR",
    0x9: "RESERVED_NOT_ZERO", 0x10: "BAD_COMMAND_TYPE",
}
# error CQE syndromes, PRM "Completion Queue Entry Format" (also mlx5dv.h MLX5_CQE_SYNDROME_*)
CQE_SYNDROMES: dict[int, str] = {
    0x1: "LOCAL_LENGTH_ERR", 0x2: "LOCAL_QP_OP_ERR", 0x4: "LOCAL_PROT_ERR", 0x5: "WR_FLUSH_ERR",
    0x6: "MW_BIND_ERR", 0x10: "BAD_RESP_ERR", 0x11: "LOCAL_ACCESS_ERR", 0x12: "REMOTE_INVAL_REQ_ERR",
    0x13: "REMOTE_ACCESS_ERR", 0x14: "REMOTE_OP_ERR", 0x15: "TRANSPORT_RETRY_EXC_ERR", 0x16: "RNR_RETRY_EXC_ERR",
    0x22: "REMOTE_ABORTED_ERR",
}

# WQE opcodes (control segment byte 3) and CQE opcodes (op_own bits 7:4), mlx5dv.h MLX5_OPCODE_* / MLX5_CQE_*
WQE_OPCODES = {"RDMA_WRITE": 0x08, "SEND": 0x0A}
CQE_REQ, CQE_RESP_SEND, CQE_REQ_ERR, CQE_RESP_ERR, CQE_INVALID = 0x0, 0x2, 0xD, 0xE, 0xF
CE_CQE_ALWAYS = 0x08  # fm_ce_se: "completion event always" (a signalled WQE), MLX5_WQE_CTRL_CQ_UPDATE
QP_STATES = {0: "RST", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQER", 6: "ERR", 7: "SQD"}
QP_ST_RC, PM_MIGRATED, ACCESS_MODE_PA = 0x0, 0x3, 0x0
MTU_4096 = 5
CMD_TYPE_PCIE = 0x7
ISSI_1 = 1
HCA_CAP_GENERAL = 0x0  # QUERY_HCA_CAP op_mod = (type << 1) | current
QUERY_PAGES_BOOT, QUERY_PAGES_INIT = 0x1, 0x2
MANAGE_PAGES_GIVE = 0x1

# ----------------------------------------------------------------------------------------------- registers
# Initialization segment at BAR 0 offset 0 (PRM "Initialization Segment"; Linux device.h struct mlx5_init_seg)
INIT_FW_REV = 0x00  # [31:16] minor, [15:0] major
INIT_CMDIF_REV_FW_SUB = 0x04  # [31:16] command interface revision, [15:0] subminor
INIT_CMDQ_ADDR_H = 0x10
INIT_CMDQ_ADDR_L_SZ = 0x14  # [31:12] address low, [7:4] log_cmdq_size, [3:0] log_cmdq_stride
INIT_CMD_DBELL = 0x18  # one bit per command entry
INIT_INITIALIZING = 0x1FC  # bit 31: firmware still initializing
CMDIF_REV = 5
UAR_PAGE_SIZE = 4096
UAR_DB_OFFSET = 0x800  # the first BlueFlame register / doorbell of a UAR page
UAR_CQ_DB_OFFSET = 0x20  # CQ arm doorbell (unused: we poll)

MAILBOX_DATA = 512
CMD_INLINE = 16  # bytes of input/output carried in the command entry itself


def ifc_layout(class_name: str, ifc_name: str, size_bits: int, rows: list[tuple[str, int, int]]) -> type[Record]:
    """A big-endian record from ``mlx5_ifc.h``-style rows (path, bit offset, width)."""
    fields = []
    for path, bit, width in rows:
        name = path.replace(".", "__")
        if width == 128:  # a GID: 16 bytes
            fields.append(Field(name, bit // 8, "u8", count=16))
        else:
            fields.append(Field.ifc(name, bit, width))
    attrs = {"SIZE": size_bits // 8, "ENDIAN": "big", "FIELDS": tuple(fields), "IFC_NAME": ifc_name, "ROWS": rows}
    return type(class_name, (Record,), attrs)


HDR_IN = [("opcode", 0x0, 16), ("op_mod", 0x30, 16)]
HDR_OUT = [("status", 0x0, 8), ("syndrome", 0x20, 32)]

CmdIn = ifc_layout("CmdIn", "enable_hca_in", 0x80, HDR_IN)  # the common header of every input
CmdOut = ifc_layout("CmdOut", "alloc_pd_out", 0x80, HDR_OUT)  # ... and of every output (16 bytes)
EnableHcaIn = ifc_layout("EnableHcaIn", "enable_hca_in", 0x80, HDR_IN + [("function_id", 0x50, 16)])
QueryIssiIn = ifc_layout("QueryIssiIn", "query_issi_in", 0x80, HDR_IN)
QueryIssiOut = ifc_layout("QueryIssiOut", "query_issi_out", 0x380, HDR_OUT + [
    ("current_issi", 0x50, 16), ("supported_issi_dw0", 0x360, 32)])
SetIssiIn = ifc_layout("SetIssiIn", "set_issi_in", 0x80, HDR_IN + [("current_issi", 0x50, 16)])
QueryPagesIn = ifc_layout("QueryPagesIn", "query_pages_in", 0x80, HDR_IN + [("function_id", 0x50, 16)])
QueryPagesOut = ifc_layout("QueryPagesOut", "query_pages_out", 0x80, HDR_OUT + [
    ("function_id", 0x50, 16), ("num_pages", 0x60, 32)])
ManagePagesIn = ifc_layout("ManagePagesIn", "manage_pages_in", 0x80, HDR_IN + [
    ("function_id", 0x50, 16), ("input_num_entries", 0x60, 32)])
MANAGE_PAGES_PAS = 0x80 // 8  # byte offset of the 64-bit page addresses after the header
QueryHcaCapIn = ifc_layout("QueryHcaCapIn", "query_hca_cap_in", 0x80, HDR_IN)
HCA_CAP_OFFSET, HCA_CAP_SIZE = 0x80 // 8, 0x1000  # capability after the 16-byte header, in QUERY out and SET in
HcaCap = ifc_layout("HcaCap", "cmd_hca_cap", 0x8000, [
    ("log_max_qp_sz", 0x88, 8), ("log_max_qp", 0x9B, 5), ("log_max_cq_sz", 0xC8, 8), ("log_max_cq", 0xDB, 5),
    ("log_max_eq_sz", 0xE0, 8), ("log_max_mkey", 0xEA, 6), ("log_max_eq", 0xFC, 4), ("num_ports", 0x1B8, 8),
    ("log_max_msg", 0x1C3, 5), ("cmdif_checksum", 0x210, 2), ("log_pg_sz", 0x258, 8),
    ("max_wqe_sz_sq", 0x290, 16), ("max_wqe_sz_rq", 0x2B0, 16), ("log_max_pd", 0x32B, 5)])
InitHcaIn = ifc_layout("InitHcaIn", "init_hca_in", 0x100, HDR_IN)
AllocUarIn = ifc_layout("AllocUarIn", "alloc_uar_in", 0x80, HDR_IN)
AllocUarOut = ifc_layout("AllocUarOut", "alloc_uar_out", 0x80, HDR_OUT + [("uar", 0x48, 24)])
AllocPdIn = ifc_layout("AllocPdIn", "alloc_pd_in", 0x80, HDR_IN)
AllocPdOut = ifc_layout("AllocPdOut", "alloc_pd_out", 0x80, HDR_OUT + [("pd", 0x48, 24)])
QueryGidIn = ifc_layout("QueryGidIn", "query_hca_vport_gid_in", 0x80, HDR_IN + [
    ("port_num", 0x4C, 4), ("gid_index", 0x70, 16)])
QueryGidOut = ifc_layout("QueryGidOut", "query_hca_vport_gid_out", 0x80 + 128, HDR_OUT + [("gids_num", 0x60, 16)])
QUERY_GID_GID = 0x80 // 8  # byte offset of the first GID in the output

MKC = "memory_key_mkey_entry"
CreateMkeyIn = ifc_layout("CreateMkeyIn", "create_mkey_in", 0x880, HDR_IN + [
    (f"{MKC}.a", 0x91, 1), (f"{MKC}.rw", 0x92, 1), (f"{MKC}.rr", 0x93, 1), (f"{MKC}.lw", 0x94, 1),
    (f"{MKC}.lr", 0x95, 1), (f"{MKC}.access_mode_1_0", 0x96, 2), (f"{MKC}.qpn", 0xA0, 24),
    (f"{MKC}.mkey_7_0", 0xB8, 8), (f"{MKC}.length64", 0xE0, 1), (f"{MKC}.pd", 0xE8, 24),
    (f"{MKC}.start_addr", 0x100, 64), (f"{MKC}.len", 0x140, 64),
    (f"{MKC}.translations_octword_size", 0x220, 32), (f"{MKC}.log_page_size", 0x25B, 5)])
CreateMkeyOut = ifc_layout("CreateMkeyOut", "create_mkey_out", 0x80, HDR_OUT + [("mkey_index", 0x48, 24)])
DestroyMkeyIn = ifc_layout("DestroyMkeyIn", "destroy_mkey_in", 0x80, HDR_IN + [("mkey_index", 0x48, 24)])

QUEUE_PAS = 0x880 // 8  # byte offset of the page list after CREATE_EQ/CQ/QP's input
EQC, CQC = "eq_context_entry", "cq_context"
CreateEqIn = ifc_layout("CreateEqIn", "create_eq_in", 0x880, HDR_IN + [
    (f"{EQC}.log_eq_size", 0xE3, 5), (f"{EQC}.uar_page", 0xE8, 24), (f"{EQC}.intr", 0x134, 12),
    (f"{EQC}.log_page_size", 0x143, 5)])
CreateEqOut = ifc_layout("CreateEqOut", "create_eq_out", 0x80, HDR_OUT + [("eq_number", 0x58, 8)])
CreateCqIn = ifc_layout("CreateCqIn", "create_cq_in", 0x880, HDR_IN + [
    (f"{CQC}.cqe_sz", 0x88, 3), (f"{CQC}.log_cq_size", 0xE3, 5), (f"{CQC}.uar_page", 0xE8, 24),
    (f"{CQC}.c_eqn_or_apu_element", 0x120, 32), (f"{CQC}.log_page_size", 0x143, 5), (f"{CQC}.dbr_addr", 0x240, 64)])
CreateCqOut = ifc_layout("CreateCqOut", "create_cq_out", 0x80, HDR_OUT + [("cqn", 0x48, 24)])

QPC_ROWS = [
    ("qpc.st", 0xC8, 8), ("qpc.pm_state", 0xD3, 2), ("qpc.pd", 0xE8, 24), ("qpc.mtu", 0x100, 3),
    ("qpc.log_msg_max", 0x103, 5), ("qpc.log_rq_size", 0x109, 4), ("qpc.log_rq_stride", 0x10D, 3),
    ("qpc.no_sq", 0x110, 1), ("qpc.log_sq_size", 0x111, 4), ("qpc.uar_page", 0x128, 24),
    ("qpc.log_page_size", 0x163, 5), ("qpc.remote_qpn", 0x168, 24),
    ("qpc.primary_address_path.grh", 0x1A8, 1), ("qpc.primary_address_path.rlid", 0x1B0, 16),
    ("qpc.primary_address_path.ack_timeout", 0x1C0, 5), ("qpc.primary_address_path.rgid_rip", 0x200, 128),
    ("qpc.primary_address_path.vhca_port_num", 0x2A8, 8),
    ("qpc.log_ack_req_freq", 0x440, 4), ("qpc.log_sra_max", 0x448, 3), ("qpc.retry_count", 0x44D, 3),
    ("qpc.rnr_retry", 0x450, 3), ("qpc.next_send_psn", 0x488, 24), ("qpc.cqn_snd", 0x4A8, 24),
    ("qpc.log_rra_max", 0x548, 3), ("qpc.rre", 0x550, 1), ("qpc.rwe", 0x551, 1), ("qpc.min_rnr_nak", 0x563, 5),
    ("qpc.next_rcv_psn", 0x568, 24), ("qpc.cqn_rcv", 0x5A8, 24), ("qpc.dbr_addr", 0x5C0, 64),
    ("qpc.rq_type", 0x625, 3)]
CreateQpIn = ifc_layout("CreateQpIn", "create_qp_in", 0x880, HDR_IN + [("opt_param_mask", 0x80, 32)] + QPC_ROWS)
CreateQpOut = ifc_layout("CreateQpOut", "create_qp_out", 0x80, HDR_OUT + [("qpn", 0x48, 24)])
_MODIFY = HDR_IN + [("qpn", 0x48, 24), ("opt_param_mask", 0x80, 32)] + QPC_ROWS
Rst2InitIn = ifc_layout("Rst2InitIn", "rst2init_qp_in", 0x880, _MODIFY)
Init2RtrIn = ifc_layout("Init2RtrIn", "init2rtr_qp_in", 0x880, _MODIFY)
Rtr2RtsIn = ifc_layout("Rtr2RtsIn", "rtr2rts_qp_in", 0x880, _MODIFY)
Qp2ErrIn = ifc_layout("Qp2ErrIn", "qp_2err_in", 0x80, HDR_IN + [("qpn", 0x48, 24)])
QueryQpIn = ifc_layout("QueryQpIn", "query_qp_in", 0x80, HDR_IN + [("qpn", 0x48, 24)])
QueryQpOut = ifc_layout("QueryQpOut", "query_qp_out", 0x880, HDR_OUT + [("qpc.state", 0xC0, 4)])
QP_MODIFY_OUT_BITS = 0x80

COMMAND_LAYOUTS: tuple[type[Record], ...] = (
    CmdIn, CmdOut, EnableHcaIn, QueryIssiIn, QueryIssiOut, SetIssiIn, QueryPagesIn, QueryPagesOut, ManagePagesIn,
    QueryHcaCapIn, HcaCap, InitHcaIn, AllocUarIn, AllocUarOut, AllocPdIn, AllocPdOut, QueryGidIn, QueryGidOut,
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, CreateEqIn, CreateEqOut, CreateCqIn, CreateCqOut, CreateQpIn,
    CreateQpOut,
    Rst2InitIn, Init2RtrIn, Rtr2RtsIn, Qp2ErrIn, QueryQpIn, QueryQpOut)


# ----------------------------------------------------------------------------------------------- command queue
class CmdEntry(Record):
    """A 64-byte command queue entry (PRM "Command Queue Entry"; Linux device.h struct mlx5_cmd_layout)."""

    SIZE, ENDIAN = 64, "big"
    FIELDS = (
        Field("type", 0x00, "u8"), Field("inlen", 0x04, "u32"), Field("in_ptr", 0x08, "u64"),
        Field("inline_in", 0x10, "u8", count=16), Field("inline_out", 0x20, "u8", count=16),
        Field("out_ptr", 0x30, "u64"), Field("outlen", 0x38, "u32"), Field("token", 0x3C, "u8"),
        Field("signature", 0x3D, "u8"), Field("status", 0x3F, "u8", bit=1, width=7),
        Field("ownership", 0x3F, "u8", bit=0, width=1),
    )


class Mailbox(Record):
    """A command mailbox block: 512 data bytes and a chain pointer (PRM "Command Mailbox";
    Linux device.h struct mlx5_cmd_prot_block). Blocks are 1 KiB aligned."""

    SIZE, ENDIAN = 576, "big"
    FIELDS = (
        Field("data", 0x000, "u8", count=MAILBOX_DATA), Field("next", 0x230, "u64"),
        Field("block_number", 0x238, "u32"), Field("token", 0x23D, "u8"), Field("ctrl_signature", 0x23E, "u8"),
        Field("signature", 0x23F, "u8"),
    )


MAILBOX_STRIDE = 1024
MAILBOX_CTRL = (0x200, 0x23E)  # bytes the control signature covers (with itself: XOR 0xff)


# ----------------------------------------------------------------------------------------------- WQE and CQE
class CtrlSeg(Record):
    """WQE control segment (mlx5dv.h struct mlx5_wqe_ctrl_seg)."""

    SIZE, ENDIAN = 16, "big"
    FIELDS = (
        Field("opmod", 0, "u32", bit=24, width=8), Field("wqe_index", 0, "u32", bit=8, width=16),
        Field("opcode", 0, "u32", bit=0, width=8), Field("qpn", 4, "u32", bit=8, width=24),
        Field("ds", 4, "u32", bit=0, width=6), Field("signature", 8, "u8"), Field("fm_ce_se", 11, "u8"),
        Field("imm", 12, "u32"),
    )


class RaddrSeg(Record):
    """Remote address segment (mlx5dv.h struct mlx5_wqe_raddr_seg)."""

    SIZE, ENDIAN = 16, "big"
    FIELDS = (Field("raddr", 0, "u64"), Field("rkey", 8, "u32"))


class DataSeg(Record):
    """Data (scatter/gather) segment (mlx5dv.h struct mlx5_wqe_data_seg)."""

    SIZE, ENDIAN = 16, "big"
    FIELDS = (Field("byte_count", 0, "u32"), Field("lkey", 4, "u32"), Field("addr", 8, "u64"))


class Cqe64(Record):
    """A 64-byte CQE (mlx5dv.h struct mlx5_cqe64, and struct mlx5_err_cqe for the error fields)."""

    SIZE, ENDIAN = 64, "big"
    FIELDS = (
        Field("byte_cnt", 44, "u32"), Field("vendor_err_synd", 54, "u8"), Field("syndrome", 55, "u8"),
        Field("s_wqe_opcode", 56, "u8"), Field("qpn", 56, "u32", bit=0, width=24), Field("wqe_counter", 60, "u16"),
        Field("signature", 62, "u8"), Field("opcode", 63, "u8", bit=4, width=4),
        Field("owner", 63, "u8", bit=0, width=1),
    )


WQEBB = 64  # send queue basic block
DS_UNIT = 16  # ds counts 16-byte units
