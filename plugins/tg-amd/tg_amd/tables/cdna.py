"""Opcode tables of CDNA3 (gfx942), from the AMD Instinct MI300 (CDNA3) ISA reference guide.

Same row syntax as ``tg_amd.tables.rdna`` (no generation tags: one arch). MFMA rows give the
register counts of D, A, B, C (``regs``); D and C may be VGPRs or AGPRs.
"""

SOP1 = """
s_mov_b32 0x00
s_mov_b64 0x01
s_cmov_b32 0x02
s_cmov_b64 0x03
s_not_b32 0x04
s_not_b64 0x05
s_wqm_b32 0x06
s_wqm_b64 0x07
s_brev_b32 0x08
s_brev_b64 0x09
s_bcnt0_i32_b32 0x0a
s_bcnt0_i32_b64 0x0b
s_bcnt1_i32_b32 0x0c
s_bcnt1_i32_b64 0x0d
s_ff0_i32_b32 0x0e
s_ff0_i32_b64 0x0f
s_ff1_i32_b32 0x10
s_ff1_i32_b64 0x11
s_flbit_i32_b32 0x12
s_flbit_i32_b64 0x13
s_flbit_i32 0x14
s_flbit_i32_i64 0x15
s_sext_i32_i8 0x16
s_sext_i32_i16 0x17
s_bitset0_b32 0x18
s_bitset0_b64 0x19 t=b64,b32
s_bitset1_b32 0x1a
s_bitset1_b64 0x1b t=b64,b32
s_getpc_b64 0x1c sig=sdst
s_setpc_b64 0x1d sig=ssrc0
s_swappc_b64 0x1e
s_rfe_b64 0x1f sig=ssrc0
s_and_saveexec_b64 0x20
s_or_saveexec_b64 0x21
s_xor_saveexec_b64 0x22
s_andn2_saveexec_b64 0x23
s_orn2_saveexec_b64 0x24
s_nand_saveexec_b64 0x25
s_nor_saveexec_b64 0x26
s_xnor_saveexec_b64 0x27
s_quadmask_b32 0x28
s_quadmask_b64 0x29
s_movrels_b32 0x2a regsrc=1
s_movrels_b64 0x2b regsrc=1
s_movreld_b32 0x2c regsrc=1
s_movreld_b64 0x2d regsrc=1
s_abs_i32 0x30
s_andn1_saveexec_b64 0x33
s_orn1_saveexec_b64 0x34
s_andn1_wrexec_b64 0x35
s_andn2_wrexec_b64 0x36
s_bitreplicate_b64_b32 0x37
"""

SOP2 = """
s_add_u32 0x00
s_sub_u32 0x01
s_add_i32 0x02
s_sub_i32 0x03
s_addc_u32 0x04
s_subb_u32 0x05
s_min_i32 0x06
s_min_u32 0x07
s_max_i32 0x08
s_max_u32 0x09
s_cselect_b32 0x0a
s_cselect_b64 0x0b
s_and_b32 0x0c
s_and_b64 0x0d
s_or_b32 0x0e
s_or_b64 0x0f
s_xor_b32 0x10
s_xor_b64 0x11
s_andn2_b32 0x12
s_andn2_b64 0x13
s_orn2_b32 0x14
s_orn2_b64 0x15
s_nand_b32 0x16
s_nand_b64 0x17
s_nor_b32 0x18
s_nor_b64 0x19
s_xnor_b32 0x1a
s_xnor_b64 0x1b
s_lshl_b32 0x1c
s_lshl_b64 0x1d t=b64,b64,b32
s_lshr_b32 0x1e
s_lshr_b64 0x1f t=b64,b64,b32
s_ashr_i32 0x20
s_ashr_i64 0x21 t=i64,i64,b32
s_bfm_b32 0x22
s_bfm_b64 0x23 t=b64,b32
s_mul_i32 0x24
s_bfe_u32 0x25
s_bfe_i32 0x26
s_bfe_u64 0x27 t=u64,u64,u32
s_bfe_i64 0x28 t=i64,i64,u32
s_absdiff_i32 0x2a
s_mul_hi_u32 0x2c
s_mul_hi_i32 0x2d
s_lshl1_add_u32 0x2e
s_lshl2_add_u32 0x2f
s_lshl3_add_u32 0x30
s_lshl4_add_u32 0x31
s_pack_ll_b32_b16 0x32
s_pack_lh_b32_b16 0x33
s_pack_hh_b32_b16 0x34
"""

