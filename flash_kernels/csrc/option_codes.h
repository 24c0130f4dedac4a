// Generated from flash_kernels/variants.py (KERNELS) by `python -m flash_kernels.variants`: do not edit.
// Each kernel module's option-code fields (accessors and the codes of their choices) and the constants
// flash_kernels mirrors in Python; tests/test_option_codes.py checks this file against the table.
#pragma once

namespace fk {
namespace codes {

// naive (naive.cu): CUDA cores
namespace naive {
}  // namespace naive

// tiled (tiled.cu): CUDA cores
namespace tiled {
// form: bits 0..7 -- the backward's thread mapping (the forward is tiled's either way)
constexpr int form(int option) { return (option >> 0) & 0xff; }
constexpr int kFormTiled = 0;
constexpr int kFormTiledUncoalesced = 1;
}  // namespace tiled

// flash_fa1 (flash_fa1.cu): CUDA cores
namespace flash_fa1 {
// block_size: bits 0..7 -- Br = Bc: rows per Q block = keys per K/V tile (the code is the number itself)
constexpr int block_size(int option) { return (option >> 0) & 0xff; }
constexpr int kBlockSize4 = 4;
constexpr int kBlockSize8 = 8;
constexpr int kBlockSize16 = 16;
constexpr int kBlockSize32 = 32;
}  // namespace flash_fa1

// flash_simt (flash_simt.cu): CUDA cores
namespace flash_simt {
// block_size: bits 0..7 -- Br = Bc: rows per Q block = keys per K/V tile (the code is the number itself)
constexpr int block_size(int option) { return (option >> 0) & 0xff; }
constexpr int kBlockSize4 = 4;
constexpr int kBlockSize8 = 8;
constexpr int kBlockSize16 = 16;
constexpr int kBlockSize32 = 32;
}  // namespace flash_simt

// flash_mma_fwd (flash_mma_fwd.cu): tensor cores (mma.sync)
namespace flash_mma_fwd {
// tile: bits 0..7 -- query rows x keys per K/V tile
constexpr int tile(int option) { return (option >> 0) & 0xff; }
constexpr int kTile128x64 = 0;
constexpr int kTile128x32 = 1;
constexpr int kTile64x64 = 2;
}  // namespace flash_mma_fwd

// flash_mma_bwd (flash_mma_bwd.cu): tensor cores (mma.sync)
namespace flash_mma_bwd {
// tile: bits 0..7 -- query rows per step x keys per block
constexpr int tile(int option) { return (option >> 0) & 0xff; }
constexpr int kTile64x128 = 0;
constexpr int kTile128x128 = 1;
// group_split: bits 8.. -- thread blocks per grouped-query group (0 = 1)
constexpr int group_split(int option) { return (option >> 8); }
constexpr int kKeys = 128;
}  // namespace flash_mma_bwd

// flash_wgmma_fwd (flash_wgmma_fwd.cu): tensor cores (wgmma)
namespace flash_wgmma_fwd {
// tile: bits 0..3 -- query rows (64 per consumer warpgroup) x keys per K/V tile
constexpr int tile(int option) { return (option >> 0) & 0xf; }
constexpr int kTile128x128 = 0;
constexpr int kTile128x64 = 1;
constexpr int kTile192x128 = 2;
constexpr int kTile192x64 = 3;
// pipeline: bits 4..7 -- how K/V reach shared memory
constexpr int pipeline(int option) { return (option >> 4) & 0xf; }
constexpr int kPipelineCpAsync = 0;
constexpr int kPipelineTma = 1;
constexpr int kPipelineTmaWs = 2;
constexpr int kPipelineTmaWsOverlap = 3;
constexpr int kPipelineTmaWsPingpong = 4;
constexpr int kPipelineTmaWsPersistent = 5;
constexpr int kPipelineTmaWsPersistentPingpong = 6;
// tail: bits 8.. -- not causal, persistent: 1 + the query blocks of a head that stay whole (0: all); causal: non-zero = the heads dealt in groups (step 8)
constexpr int tail(int option) { return (option >> 8); }
}  // namespace flash_wgmma_fwd

// flash_wgmma_bwd (flash_wgmma_bwd.cu): tensor cores (wgmma)
namespace flash_wgmma_bwd {
// tile: bits 0..3 -- query rows per step x keys per block
constexpr int tile(int option) { return (option >> 0) & 0xf; }
constexpr int kTile64x128 = 0;
constexpr int kTile128x128 = 1;
constexpr int kTile64x64 = 2;
// pipeline: bits 4..7 -- how Q, dO, LSE, Dd arrive
constexpr int pipeline(int option) { return (option >> 4) & 0xf; }
constexpr int kPipelineCpAsync = 0;
constexpr int kPipelineTmaWs = 1;
// group_split: bits 8.. -- thread blocks per grouped-query group (0 = 1)
constexpr int group_split(int option) { return (option >> 8); }
constexpr int kKeys = 128;
constexpr int kKeysD256 = 64;
}  // namespace flash_wgmma_bwd

// flash_wgmma_fp8 (flash_wgmma_fp8.cu): tensor cores (wgmma, e4m3)
namespace flash_wgmma_fp8 {
// out_dtype: bits 0..0 -- the output's dtype
constexpr int out_dtype(int option) { return (option >> 0) & 0x1; }
constexpr int kOutDtypeBfloat16 = 0;
constexpr int kOutDtypeFloat16 = 1;
// exp_on_fma: bits 4..7 -- the share of the softmax's exponentials computed on the FMA units
constexpr int exp_on_fma(int option) { return (option >> 4) & 0xf; }
constexpr int kExpOnFma0 = 0;
constexpr int kExpOnFma0p25 = 1;
constexpr int kExpOnFma0p5 = 2;
// pingpong: bits 8..8 -- the consumers take turns
constexpr int pingpong(int option) { return (option >> 8) & 0x1; }
constexpr int kPingpongOff = 0;
constexpr int kPingpongOn = 1;
// scales: bits 9..9 -- descales per tensor, or per block of scale_block rows of Q, K and V
constexpr int scales(int option) { return (option >> 9) & 0x1; }
constexpr int kScalesTensor = 0;
constexpr int kScalesBlock = 1;
// o_sum: bits 10..10 -- where O's sum over K/V tiles is kept: fp32 registers (each tile's P V added by the CUDA cores) or the tensor cores' accumulator
constexpr int o_sum(int option) { return (option >> 10) & 0x1; }
constexpr int kOSumFp32 = 0;
constexpr int kOSumTensor = 1;
constexpr int kVtGroup = 32;
constexpr int kScaleBlock = 128;
}  // namespace flash_wgmma_fp8

// flash_decode (flash_decode.cu): tensor cores (mma.sync)
namespace flash_decode {
// block: bits 0..7 -- rows per block: 16, 32, 64 (flash_decode: 4 warps; wgmma: one warpgroup), 128 (two warpgroups that split the rows), 64 over two warpgroups that split the keys
constexpr int block(int option) { return (option >> 0) & 0xff; }
constexpr int kBlockRows16 = 0;
constexpr int kBlockRows32 = 1;
constexpr int kBlockRows64 = 2;
constexpr int kBlockRows128 = 3;
constexpr int kBlockRows64SplitKeys = 4;
// splits: bits 8.. -- key splits (grid z)
constexpr int splits(int option) { return (option >> 8); }
constexpr int kKeys = 64;
constexpr int kStagesD64 = 4;
constexpr int kStagesD128 = 3;
constexpr int kStagesD128ManyRows = 2;
}  // namespace flash_decode

// flash_decode_wgmma (flash_decode_wgmma.cu): tensor cores (wgmma)
namespace flash_decode_wgmma {
// block: bits 0..7 -- rows per block: 16, 32, 64 (flash_decode: 4 warps; wgmma: one warpgroup), 128 (two warpgroups that split the rows), 64 over two warpgroups that split the keys
constexpr int block(int option) { return (option >> 0) & 0xff; }
constexpr int kBlockRows16 = 0;
constexpr int kBlockRows32 = 1;
constexpr int kBlockRows64 = 2;
constexpr int kBlockRows128 = 3;
constexpr int kBlockRows64SplitKeys = 4;
// splits: bits 8.. -- key splits (grid z)
constexpr int splits(int option) { return (option >> 8); }
constexpr int kKeys = 64;
constexpr int kStagesD64 = 4;
constexpr int kStagesD128 = 3;
constexpr int kSmemSlack = 1024;
}  // namespace flash_decode_wgmma

}  // namespace codes
}  // namespace fk
