"""Opcode tables of RDNA3 (gfx11) and RDNA4 (gfx12), from the RDNA3 and RDNA4 ISA reference guides.

One text block per format; a row is ``mnemonic opcode [key=value ...] [@11|@12]``. A row without
``@`` exists on both generations; ``@11``/``@12`` restricts it (RDNA4 renamed or dropped some).
Keys (parsed by ``tg_amd.isa``): ``sig`` operand roles in assembly order (else the format's
default), ``t`` operand types dst,src0,src1,src2 (else read from the mnemonic), ``regs`` register
counts dst,src0,src1,src2, ``e64`` the VOP3 opcode of a VOP1/VOP2/VOPC op (``no``: none).
"""

SOP1 = """
s_mov_b32 0x00
s_mov_b64 0x01
s_cmov_b32 0x02
s_cmov_b64 0x03
s_brev_b32 0x04
s_brev_b64 0x05
s_ctz_i32_b32 0x08
s_ctz_i32_b64 0x09
s_clz_i32_u32 0x0a
s_clz_i32_u64 0x0b
s_cls_i32 0x0c
s_cls_i32_i64 0x0d
s_sext_i32_i8 0x0e
s_sext_i32_i16 0x0f
s_bitset0_b32 0x10
s_bitset0_b64 0x11 t=b64,b32
s_bitset1_b32 0x12
s_bitset1_b64 0x13 t=b64,b32
s_bitreplicate_b64_b32 0x14
s_abs_i32 0x15
s_bcnt0_i32_b32 0x16
s_bcnt0_i32_b64 0x17
s_bcnt1_i32_b32 0x18
s_bcnt1_i32_b64 0x19
s_quadmask_b32 0x1a
s_quadmask_b64 0x1b
s_wqm_b32 0x1c
s_wqm_b64 0x1d
s_not_b32 0x1e
s_not_b64 0x1f
s_and_saveexec_b32 0x20
s_and_saveexec_b64 0x21
s_or_saveexec_b32 0x22
s_or_saveexec_b64 0x23
s_xor_saveexec_b32 0x24
s_xor_saveexec_b64 0x25
s_nand_saveexec_b32 0x26
s_nand_saveexec_b64 0x27
s_nor_saveexec_b32 0x28
s_nor_saveexec_b64 0x29
s_xnor_saveexec_b32 0x2a
s_xnor_saveexec_b64 0x2b
s_and_not0_saveexec_b32 0x2c
s_and_not0_saveexec_b64 0x2d
s_or_not0_saveexec_b32 0x2e
s_or_not0_saveexec_b64 0x2f
s_and_not1_saveexec_b32 0x30
s_and_not1_saveexec_b64 0x31
s_or_not1_saveexec_b32 0x32
s_or_not1_saveexec_b64 0x33
s_and_not0_wrexec_b32 0x34
s_and_not0_wrexec_b64 0x35
s_and_not1_wrexec_b32 0x36
s_and_not1_wrexec_b64 0x37
s_movrels_b32 0x40 regsrc=1
s_movrels_b64 0x41 regsrc=1
s_movreld_b32 0x42 regsrc=1
s_movreld_b64 0x43 regsrc=1
s_getpc_b64 0x47 sig=sdst
s_setpc_b64 0x48 sig=ssrc0
s_swappc_b64 0x49
s_rfe_b64 0x4a sig=ssrc0
s_barrier_signal 0x4e sig=ssrc0 @12
s_barrier_signal_isfirst 0x4f sig=ssrc0 @12
"""