SOPC = """
s_cmp_eq_i32 0x00
s_cmp_lg_i32 0x01
s_cmp_gt_i32 0x02
s_cmp_ge_i32 0x03
s_cmp_lt_i32 0x04
s_cmp_le_i32 0x05
s_cmp_eq_u32 0x06
s_cmp_lg_u32 0x07
s_cmp_gt_u32 0x08
s_cmp_ge_u32 0x09
s_cmp_lt_u32 0x0a
s_cmp_le_u32 0x0b
s_bitcmp0_b32 0x0c
s_bitcmp1_b32 0x0d
s_bitcmp0_b64 0x0e t=b64,b64,b32
s_bitcmp1_b64 0x0f t=b64,b64,b32
s_cmp_eq_u64 0x12
s_cmp_lg_u64 0x13
"""

SOPK = """
s_movk_i32 0x00
s_cmovk_i32 0x01
s_cmpk_eq_i32 0x02
s_cmpk_lg_i32 0x03
s_cmpk_gt_i32 0x04
s_cmpk_ge_i32 0x05
s_cmpk_lt_i32 0x06
s_cmpk_le_i32 0x07
s_cmpk_eq_u32 0x08
s_cmpk_lg_u32 0x09
s_cmpk_gt_u32 0x0a
s_cmpk_ge_u32 0x0b
s_cmpk_lt_u32 0x0c
s_cmpk_le_u32 0x0d
s_addk_i32 0x0e
s_mulk_i32 0x0f
"""

SOPP = """
s_nop 0x00 sig=simm16
s_endpgm 0x01 sig=
s_branch 0x02 sig=label
s_wakeup 0x03 sig=
s_cbranch_scc0 0x04 sig=label
s_cbranch_scc1 0x05 sig=label
s_cbranch_vccz 0x06 sig=label
s_cbranch_vccnz 0x07 sig=label
s_cbranch_execz 0x08 sig=label
s_cbranch_execnz 0x09 sig=label
s_barrier 0x0a sig=
s_waitcnt 0x0c sig=waitcnt
s_sleep 0x0e sig=simm16
s_setprio 0x0f sig=simm16
s_trap 0x12 sig=simm16
s_icache_inv 0x13 sig=
"""

SMEM = """
s_load_dword 0x00
s_load_dwordx2 0x01
s_load_dwordx4 0x02
s_load_dwordx8 0x03
s_load_dwordx16 0x04
s_buffer_load_dword 0x08 sig=sdata,sbuf,soff
s_buffer_load_dwordx2 0x09 sig=sdata,sbuf,soff
s_buffer_load_dwordx4 0x0a sig=sdata,sbuf,soff
s_buffer_load_dwordx8 0x0b sig=sdata,sbuf,soff
s_buffer_load_dwordx16 0x0c sig=sdata,sbuf,soff
s_store_dword 0x10 sig=sdata,sbase,soff
s_store_dwordx2 0x11 sig=sdata,sbase,soff
s_store_dwordx4 0x12 sig=sdata,sbase,soff
s_dcache_inv 0x20 sig=
s_dcache_wb 0x21 sig=
"""

