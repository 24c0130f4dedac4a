"""scripts/sass_overlap.py reads cuobjdump's SASS: per kernel, the MUFU.EX2 between each 0x1 wgmma wait and the
next 0x0 wait, against all of the kernel's."""

from script_module import load_script

sass_overlap = load_script("sass_overlap")

SASS = """
\tcode for sm_90a
\t\tFunction : _Z1av
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0 ;  /* 0x00e00000 */
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;                      /* 0x00000000 */
        /*0020*/                   MUFU.EX2 R1, R2 ;                                    /* 0x00000000 */
        /*0030*/                   FFMA R3, R1, R1, R1 ;                                /* 0x00000000 */
        /*0040*/                   MUFU.EX2 R4, R5 ;                                    /* 0x00000000 */
        /*0050*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                      /* 0x00000000 */
        /*0060*/                   MUFU.EX2 R6, R7 ;                                    /* 0x00000000 */
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;                      /* 0x00000000 */
        /*0080*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                      /* 0x00000000 */
        /*0090*/                   EXIT ;                                               /* 0x00000000 */
\t\t..........
\t\tFunction : _Z1bv
        /*0000*/                   MUFU.EX2 R1, R2 ;                                    /* 0x00000000 */
        /*0010*/                   EXIT ;                                               /* 0x00000000 */
"""


def test_counts_the_exponentials_in_each_window_and_in_the_kernel():
    got = sass_overlap.overlap(SASS)
    assert got == [("_Z1av", [2, 0], 3), ("_Z1bv", [], 1)]