SOP2 = """
s_add_u32 0x00 @11
s_sub_u32 0x01 @11
s_add_i32 0x02 @11
s_sub_i32 0x03 @11
s_addc_u32 0x04 @11
s_subb_u32 0x05 @11
s_add_co_u32 0x00 @12
s_sub_co_u32 0x01 @12
s_add_co_i32 0x02 @12
s_sub_co_i32 0x03 @12
s_add_co_ci_u32 0x04 @12
s_sub_co_ci_u32 0x05 @12
s_absdiff_i32 0x06
s_lshl_b32 0x08
s_lshl_b64 0x09 t=b64,b64,b32
s_lshr_b32 0x0a
s_lshr_b64 0x0b t=b64,b64,b32
s_ashr_i32 0x0c
s_ashr_i64 0x0d t=i64,i64,b32
s_lshl1_add_u32 0x0e
s_lshl2_add_u32 0x0f
s_lshl3_add_u32 0x10
s_lshl4_add_u32 0x11
s_min_i32 0x12
s_min_u32 0x13
s_max_i32 0x14
s_max_u32 0x15
s_and_b32 0x16
s_and_b64 0x17
s_or_b32 0x18
s_or_b64 0x19
s_xor_b32 0x1a
s_xor_b64 0x1b
s_nand_b32 0x1c
s_nand_b64 0x1d
s_nor_b32 0x1e
s_nor_b64 0x1f
s_xnor_b32 0x20
s_xnor_b64 0x21
s_and_not1_b32 0x22
s_and_not1_b64 0x23
s_or_not1_b32 0x24
s_or_not1_b64 0x25
s_bfe_u32 0x26
s_bfe_i32 0x27
s_bfe_u64 0x28 t=u64,u64,u32
s_bfe_i64 0x29 t=i64,i64,u32
s_bfm_b32 0x2a
s_bfm_b64 0x2b t=b64,b32
s_mul_i32 0x2c
s_mul_hi_u32 0x2d
s_mul_hi_i32 0x2e
s_cselect_b32 0x30
s_cselect_b64 0x31
s_pack_ll_b32_b16 0x32
s_pack_lh_b32_b16 0x33
s_pack_hh_b32_b16 0x34
s_pack_hl_b32_b16 0x35
s_add_nc_u64 0x53 @12
s_sub_nc_u64 0x54 @12
s_mul_u64 0x55 @12
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
s_cmp_eq_u64 0x10
s_cmp_lg_u64 0x11
"""

SOPK = """
s_movk_i32 0x00
s_cmovk_i32 0x02
s_cmpk_eq_i32 0x03 @11
s_cmpk_lg_i32 0x04 @11
s_cmpk_gt_i32 0x05 @11
s_cmpk_ge_i32 0x06 @11
s_cmpk_lt_i32 0x07 @11
s_cmpk_le_i32 0x08 @11
s_cmpk_eq_u32 0x09 @11
s_cmpk_lg_u32 0x0a @11
s_cmpk_gt_u32 0x0b @11
s_cmpk_ge_u32 0x0c @11
s_cmpk_lt_u32 0x0d @11
s_cmpk_le_u32 0x0e @11
s_addk_i32 0x0f @11
s_addk_co_i32 0x0f @12
s_mulk_i32 0x10
"""

SOPP = """
s_nop 0x00 sig=simm16
s_sleep 0x03 sig=simm16
s_clause 0x05 sig=simm16
s_waitcnt 0x09 sig=waitcnt @11
s_wait_idle 0x0a sig=
s_trap 0x10 sig=simm16
s_barrier_wait 0x14 sig=simm16 @12
s_code_end 0x1f sig=
s_branch 0x20 sig=label
s_cbranch_scc0 0x21 sig=label
s_cbranch_scc1 0x22 sig=label
s_cbranch_vccz 0x23 sig=label
s_cbranch_vccnz 0x24 sig=label
s_cbranch_execz 0x25 sig=label
s_cbranch_execnz 0x26 sig=label
s_endpgm 0x30 sig=
s_wakeup 0x34 sig= @11
s_setprio 0x35 sig=simm16
s_icache_inv 0x3c sig=
s_barrier 0x3d sig= @11
s_wait_loadcnt 0x40 sig=simm16 @12
s_wait_storecnt 0x41 sig=simm16 @12
s_wait_samplecnt 0x42 sig=simm16 @12
s_wait_bvhcnt 0x43 sig=simm16 @12
s_wait_expcnt 0x44 sig=simm16 @12
s_wait_dscnt 0x46 sig=simm16 @12
s_wait_kmcnt 0x47 sig=simm16 @12
s_wait_loadcnt_dscnt 0x48 sig=simm16 @12
s_wait_storecnt_dscnt 0x49 sig=simm16 @12
"""