VOP1 = """
v_nop 0x00 sig=
v_mov_b32 0x01
v_readfirstlane_b32 0x02 sig=sdst,vsrc0 e64=no
v_cvt_i32_f64 0x03
v_cvt_f64_i32 0x04
v_cvt_f32_i32 0x05
v_cvt_f32_u32 0x06
v_cvt_u32_f32 0x07
v_cvt_i32_f32 0x08
v_cvt_f16_f32 0x0a
v_cvt_f32_f16 0x0b
v_cvt_rpi_i32_f32 0x0c
v_cvt_flr_i32_f32 0x0d
v_cvt_f32_f64 0x0f
v_cvt_f64_f32 0x10
v_cvt_f32_ubyte0 0x11 t=f32,u32
v_cvt_f32_ubyte1 0x12 t=f32,u32
v_cvt_f32_ubyte2 0x13 t=f32,u32
v_cvt_f32_ubyte3 0x14 t=f32,u32
v_cvt_u32_f64 0x15
v_cvt_f64_u32 0x16
v_trunc_f64 0x17
v_ceil_f64 0x18
v_rndne_f64 0x19
v_floor_f64 0x1a
v_fract_f32 0x1b
v_trunc_f32 0x1c
v_ceil_f32 0x1d
v_rndne_f32 0x1e
v_floor_f32 0x1f
v_exp_f32 0x20
v_log_f32 0x21
v_rcp_f32 0x22
v_rcp_iflag_f32 0x23
v_rsq_f32 0x24
v_rcp_f64 0x25
v_rsq_f64 0x26
v_sqrt_f32 0x27
v_sqrt_f64 0x28
v_sin_f32 0x29
v_cos_f32 0x2a
v_not_b32 0x2b
v_bfrev_b32 0x2c
v_ffbh_u32 0x2d
v_ffbl_b32 0x2e
v_ffbh_i32 0x2f
v_frexp_exp_i32_f64 0x30
v_frexp_mant_f64 0x31
v_fract_f64 0x32
v_frexp_exp_i32_f32 0x33
v_frexp_mant_f32 0x34
v_cvt_f16_u16 0x39
v_cvt_f16_i16 0x3a
v_cvt_u16_f16 0x3b
v_cvt_i16_f16 0x3c
v_rcp_f16 0x3d
v_sqrt_f16 0x3e
v_rsq_f16 0x3f
v_log_f16 0x40
v_exp_f16 0x41
v_floor_f16 0x44
v_ceil_f16 0x45
v_trunc_f16 0x46
v_rndne_f16 0x47
v_fract_f16 0x48
v_sin_f16 0x49
v_cos_f16 0x4a
v_cvt_norm_i16_f16 0x4d
v_cvt_norm_u16_f16 0x4e
v_sat_pk_u8_i16 0x4f
v_swap_b32 0x51 sig=vdst,vsrc0 e64=no
v_accvgpr_mov_b32 0x52 sig=adst,asrc0 e64=no
"""

VOP2 = """
v_cndmask_b32 0x00 sig=vdst,src0,vsrc1,vcc
v_add_f32 0x01
v_sub_f32 0x02
v_subrev_f32 0x03
v_fmac_f64 0x04
v_mul_f32 0x05
v_mul_i32_i24 0x06
v_mul_hi_i32_i24 0x07
v_mul_u32_u24 0x08
v_mul_hi_u32_u24 0x09
v_min_f32 0x0a
v_max_f32 0x0b
v_min_i32 0x0c
v_max_i32 0x0d
v_min_u32 0x0e
v_max_u32 0x0f
v_lshrrev_b32 0x10
v_ashrrev_i32 0x11
v_lshlrev_b32 0x12
v_and_b32 0x13
v_or_b32 0x14
v_xor_b32 0x15
v_add_co_u32 0x19 sig=vdst,vcc,src0,vsrc1
v_sub_co_u32 0x1a sig=vdst,vcc,src0,vsrc1
v_subrev_co_u32 0x1b sig=vdst,vcc,src0,vsrc1
v_addc_co_u32 0x1c sig=vdst,vcc,src0,vsrc1,vcc
v_subb_co_u32 0x1d sig=vdst,vcc,src0,vsrc1,vcc
v_subbrev_co_u32 0x1e sig=vdst,vcc,src0,vsrc1,vcc
v_add_f16 0x1f
v_sub_f16 0x20
v_subrev_f16 0x21
v_mul_f16 0x22
v_add_u16 0x26
v_sub_u16 0x27
v_subrev_u16 0x28
v_mul_lo_u16 0x29
v_lshlrev_b16 0x2a
v_lshrrev_b16 0x2b
v_ashrrev_i16 0x2c
v_max_f16 0x2d
v_min_f16 0x2e
v_max_u16 0x2f
v_max_i16 0x30
v_min_u16 0x31
v_min_i16 0x32
v_ldexp_f16 0x33 t=f16,f16,i16
v_add_u32 0x34
v_sub_u32 0x35
v_subrev_u32 0x36
v_fmac_f32 0x3b
v_xnor_b32 0x3d
"""

