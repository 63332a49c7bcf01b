"""SASS and resource-usage parsing on fixed text (no compile)."""

from __future__ import annotations

from kernelworks.inspect.sass import access_width, instruction_mix, parse_resource_usage

SASS = """
	code for sm_90a
		Function : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                 /* 0x00000a00ff017b82 */
                                                                                          /* 0x000fe20000000800 */
        /*0120*/                   LDG.E.128 R16, desc[UR14][R10.64+0x800] ;              /* 0x0008000e0a107981 */
        /*0130*/              @!P0 LDG.E.64 R4, desc[UR14][R10.64] ;                      /* 0x0000000e0a047981 */
        /*0140*/                   LDG.E R12, desc[UR14][R24.64] ;                        /* 0x0000000e180c7981 */
        /*0150*/                   LDG.E.U16 R20, desc[UR14][R24.64] ;                    /* 0x0008000e18147981 */
        /*0160*/                   LDG.E.EL.128 R20, desc[UR14][R24.64] ;                 /* 0x0008000e18147981 */
        /*0370*/                   STS.128 [R10+UR12+0x800], R16 ;                        /* 0x000800100a007988 */
        /*03f0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                          /* 0x0000000000007b1d */
        /*0410*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4].tnspB, RZ, !UPT ;   /* 0x40e00000041879f0 */
        /*0420*/                   HMMA.16816.F32 R36, R12, R4.reuse, RZ ;                /* 0x000000040c24723c */
        /*0430*/                   UTCHMMA gdesc[UR6], gdesc[UR8], tmem[UR17], tmem[UR20], idesc[UR21], UPT ;
        /*0440*/                   FFMA R1, R2, R3, R4 ;
        /*0450*/                   MUFU.EX2 R1, R2 ;
        /*0460*/                   STL [R1], R2 ;
        /*0470*/                   LDL R2, [R1] ;
        /*0480*/                   UTMALDG.2D [UR8], [UR4] ;
        /*0490*/                   LDSM.16.M88.4 R16, [R9] ;
        /*04a0*/                   @P1 STG.E.128 desc[UR4][R2.64], R8 ;
        /*04b0*/                   STG.E desc[UR4][R2.64], R8 ;
        /*04c0*/                   EXIT ;
        /*04d0*/                   BRA 0x4d0;
        /*04e0*/                   NOP;
"""


def test_instruction_mix_counts() -> None:
    mix = instruction_mix(SASS)
    assert mix.count("LDG") == 5
    assert dict(mix.global_loads) == {128: 2, 64: 1, 32: 1, 16: 1}
    assert dict(mix.global_stores) == {128: 1, 32: 1}
    assert mix.tensor_core == 3  # HGMMA, HMMA, UTCHMMA
    assert (mix.fp32, mix.mufu, mix.local, mix.barriers, mix.tma) == (1, 1, 2, 1, 1)
    assert mix.shared == 2  # STS, LDSM
    assert mix.narrow_global == 3  # LDG.E, LDG.E.U16, STG.E
    assert mix.total == 21  # NOP padding excluded
    assert mix.summary()["LDG"] == 5


def test_access_width() -> None:
    assert access_width(".E.128") == 128
    assert access_width(".E.ENL2.256") == 256
    assert access_width(".E.64") == 64
    assert access_width(".E") == 32
    assert access_width(".E.U8") == 8


def test_parse_resource_usage() -> None:
    text = """
Resource usage:
 Common:
  GLOBAL:0
 Function helper:
  REG:10 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:100 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function dot:
  REG:58 STACK:16 SHARED:1024 LOCAL:8 CONSTANT[0]:568 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    res = parse_resource_usage(text, "dot")
    assert (res.registers, res.stack_bytes, res.static_shared_bytes, res.local_bytes) == (58, 16, 1024, 8)
    assert parse_resource_usage(text).registers == 10  # first function when none is named