SMEM = """
s_load_b32 0x00
s_load_b64 0x01
s_load_b128 0x02
s_load_b256 0x03
s_load_b512 0x04
s_load_b96 0x05 @12
s_buffer_load_b32 0x08 sig=sdata,sbuf,soff @11
s_buffer_load_b64 0x09 sig=sdata,sbuf,soff @11
s_buffer_load_b128 0x0a sig=sdata,sbuf,soff @11
s_buffer_load_b256 0x0b sig=sdata,sbuf,soff @11
s_buffer_load_b512 0x0c sig=sdata,sbuf,soff @11
s_buffer_load_b32 0x10 sig=sdata,sbuf,soff @12
s_buffer_load_b64 0x11 sig=sdata,sbuf,soff @12
s_buffer_load_b128 0x12 sig=sdata,sbuf,soff @12
s_buffer_load_b256 0x13 sig=sdata,sbuf,soff @12
s_buffer_load_b512 0x14 sig=sdata,sbuf,soff @12
s_dcache_inv 0x21 sig= @11
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
v_cvt_nearest_i32_f32 0x0c
v_cvt_floor_i32_f32 0x0d
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
v_fract_f32 0x20
v_trunc_f32 0x21
v_ceil_f32 0x22
v_rndne_f32 0x23
v_floor_f32 0x24
v_exp_f32 0x25
v_log_f32 0x27
v_rcp_f32 0x2a
v_rcp_iflag_f32 0x2b
v_rsq_f32 0x2e
v_rcp_f64 0x2f
v_rsq_f64 0x31
v_sqrt_f32 0x33
v_sqrt_f64 0x34
v_sin_f32 0x35
v_cos_f32 0x36
v_not_b32 0x37
v_bfrev_b32 0x38
v_clz_i32_u32 0x39
v_ctz_i32_b32 0x3a
v_cls_i32 0x3b
v_frexp_exp_i32_f64 0x3c
v_frexp_mant_f64 0x3d
v_fract_f64 0x3e
v_frexp_exp_i32_f32 0x3f
v_frexp_mant_f32 0x40
v_cvt_f16_u16 0x50
v_cvt_f16_i16 0x51
v_cvt_u16_f16 0x52
v_cvt_i16_f16 0x53
v_rcp_f16 0x54
v_sqrt_f16 0x55
v_rsq_f16 0x56
v_log_f16 0x57
v_exp_f16 0x58
v_floor_f16 0x5b
v_ceil_f16 0x5c
v_trunc_f16 0x5d
v_rndne_f16 0x5e
v_fract_f16 0x5f
v_sin_f16 0x60
v_cos_f16 0x61
v_cvt_i32_i16 0x6a
v_cvt_u32_u16 0x6b
"""