VOPC = """
v_cmp_lt_f16 0x21
v_cmp_eq_f16 0x22
v_cmp_le_f16 0x23
v_cmp_gt_f16 0x24
v_cmp_lg_f16 0x25
v_cmp_ge_f16 0x26
v_cmp_neq_f16 0x2d
v_cmp_lt_f32 0x41
v_cmp_eq_f32 0x42
v_cmp_le_f32 0x43
v_cmp_gt_f32 0x44
v_cmp_lg_f32 0x45
v_cmp_ge_f32 0x46
v_cmp_o_f32 0x47
v_cmp_u_f32 0x48
v_cmp_neq_f32 0x4d
v_cmp_lt_f64 0x61
v_cmp_eq_f64 0x62
v_cmp_le_f64 0x63
v_cmp_gt_f64 0x64
v_cmp_ge_f64 0x66
v_cmp_lt_i32 0xc1
v_cmp_eq_i32 0xc2
v_cmp_le_i32 0xc3
v_cmp_gt_i32 0xc4
v_cmp_ne_i32 0xc5
v_cmp_ge_i32 0xc6
v_cmp_lt_u32 0xc9
v_cmp_eq_u32 0xca
v_cmp_le_u32 0xcb
v_cmp_gt_u32 0xcc
v_cmp_ne_u32 0xcd
v_cmp_ge_u32 0xce
v_cmp_lt_i64 0xe1
v_cmp_eq_i64 0xe2
v_cmp_ne_i64 0xe5
v_cmp_lt_u64 0xe9
v_cmp_eq_u64 0xea
v_cmp_ne_u64 0xed
v_cmp_class_f32 0x10 t=f32,f32,u32
v_cmpx_lt_f32 0x51
v_cmpx_eq_f32 0x52
v_cmpx_gt_f32 0x54
v_cmpx_lt_i32 0xd1
v_cmpx_eq_i32 0xd2
v_cmpx_gt_i32 0xd4
v_cmpx_ne_i32 0xd5
v_cmpx_lt_u32 0xd9
v_cmpx_eq_u32 0xda
v_cmpx_gt_u32 0xdc
v_cmpx_ne_u32 0xdd
"""

VOP3 = """
v_mad_i32_i24 0x1c2 n=3
v_mad_u32_u24 0x1c3 n=3
v_bfe_u32 0x1c8 n=3
v_bfe_i32 0x1c9 n=3
v_bfi_b32 0x1ca n=3
v_fma_f32 0x1cb n=3
v_fma_f64 0x1cc n=3
v_alignbit_b32 0x1ce n=3
v_alignbyte_b32 0x1cf n=3
v_min3_f32 0x1d0 n=3
v_min3_i32 0x1d1 n=3
v_min3_u32 0x1d2 n=3
v_max3_f32 0x1d3 n=3
v_max3_i32 0x1d4 n=3
v_max3_u32 0x1d5 n=3
v_med3_f32 0x1d6 n=3
v_med3_i32 0x1d7 n=3
v_med3_u32 0x1d8 n=3
v_div_fixup_f32 0x1de n=3
v_div_fixup_f64 0x1df n=3
v_perm_b32 0x1ed n=3
v_xad_u32 0x1f3 n=3
v_lshl_add_u32 0x1fd n=3
v_add_lshl_u32 0x1fe n=3
v_add3_u32 0x1ff n=3
v_lshl_or_b32 0x200 n=3
v_and_or_b32 0x201 n=3
v_or3_b32 0x202 n=3
v_add_f64 0x280
v_mul_f64 0x281
v_min_f64 0x282
v_max_f64 0x283
v_ldexp_f64 0x284 t=f64,f64,i32
v_mul_lo_u32 0x285
v_mul_hi_u32 0x286
v_mul_hi_i32 0x287
v_ldexp_f32 0x288 t=f32,f32,i32
v_readlane_b32 0x289 sig=sdst,vsrc0,ssrc1
v_writelane_b32 0x28a sig=vdst,ssrc0,ssrc1
v_bcnt_u32_b32 0x28b
v_mbcnt_lo_u32_b32 0x28c
v_mbcnt_hi_u32_b32 0x28d
v_lshlrev_b64 0x28f t=b64,b32,b64
v_lshrrev_b64 0x290 t=b64,b32,b64
v_ashrrev_i64 0x291 t=i64,b32,i64
v_bfm_b32 0x293
v_cvt_pkrtz_f16_f32 0x296 t=b32,f32
v_cvt_pk_u16_u32 0x297
v_cvt_pk_i16_i32 0x298
v_add_i32 0x29c
v_sub_i32 0x29d
v_pack_b32_f16 0x2a0 t=b32,f16,f16
"""