VOP2 = """
v_cndmask_b32 0x01 sig=vdst,src0,vsrc1,vcc
v_add_f32 0x03
v_sub_f32 0x04
v_subrev_f32 0x05
v_mul_f32 0x08
v_mul_i32_i24 0x09
v_mul_hi_i32_i24 0x0a
v_mul_u32_u24 0x0b
v_mul_hi_u32_u24 0x0c
v_min_f32 0x0f @11
v_max_f32 0x10 @11
v_min_num_f32 0x15 @12
v_max_num_f32 0x16 @12
v_min_i32 0x11
v_max_i32 0x12
v_min_u32 0x13
v_max_u32 0x14
v_lshlrev_b32 0x18
v_lshrrev_b32 0x19
v_ashrrev_i32 0x1a
v_and_b32 0x1b
v_or_b32 0x1c
v_xor_b32 0x1d
v_xnor_b32 0x1e
v_add_co_ci_u32 0x20 sig=vdst,vcc,src0,vsrc1,vcc
v_sub_co_ci_u32 0x21 sig=vdst,vcc,src0,vsrc1,vcc
v_subrev_co_ci_u32 0x22 sig=vdst,vcc,src0,vsrc1,vcc
v_add_nc_u32 0x25
v_sub_nc_u32 0x26
v_subrev_nc_u32 0x27
v_fmac_f32 0x2b
v_fmamk_f32 0x2c sig=vdst,src0,k,vsrc1 e64=no
v_fmaak_f32 0x2d sig=vdst,src0,vsrc1,k e64=no
v_cvt_pk_rtz_f16_f32 0x2f t=b32,f32
v_add_f16 0x32
v_sub_f16 0x33
v_subrev_f16 0x34
v_mul_f16 0x35
v_fmac_f16 0x36
v_max_f16 0x39 @11
v_min_f16 0x3a @11
v_max_num_f16 0x31 @12
v_min_num_f16 0x30 @12
v_ldexp_f16 0x3b t=f16,f16,i16
v_add_f64 0x02 @12
v_mul_f64 0x06 @12
v_lshlrev_b64 0x1f t=b64,b32,b64 @12
"""

VOPC = """
v_cmp_lt_f16 0x01
v_cmp_eq_f16 0x02
v_cmp_le_f16 0x03
v_cmp_gt_f16 0x04
v_cmp_lg_f16 0x05
v_cmp_ge_f16 0x06
v_cmp_neq_f16 0x0d
v_cmp_lt_f32 0x11
v_cmp_eq_f32 0x12
v_cmp_le_f32 0x13
v_cmp_gt_f32 0x14
v_cmp_lg_f32 0x15
v_cmp_ge_f32 0x16
v_cmp_o_f32 0x17
v_cmp_u_f32 0x18
v_cmp_neq_f32 0x1d
v_cmp_lt_f64 0x21
v_cmp_eq_f64 0x22
v_cmp_le_f64 0x23
v_cmp_gt_f64 0x24
v_cmp_ge_f64 0x26
v_cmp_lt_i32 0x41
v_cmp_eq_i32 0x42
v_cmp_le_i32 0x43
v_cmp_gt_i32 0x44
v_cmp_ne_i32 0x45
v_cmp_ge_i32 0x46
v_cmp_lt_u32 0x49
v_cmp_eq_u32 0x4a
v_cmp_le_u32 0x4b
v_cmp_gt_u32 0x4c
v_cmp_ne_u32 0x4d
v_cmp_ge_u32 0x4e
v_cmp_lt_i64 0x51
v_cmp_eq_i64 0x52
v_cmp_ne_i64 0x55
v_cmp_lt_u64 0x59
v_cmp_eq_u64 0x5a
v_cmp_ne_u64 0x5d
v_cmp_class_f32 0x7e t=f32,f32,u32
v_cmpx_lt_f32 0x91
v_cmpx_eq_f32 0x92
v_cmpx_gt_f32 0x94
v_cmpx_lt_i32 0xc1
v_cmpx_eq_i32 0xc2
v_cmpx_gt_i32 0xc4
v_cmpx_ne_i32 0xc5
v_cmpx_lt_u32 0xc9
v_cmpx_eq_u32 0xca
v_cmpx_gt_u32 0xcc
v_cmpx_ne_u32 0xcd
"""