VOP3SD = """
v_div_scale_f32 0x1e0 sig=vdst,sdst,src0,src1,src2
v_div_scale_f64 0x1e1 sig=vdst,sdst,src0,src1,src2
v_mad_u64_u32 0x1e8 sig=vdst,sdst,src0,src1,src2 t=u64,u32,u32,u64
v_mad_i64_i32 0x1e9 sig=vdst,sdst,src0,src1,src2 t=i64,i32,i32,i64
"""

VOP3P = """
v_pk_mad_i16 0x00 n=3
v_pk_mul_lo_u16 0x01
v_pk_add_i16 0x02
v_pk_sub_i16 0x03
v_pk_lshlrev_b16 0x04
v_pk_lshrrev_b16 0x05
v_pk_ashrrev_i16 0x06
v_pk_max_i16 0x07
v_pk_min_i16 0x08
v_pk_mad_u16 0x09 n=3
v_pk_add_u16 0x0a
v_pk_sub_u16 0x0b
v_pk_max_u16 0x0c
v_pk_min_u16 0x0d
v_pk_fma_f16 0x0e n=3
v_pk_add_f16 0x0f
v_pk_mul_f16 0x10
v_pk_min_f16 0x11
v_pk_max_f16 0x12
v_dot2_f32_f16 0x23 n=3 t=f32,f16,f16,f32 nomods=1
v_dot2_i32_i16 0x26 n=3 t=i32,i16,i16,i32 nomods=1
v_dot2_u32_u16 0x27 n=3 t=u32,u16,u16,u32 nomods=1
v_dot4_i32_i8 0x28 n=3 t=i32,i8,i8,i32 nomods=1
v_dot4_u32_u8 0x29 n=3 t=u32,u8,u8,u32 nomods=1
v_pk_fma_f32 0x30 n=3 t=f64
v_pk_mul_f32 0x31 t=f64
v_pk_add_f32 0x32 t=f64
v_pk_mov_b32 0x33 t=b64
v_accvgpr_read_b32 0x58 sig=vdst,asrc0
v_accvgpr_write_b32 0x59 sig=adst,src0
"""

MAI = """
v_mfma_f32_32x32x1_2b_f32 0x40 regs=32,1,1,32
v_mfma_f32_16x16x1_4b_f32 0x41 regs=16,1,1,16
v_mfma_f32_4x4x1_16b_f32 0x42 regs=4,1,1,4
v_mfma_f32_32x32x2_f32 0x44 regs=16,1,1,16
v_mfma_f32_16x16x4_f32 0x45 regs=4,1,1,4
v_mfma_f32_32x32x4_2b_f16 0x48 regs=32,2,2,32
v_mfma_f32_16x16x4_4b_f16 0x49 regs=16,2,2,16
v_mfma_f32_4x4x4_16b_f16 0x4a regs=4,2,2,4
v_mfma_f32_32x32x8_f16 0x4c regs=16,2,2,16
v_mfma_f32_16x16x16_f16 0x4d regs=4,2,2,4
v_mfma_i32_32x32x4_2b_i8 0x50 regs=32,1,1,32
v_mfma_i32_16x16x4_4b_i8 0x51 regs=16,1,1,16
v_mfma_i32_4x4x4_16b_i8 0x52 regs=4,1,1,4
v_mfma_i32_16x16x32_i8 0x57 regs=4,2,2,4
v_mfma_i32_32x32x16_i8 0x56 regs=16,2,2,16
v_mfma_f32_32x32x4_2b_bf16 0x5d regs=32,2,2,32
v_mfma_f32_16x16x4_4b_bf16 0x5e regs=16,2,2,16
v_mfma_f32_4x4x4_16b_bf16 0x5f regs=4,2,2,4
v_mfma_f32_32x32x8_bf16 0x60 regs=16,2,2,16
v_mfma_f32_16x16x16_bf16 0x61 regs=4,2,2,4
v_mfma_f64_16x16x4_f64 0x6e regs=8,2,2,8
v_mfma_f64_4x4x4_4b_f64 0x6f regs=2,2,2,2
"""