VOP3 = """
v_mad_i32_i24 0x20a n=3
v_mad_u32_u24 0x20b n=3
v_bfe_u32 0x210 n=3
v_bfe_i32 0x211 n=3
v_bfi_b32 0x212 n=3
v_fma_f32 0x213 n=3
v_fma_f64 0x214 n=3
v_alignbit_b32 0x216 n=3
v_alignbyte_b32 0x217 n=3
v_min3_f32 0x219 n=3 @11
v_min3_i32 0x21a n=3
v_min3_u32 0x21b n=3
v_max3_f32 0x21c n=3 @11
v_max3_i32 0x21d n=3
v_max3_u32 0x21e n=3
v_med3_f32 0x21f n=3 @11
v_med3_i32 0x220 n=3
v_med3_u32 0x221 n=3
v_div_fixup_f32 0x227 n=3
v_div_fixup_f64 0x228 n=3
v_xor3_b32 0x240 n=3
v_perm_b32 0x244 n=3
v_xad_u32 0x245 n=3
v_lshl_add_u32 0x246 n=3
v_add_lshl_u32 0x247 n=3
v_fma_f16 0x248 n=3
v_add3_u32 0x255 n=3
v_lshl_or_b32 0x256 n=3
v_and_or_b32 0x257 n=3
v_or3_b32 0x258 n=3
v_mad_u32_u16 0x259 n=3 t=u32,u16,u16,u32
v_mad_i32_i16 0x25a n=3 t=i32,i16,i16,i32
v_cndmask_b16 0x25d n=3 sig=vdst,src0,src1,mask t=b16,b16,b16,b32
v_ldexp_f32 0x31c t=f32,f32,i32
v_bfm_b32 0x31d
v_bcnt_u32_b32 0x31e
v_mbcnt_lo_u32_b32 0x31f
v_mbcnt_hi_u32_b32 0x320
v_cvt_pk_u16_u32 0x323
v_cvt_pk_i16_i32 0x324
v_sub_nc_i32 0x325
v_add_nc_i32 0x326
v_add_f64 0x327 @11
v_mul_f64 0x328 @11
v_ldexp_f64 0x32b t=f64,f64,i32
v_mul_lo_u32 0x32c
v_mul_hi_u32 0x32d
v_mul_hi_i32 0x32e
v_lshlrev_b64 0x33c t=b64,b32,b64 @11
v_lshrrev_b64 0x33d t=b64,b32,b64
v_ashrrev_i64 0x33e t=i64,b32,i64
v_readlane_b32 0x360 sig=sdst,vsrc0,ssrc1
v_writelane_b32 0x361 sig=vdst,ssrc0,ssrc1
v_pack_b32_f16 0x311 t=b32,f16,f16
"""

VOP3SD = """
v_div_scale_f32 0x2fc sig=vdst,sdst,src0,src1,src2
v_div_scale_f64 0x2fd sig=vdst,sdst,src0,src1,src2
v_mad_u64_u32 0x2fe sig=vdst,sdst,src0,src1,src2 t=u64,u32,u32,u64 @11
v_mad_i64_i32 0x2ff sig=vdst,sdst,src0,src1,src2 t=i64,i32,i32,i64 @11
v_mad_co_u64_u32 0x2fe sig=vdst,sdst,src0,src1,src2 t=u64,u32,u32,u64 @12
v_mad_co_i64_i32 0x2ff sig=vdst,sdst,src0,src1,src2 t=i64,i32,i32,i64 @12
v_add_co_u32 0x300 sig=vdst,sdst,src0,src1
v_sub_co_u32 0x301 sig=vdst,sdst,src0,src1
v_subrev_co_u32 0x302 sig=vdst,sdst,src0,src1
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
v_pk_min_f16 0x11 @11
v_pk_max_f16 0x12 @11
v_pk_min_num_f16 0x1b @12
v_pk_max_num_f16 0x1c @12
v_dot2_f32_f16 0x13 n=3 t=f32,f16,f16,f32
v_dot2_f32_bf16 0x1a n=3 t=f32,bf16,bf16,f32
v_dot4_i32_iu8 0x16 n=3 t=i32,iu8,iu8,i32 nomods=1
v_dot4_u32_u8 0x17 n=3 t=u32,u8,u8,u32
v_dot8_i32_iu4 0x18 n=3 t=i32,iu4,iu4,i32 nomods=1
v_dot8_u32_u4 0x19 n=3 t=u32,u4,u4,u32
v_wmma_f32_16x16x16_f16 0x40 n=3 wmma=1 regs=8,8,8,8 @11
v_wmma_f32_16x16x16_bf16 0x41 n=3 wmma=1 regs=8,8,8,8 @11
v_wmma_f16_16x16x16_f16 0x42 n=3 wmma=1 regs=8,8,8,8 @11
v_wmma_bf16_16x16x16_bf16 0x43 n=3 wmma=1 regs=8,8,8,8 @11
v_wmma_i32_16x16x16_iu8 0x44 n=3 wmma=1 regs=8,4,4,8 @11
v_wmma_i32_16x16x16_iu4 0x45 n=3 wmma=1 regs=8,2,2,8 @11
v_wmma_f32_16x16x16_f16 0x40 n=3 wmma=1 regs=8,4,4,8 @12
v_wmma_f32_16x16x16_bf16 0x41 n=3 wmma=1 regs=8,4,4,8 @12
v_wmma_f16_16x16x16_f16 0x42 n=3 wmma=1 regs=4,4,4,4 @12
v_wmma_bf16_16x16x16_bf16 0x43 n=3 wmma=1 regs=4,4,4,4 @12
v_wmma_i32_16x16x16_iu8 0x44 n=3 wmma=1 regs=8,2,2,8 @12
v_wmma_i32_16x16x16_iu4 0x45 n=3 wmma=1 regs=8,1,1,8 @12
"""

# VOPD: one opcode per half; Y has a few more (the X opcode field is 4 bits, Y 5)
VOPD_X = """
v_dual_fmac_f32 0x00
v_dual_fmaak_f32 0x01 sig=vdst,src0,vsrc1,k
v_dual_fmamk_f32 0x02 sig=vdst,src0,k,vsrc1
v_dual_mul_f32 0x03
v_dual_add_f32 0x04
v_dual_sub_f32 0x05
v_dual_subrev_f32 0x06
v_dual_mul_dx9_zero_f32 0x07
v_dual_mov_b32 0x08 sig=vdst,src0
v_dual_cndmask_b32 0x09
v_dual_max_f32 0x0a @11
v_dual_min_f32 0x0b @11
v_dual_max_num_f32 0x0a @12
v_dual_min_num_f32 0x0b @12
v_dual_dot2acc_f32_f16 0x0c @11
"""
VOPD_Y = VOPD_X + """
v_dual_add_nc_u32 0x10
v_dual_lshlrev_b32 0x11
v_dual_and_b32 0x12
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
ds_store_b32 0x0d sig=addr,data0
ds_store_2addr_b32 0x0e sig=addr,data0,data1
ds_store_2addr_stride64_b32 0x0f sig=addr,data0,data1
ds_add_f32 0x15 sig=addr,data0
ds_store_b8 0x1e sig=addr,data0
ds_store_b16 0x1f sig=addr,data0
ds_add_rtn_u32 0x20 sig=vdst,addr,data0
ds_swizzle_b32 0x35 sig=vdst,addr
ds_load_b32 0x36 sig=vdst,addr
ds_load_2addr_b32 0x37 sig=vdst,addr t=b64
ds_load_2addr_stride64_b32 0x38 sig=vdst,addr t=b64
ds_load_i8 0x39 sig=vdst,addr t=b32
ds_load_u8 0x3a sig=vdst,addr t=b32
ds_load_i16 0x3b sig=vdst,addr t=b32
ds_load_u16 0x3c sig=vdst,addr t=b32
ds_store_b64 0x4d sig=addr,data0
ds_store_2addr_b64 0x4e sig=addr,data0,data1
ds_store_2addr_stride64_b64 0x4f sig=addr,data0,data1
ds_load_b64 0x76 sig=vdst,addr
ds_load_2addr_b64 0x77 sig=vdst,addr t=b128
ds_load_2addr_stride64_b64 0x78 sig=vdst,addr t=b128
ds_store_b8_d16_hi 0xa0 sig=addr,data0 t=b32
ds_store_b16_d16_hi 0xa1 sig=addr,data0 t=b32
ds_load_u16_d16 0xa6 sig=vdst,addr t=b32
ds_load_u16_d16_hi 0xa7 sig=vdst,addr t=b32
ds_permute_b32 0xb2 sig=vdst,addr,data0
ds_bpermute_b32 0xb3 sig=vdst,addr,data0
ds_store_b96 0xde sig=addr,data0
ds_store_b128 0xdf sig=addr,data0
ds_load_b96 0xfe sig=vdst,addr
ds_load_b128 0xff sig=vdst,addr
"""