DS = """
ds_add_u32 0x00 sig=addr,data0
ds_sub_u32 0x01 sig=addr,data0
ds_min_i32 0x05 sig=addr,data0
ds_max_i32 0x06 sig=addr,data0
ds_min_u32 0x07 sig=addr,data0
ds_max_u32 0x08 sig=addr,data0
ds_and_b32 0x09 sig=addr,data0
ds_or_b32 0x0a sig=addr,data0
ds_xor_b32 0x0b sig=addr,data0
ds_write_b32 0x0d sig=addr,data0
ds_write2_b32 0x0e sig=addr,data0,data1
ds_write2st64_b32 0x0f sig=addr,data0,data1
ds_add_f32 0x15 sig=addr,data0
ds_write_b8 0x1e sig=addr,data0
ds_write_b16 0x1f sig=addr,data0
ds_add_rtn_u32 0x20 sig=vdst,addr,data0
ds_read_b32 0x36 sig=vdst,addr
ds_read2_b32 0x37 sig=vdst,addr t=b64
ds_read2st64_b32 0x38 sig=vdst,addr t=b64
ds_read_i8 0x39 sig=vdst,addr t=b32
ds_read_u8 0x3a sig=vdst,addr t=b32
ds_read_i16 0x3b sig=vdst,addr t=b32
ds_read_u16 0x3c sig=vdst,addr t=b32
ds_swizzle_b32 0x3d sig=vdst,addr
ds_permute_b32 0x3e sig=vdst,addr,data0
ds_bpermute_b32 0x3f sig=vdst,addr,data0
ds_write_b64 0x4d sig=addr,data0
ds_write2_b64 0x4e sig=addr,data0,data1
ds_write2st64_b64 0x4f sig=addr,data0,data1
ds_read_b64 0x76 sig=vdst,addr
ds_read2_b64 0x77 sig=vdst,addr t=b128
ds_read2st64_b64 0x78 sig=vdst,addr t=b128
ds_write_b96 0xde sig=addr,data0
ds_write_b128 0xdf sig=addr,data0
ds_read_b96 0xfe sig=vdst,addr
ds_read_b128 0xff sig=vdst,addr
"""

GLOBAL = """
global_load_ubyte 0x10 t=b32
global_load_sbyte 0x11 t=b32
global_load_ushort 0x12 t=b32
global_load_sshort 0x13 t=b32
global_load_dword 0x14
global_load_dwordx2 0x15
global_load_dwordx3 0x16
global_load_dwordx4 0x17
global_store_byte 0x18 t=b32
global_store_byte_d16_hi 0x19 t=b32
global_store_short 0x1a t=b32
global_store_short_d16_hi 0x1b t=b32
global_store_dword 0x1c
global_store_dwordx2 0x1d
global_store_dwordx3 0x1e
global_store_dwordx4 0x1f
global_load_short_d16 0x24 t=b32
global_load_short_d16_hi 0x25 t=b32
global_atomic_swap 0x40 atomic=1
global_atomic_add 0x42 atomic=1
global_atomic_sub 0x43 atomic=1
global_atomic_smin 0x44 atomic=1
global_atomic_umin 0x45 atomic=1
global_atomic_smax 0x46 atomic=1
global_atomic_umax 0x47 atomic=1
global_atomic_and 0x48 atomic=1
global_atomic_or 0x49 atomic=1
global_atomic_xor 0x4a atomic=1
global_atomic_add_f32 0x4d atomic=1
"""

FLAT = """
flat_load_dword 0x14
flat_load_dwordx2 0x15
flat_load_dwordx4 0x17
flat_store_dword 0x1c
flat_store_dwordx2 0x1d
flat_store_dwordx4 0x1f
"""

TABLES = {"SOP1": SOP1, "SOP2": SOP2, "SOPC": SOPC, "SOPK": SOPK, "SOPP": SOPP, "SMEM": SMEM, "VOP1": VOP1,
          "VOP2": VOP2, "VOPC": VOPC, "VOP3": VOP3, "VOP3SD": VOP3SD, "VOP3P": VOP3P, "MAI": MAI, "DS": DS,
          "GLOBAL": GLOBAL, "FLAT": FLAT}