GLOBAL = """
global_load_u8 0x10 t=b32
global_load_i8 0x11 t=b32
global_load_u16 0x12 t=b32
global_load_i16 0x13 t=b32
global_load_b32 0x14
global_load_b64 0x15
global_load_b96 0x16
global_load_b128 0x17
global_store_b8 0x18 t=b32
global_store_b16 0x19 t=b32
global_store_b32 0x1a
global_store_b64 0x1b
global_store_b96 0x1c
global_store_b128 0x1d
global_load_d16_u8 0x1e t=b32
global_load_d16_b16 0x20 t=b32
global_load_d16_hi_b16 0x23 t=b32
global_store_d16_hi_b16 0x25 t=b32
global_atomic_swap_b32 0x33 atomic=1
global_atomic_add_u32 0x35 atomic=1
global_atomic_sub_u32 0x36 atomic=1
global_atomic_min_i32 0x38 atomic=1
global_atomic_min_u32 0x39 atomic=1
global_atomic_max_i32 0x3a atomic=1
global_atomic_max_u32 0x3b atomic=1
global_atomic_and_b32 0x3c atomic=1
global_atomic_or_b32 0x3d atomic=1
global_atomic_xor_b32 0x3e atomic=1
global_atomic_add_f32 0x56 atomic=1
"""

FLAT = """
flat_load_b32 0x14
flat_load_b64 0x15
flat_load_b128 0x17
flat_store_b32 0x1a
flat_store_b64 0x1b
flat_store_b128 0x1d
"""

# export: no opcode field; named exp on RDNA3, export on RDNA4
EXP = """
exp 0 sig=target,vsrc0,vsrc1,vsrc2,vsrc3 @11
export 0 sig=target,vsrc0,vsrc1,vsrc2,vsrc3 @12
"""

# image_* rows llvm-mc's opcode listing lacks (its generated words do not decode as these); the rest of the
# image opcodes come from the listing (tg_amd.llvm_table) and their operand rules from tg_amd.image
MIMG = """
image_bvh_intersect_ray 0x19 sig=vdata,vaddr,srsrc @11
image_bvh64_intersect_ray 0x1a sig=vdata,vaddr,srsrc @11
"""
VIMAGE = """
image_bvh_intersect_ray 0x19 sig=vdata,vaddr,srsrc @12
image_bvh64_intersect_ray 0x1a sig=vdata,vaddr,srsrc @12
"""
VSAMPLE = """
image_msaa_load 0x18 sig=vdata,vaddr,srsrc @12
"""

TABLES = {"SOP1": SOP1, "SOP2": SOP2, "SOPC": SOPC, "SOPK": SOPK, "SOPP": SOPP, "SMEM": SMEM, "VOP1": VOP1,
          "VOP2": VOP2, "VOPC": VOPC, "VOP3": VOP3, "VOP3SD": VOP3SD, "VOP3P": VOP3P, "DS": DS,
          "GLOBAL": GLOBAL, "FLAT": FLAT, "EXP": EXP, "MIMG": MIMG, "VIMAGE": VIMAGE, "VSAMPLE": VSAMPLE}
