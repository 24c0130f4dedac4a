// flash_wgmma forward: FlashAttention-2's loop on Hopper's warpgroup tensor-core instructions (sm_90a),
// rungs of the Hopper ladder selected by the `pipeline` option (how K/V reach shared memory and
// how the warpgroups share the work); the arithmetic of a tile is the same code in all three.
//
// Common to every pipeline. Relative to flash_mma: each matrix product is one asynchronous wgmma per
// k16 step for a whole warpgroup (64 query rows) instead of many warp-level mma.sync, with its
// operands read by the tensor cores straight from shared memory (no ldmatrix): S = Q K^T is wgmma
// m64nBNk16 with Q and K both from shared memory (K-major, 128-byte swizzle), O += P V is wgmma
// m64nDk16 with P from registers (the S accumulators repacked to 16 bits, as in FA3) and V from
// shared memory read MN-major (the transpose bit: V stays [keys][D] as it is in memory, no
// transposing copy). One consumer warpgroup per 64 query rows (BM = 64 * NWG, NWG = 2 or 3). Each
// warpgroup runs per K/V tile: S = Q_i K_j^T (D / 16 k-steps), mask, online softmax on the
// accumulator fragment (running max in raw score units, exp2 with the scale folded in, the row's 4
// lanes reduce with two shuffles), O rescaled when a row max grew, O += P V_j (BN / 16 k-steps).
// Causal launches visit the heaviest query blocks first and a warpgroup skips key tiles wholly after
// its rows. Grouped-query attention: query head h reads key/value head h / (H / Hkv)
// (Dims::kv_head); causal alignment top-left (query i sees keys j <= i). Outputs as flash_mma's: O
// normalised (staged through the warpgroup's own rows of the Q tile, written 16 bytes per thread),
// LSE = natural log of sum_j exp(scale q_i . k_j), fp32.
//
// pipeline "cp.async" (step 1): no producer: every thread copies tiles with cp.async (Q once; K and V
// double-buffered, the next tile in flight while this one is used), fences them into the async
// proxy and meets at __syncthreads (twice per K/V tile); each wgmma batch is waited for at once (no
// overlap of softmax and wgmma inside a warpgroup).
//   Measured (H200, torch 2.11.0+cu130, scripts/wgmma_smoke.py at c4f0115; fp16, B*N = 16k, H = 16,
//   N = 8192, median of 20, no L2 flush; TFLOP/s, 4 B H N^2 D, halved when causal), by tile
//   128x128 / 128x64 / 192x128 / 192x64, beside flash_mma and SDPA flash (FA2):
//     D=128 full   361 / 308 / 401 / 344   flash_mma 293   SDPA 345
//     D=128 causal 340 / 289 / 360 / 309   flash_mma 255   SDPA 301
//     D=64  full   257 / 293 / 288 / 239   flash_mma 290   SDPA 291
//     D=64  causal 245 / 267 / 268 / 225                   SDPA 269
//   so step 1's defaults were 192x128 for D=128 (1.16x SDPA flash) and 128x64 for D=64 (SDPA's level);
//   cuDNN reaches ~600 at D=128 on this GPU: the per-tile waits leave the tensor cores idle during
//   loads and softmax.
//
// pipeline "tma" (step 2): K, V and Q arrive by the copy engine: one thread issues
// cp.async.bulk.tensor (3-D tensor maps [B*heads][N][D], boxes of {64 columns, rows, 1}, the
// 128-byte swizzle the wgmma descriptors read; rows past N of the head are zero-filled by the
// engine, never the next head's) completing on one mbarrier per K and per V stage (arrive.expect_tx,
// try_wait.parity), a STAGES-deep ring (2). A warpgroup waits for K_j alone before S = Q K_j^T and for
// V_j before O += P V_j; one __syncthreads per tile (every warpgroup done with the stage) lets the
// issuing thread refill the stage with tile j + STAGES. No address arithmetic, predicates or
// proxy fences in the threads for loads; the waits per wgmma batch stay.
//   Measured (H200, torch 2.11.0+cu130, scripts/wgmma_smoke.py at b353fa5, log
//   profiles/_logs/nvidia-h200/wgmma_b353fa5/wgmma_smoke.log; same conditions as step 1), N = 8192,
//   by tile 128x128 / 128x64 / 192x128 / 192x64, beside the best cp.async tile:
//     D=128 full   520 / 563 / 483 / 451   cp.async 402 (192x128)   flash_mma 289   SDPA 349
//     D=128 causal 499 / 524 / 466 / 396   cp.async 367 (192x128)                   SDPA 309
//     D=64  full   354 / 414 / 362 / 319   cp.async 305 (128x64)                    SDPA 297
//     D=64  causal 329 / 370 / 333 / 292   cp.async 273 (128x64)                    SDPA 266
//   so 1.40x step 1 at D=128 (0.94 of cuDNN's ~600), 1.36x at D=64 (cuDNN ~448); the defaults become
//   tma, 128x64 for both head dims. 128x64 is probably best because two blocks fit on an SM (ptxas:
//   127 registers x 256 threads, 97 KB of shared memory), so one block's softmax and waits overlap
//   the other's wgmma; this is an inference from the resources, not profiled.
//
// pipeline "tma-ws" (step 3): warp specialization as in FlashAttention-3. One more warpgroup, the
// producer (warpgroup 0; one thread issues every copy, Q once, then K_t and V_t into a ring of 3
// stages where 227 KB hold them, else 2), and the consumers (warpgroups 1 .. BM / 64) that only
// compute. No block barrier after setup: per stage, full_k / full_v mbarriers (the copy engine's
// bytes) and empty_k / empty_v mbarriers, on which each consumer warpgroup arrives once (one thread,
// a predicated arrive) when its wgmma reading the stage has completed; the producer refills a stage as
// soon as K (or V) of it is released, without waiting for the slowest warpgroup's whole tile.
// setmaxnreg moves registers to the consumers: producer 24 / consumers 240 with 2 consumer
// warpgroups (128-row tiles, 384 threads), 32 / 160 with 3 (192-row tiles, 512 threads); so one block
// per SM, where step 2's 128x64 fitted two. Causal tiles wholly after a warpgroup's rows are waited
// for and released without compute (the ring's phases stay in step).
// pipeline "tma-ws-overlap": tma-ws plus FlashAttention-3's intra-warpgroup overlap: a consumer
// issues S_t = Q K_t^T and O += P_{t-1} V_{t-1} back to back, waits for S_t alone
// (wgmma.wait_group 1), runs the softmax of S_t while O += P V runs, then waits for it, rescales O
// and packs P_t. Costs: no branch may sit between the two waits, so the loop's tiles were all masked by
// selects until step 5 (below) left the loop without a mask; and S, P and O of two tiles live at once, so 192x128 at D = 128 (160 registers) runs without the
// overlap. SASS (ptxas 13.0): the wait for O += P V lands part-way through the softmax, not after
// it as written: of a thread's exponentials per tile, 42 of 64 come before it with 128x128 at
// D = 128 (52 of 64 at D = 64), 6 to 25 of 32 with the BN = 64 tiles, 17 of 64 with 192x128 at D = 64.
//   Measured (H200, torch 2.11.0+cu130, scripts/wgmma_smoke.py --pipelines tma,tma-ws,tma-ws-overlap at
//   3d44002, profiles/_logs/nvidia-h200/wgmma_3d44002/; fp16, B*N = 16k, H = 16, TFLOP/s at N = 4096 / 8192):
//   D = 128 full: tma best 508 / 531 (128x128); tma-ws 600 / 583 (192x128); tma-ws-overlap 596 / 609
//   (192x128); causal at N = 8192: 472 (tma) -> 545 (tma-ws) -> 568 (tma-ws-overlap). D = 64: tma 128x128
//   stays best (460 / 477 full, 379 / 419 causal); tma-ws 192x128 446 / 470, tma-ws-overlap <= 359: with
//   one 384-thread block per SM the D = 64 tile has too little work per barrier round trip. In the same
//   run the tma 128x64 tile measured 413 / 414 at D = 128 (562 at b353fa5, before step 3's edits to the
//   shared code): not explained yet; the defaults follow this run.
// Next bottleneck (ncu deep capture profiles/nvidia-h200/bottleneck-deep, H200 at 7a78894, B=4 H=16 N=4096
// D=128 fp16, tma-ws-overlap 192x128; `nsightlab why nvidia-h200/bottleneck-deep --a flash_wgmma --b sdpa_cudnn
// --case "causal=0,pass=forward"`): 1.04x cuDNN's time with the tensor pipe as busy (75% vs 76% of active
// cycles): the gap is latency inside a warpgroup, Stall Wait 1.60 vs 0.89 cycles per issued instruction and
// MIO throttle 0.47 vs 0.02 (the softmax's exp2 and shuffles queue behind the wgmma chain). Ping-pong of two
// consumer warpgroups (one's softmax under the other's GEMMs) is the step that hides it.
//
// pipeline "tma-ws-pingpong" (step 4a): tma-ws-overlap plus FlashAttention-3's inter-warpgroup
// ping-pong: the consumer warpgroups take turns to issue their products (named barriers 4.., one per
// consumer; a warpgroup waits for its turn, issues S_t = Q K_t^T and O += P_{t-1} V_{t-1}, and
// passes the turn on), so one's softmax runs under the other's GEMMs by construction rather than by
// chance. Every consumer takes one turn per K/V tile of the block, the causal tiles after its rows
// included, so the rotation never waits for a warpgroup that has finished.
//   Measured (H100 80GB HBM3, torch 2.11.0+cu130, `SMOKE_ARGS="--passes forward --pipelines
//   tma,tma-ws-overlap,tma-ws-pingpong" STEPS="build smoke" bash scripts/gpu_node.sh` at dab5fb4 + this
//   step, log profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_pingpong_dab5fb4-dirty.log.xz; fp16, TFLOP/s,
//   B*N = 16k, H = 16, at N = 1024 / 4096 / 8192, in one run with cuDNN): D = 128 full, 128x128 overlap
//   459 / 556 / 544 -> ping-pong 478 / 540 / 526; 192x128 (3 consumers, no overlap) 486 / 623 / 646 ->
//   486 / 598 / 574; cuDNN 592 / 655 / 664. D = 64 128x128: 275 / 320 / 325 -> 297 / 349 / 357 (tma 410 /
//   479 / 486, cuDNN 423 / 474 / 482). So the ping-pong pays only for short blocks (N = 1024, +4 %) and
//   at D = 64; where blocks are long it costs 3-11 %: the forced turns add a wait the free-running
//   warpgroups did not have. Not a default. Under Nsight Compute (H100, N = 4096, D = 128, 192x128) it
//   measured 0.812 ms against tma-ws's 0.841 in one capture (7cebd20; in git at 55e62cf) and 0.893
//   against 0.881 in the next (8b4f242, profiles/nvidia-h100-80gb-hbm3/pipeline): no consistent gain.
//   What the 128x128 tiles lose against 192x128 might be, by the arithmetic of this launch, the block's
//   start and end (one 384-thread block per SM, 15 waves of 16 us blocks at N = 4096, each starting with
//   Q and the first K/V from memory and ending with O's store, none of it overlapped with another block's
//   work); the persistent step below did not bear that out at 128x128 (547-561 against 566-584 TFLOP/s).
//
// pipeline "tma-ws-persistent" (step 4b; "tma-ws-persistent-pingpong" adds 4a): one block per SM that
// loops over work tiles, two Q buffers (the next tile's Q loads while this one computes; consumers hand a
// buffer back after their epilogue, full_q / empty_q mbarriers) and the K/V ring running on from one tile
// to the next, so a tile starts with its data already in flight. The tiles are handed out dynamically:
// block b takes tile b first, then the producer takes the next untaken one from a global counter (zeroed
// by the caller: a 2 us fill kernel before each launch) and passes it to the consumers in shared memory
// with the Q buffer's full barrier; -1 ends the loop. Tiles keep the 2-D grid's head-major order.
//   First version, a fixed deal (block b: tiles b, b + #SMs, ...; 7cebd20): lost 8-13 % at D = 128,
//   N >= 4096 (H100 smoke log profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_persistent_dab5fb4-dirty.log.xz).
//   Nsight Compute (deep tier, B = 4, H = 16, N = 4096, D = 128, 192x128; the captures of 7cebd20, committed
//   at 55e62cf: `git show 55e62cf:profiles/nvidia-h100-80gb-hbm3/pipeline-deep/...`) showed why: the SMs were
//   active 86 % of the elapsed cycles (1.38 M of 1.60 M) against 95 % for tma-ws and 96 % for cuDNN (itself persistent:
//   132 blocks of 384 threads), with the tensor pipe as busy per active cycle (76 % vs 77 %): SMs that ran
//   slower finished their fixed share last. Dealing causal tiles heaviest-first over all heads balanced
//   them but read 1.13 GB from DRAM instead of 0.20 GB (L2 hit rate 42 % vs 82 %).
//   With the dynamic scheduler (8b4f242; H100 80GB HBM3, torch 2.11.0+cu130, fp16, 192x128, TFLOP/s at
//   N = 1024 / 4096 / 8192, B*N = 16k, H = 16; two event-timed runs of `SMOKE_ARGS="--passes forward
//   --tiles 192x128 --pipelines tma-ws,tma-ws-persistent" STEPS="build smoke" bash scripts/gpu_node.sh`,
//   logs profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_dynamic_scheduler_run{1,2}.log):
//     full    tma-ws 474-480 / 561-622 / 598-648  persistent 542-544 / 647-664 / 642-663
//             cuDNN  598-606 / 676-677 / 671-686
//     causal  tma-ws 290-324 / 516-520 / 550-589  persistent 334-368 / 556-562 / 624-630
//             cuDNN  427-432 / 573 / 610
//   i.e. 0.89-0.91 / 0.96-0.98 / 0.94-0.99x cuDNN (full) and 0.78-0.85 / 0.97-0.98 / 1.02-1.03x (causal). Under
//   Nsight Compute (profiles/nvidia-h100-80gb-hbm3/pipeline and pipeline-deep at 8b4f242, N = 4096): 0.812
//   ms against cuDNN's 0.813 (full) and 0.480 against 0.478 (causal), tma-ws 0.881 / 0.516; SMs active 96 %
//   of the elapsed cycles, tensor pipe 79 % of active cycles. At D = 64 the plain tma kernel stays faster
//   (0.576 ms, cuDNN 0.569; persistent 0.793). Not yet the default at D = 128: compute-sanitizer has not run
//   on the scheduler (the shared-memory hand-off), nor the GPU suite with it as the default. The target
//   (1.05x cuDNN at D = 128) is not met: 1.00x under Nsight Compute, 0.94-1.03x in the timed runs.
//   The ping-pong on top (tma-ws-persistent-pingpong) measured 0.836 / 0.488 ms under Nsight Compute:
//   slower, as at the non-persistent tiles (4a above).
//
// Step 5 (every warp-specialised pipeline, and flash_wgmma_fp8.cu): a block's K/V tiles are visited last to
// first (the producer loads them in that order). The one tile that can reach past Nk or the diagonal is then
// the first a warpgroup computes (outside the overlapped loop, masked if it needs it, kMaskIfNeeded), and the
// overlapped loop runs with no mask at all (kMaskNever) where it had compared and selected every score. With
// one Q buffer the persistent 128x128 tile at D = 128 gets a third K/V stage (two Q buffers left it two),
// its next Q issued after the next tile's first K/V tiles. Measured (H200, torch 2.11.0+cu130, fp16, B*N = 16k,
// H = 16, TFLOP/s, L2 flushed; scripts/wgmma_smoke.py --passes forward --tiles 128x128,192x128 --pipelines
// tma-ws-overlap,tma-ws-persistent,tma-ws-persistent-pingpong; logs profiles/_logs/nvidia-h200/
// wgmma_smoke_reverse_order.log.xz (before the Q-buffer change) and wgmma_smoke_reverse_order_qbuf1_8065551.log.xz):
//   the 128x128 overlap, which lost 11 % to 192x128 without overlap in the dab5fb4 run (556 against 623 at
//   N = 4096, H100), is now level with it: 618 / 665 against 611 / 632 at N = 4096 / 16384 (first run), 627 /
//   659 / 623 against 633 / 639 / 651 at N = 4096 / 8192 / 16384 (second). The third stage did not make the
//   persistent 128x128 faster than the non-persistent one (621 / 613 / 614 against 627 / 659 / 623).
//   The ping-pong on the persistent 192x128 tile was at least as fast as without it in 10 of 10 cells of the
//   two runs (+0-5 %; e.g. 666 / 667 against 639 / 651 full, 617 / 640 against 600 / 639 causal at N = 8192 /
//   16384), where before step 5 it had been slower (0.836 against 0.812 ms above): tma-ws-persistent-pingpong
//   is the default at D = 128 since 8065551. Bench capture at 8065551 (profiles/nvidia-h200/bench, convention
//   suite, N >= 4096, in the same run as cuDNN): 0.98-1.06x cuDNN at D = 128 (3 of 12 cells >= 1.05), the
//   same band as the 1687b8b bench on the H100 (0.98-1.06x, 2 of 12) before it. Under Nsight Compute (H100,
//   profiles/nvidia-h100-80gb-hbm3/fp8 at 1b29c8e, N = 4096, not causal; `nsightlab why ... --a flash_wgmma
//   --b sdpa_cudnn --case causal=0`): 1.01x cuDNN's time (0.826 vs 0.821 ms), tensor pipe 78 % vs 76 % of
//   active cycles, 0.91x its instructions, but 2.39 cycles per instruction stalled on barriers (the turns of
//   three consumers) against 1.37 and Stall Wait 1.57 against 0.89. The 1.05x target at D = 128 is not met.
//
// Step 6 (warp-specialised pipelines and flash_wgmma_fp8.cu): a consumer warpgroup whose 64 rows all lie past Nq
// computes nothing; it only releases the ring's stages and takes its ping-pong turns (n_wg = 0, release_kv_unread
// in wgmma.cuh). With 192-row tiles every convention length is ragged (1024, 4096 and 16384 leave a last block of
// 64 rows, 8192 one of 128), and that block's idle warpgroups had run a whole block's products for rows that are
// never written: 2 of 66 warpgroup tiles per head at N = 4096. Measured (H100 80GB HBM3, torch 2.11.0+cu130, fp16,
// D = 128, 192x128 tma-ws-persistent-pingpong, B*N = 16k, H = 16, L2 flushed, TFLOP/s; one device call, the
// package before (c6c4ed1) and after (cb973de) run alternately twice, each with its own build; logs
// profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_skip_past_nq_{old,new}.log), N = 1024 / 4096 / 16384:
//   full    before 520 / 652 / 683 and 518 / 655 / 662   after 561 / 689 / 667 and 559 / 687 / 712   cuDNN 586-590 / 660-662 / 653-679
//   causal  before 366 / 560 / 657 and 328 / 556 / 659   after 409 / 589 / 689 and 371 / 588 / 688   cuDNN 410-414 / 559-564 / 619-624
// so +8 % (full) and +12 % (causal) at N = 1024, +5 % at N = 4096, +5 % causal at N = 16384 (full: within the two
// runs' spread). The bench capture at cb973de (profiles/nvidia-h100-80gb-hbm3/bench, convention suite, N >= 4096,
// same run as cuDNN): 1.04-1.11x cuDNN at D = 128 (9 of 12 cells >= 1.05; N = 4096 full 1.04) where the 76739b0
// capture of the same morning, on the same GPU model, had 0.98-1.05x (none >= 1.05).
// Tried and not kept (76739b0, reverted in c6c4ed1): FlashAttention-3's 128x176 tile for non-causal D = 128 (two
// consumers, one Q buffer, two stages; causal calls on 128x128): below the 192x128 default in one H100 run at every
// pipeline (fp16, N = 4096 / 8192 / 16384: overlap 607 / 619 / 631, ping-pong 625 / 644 / 646, persistent
// ping-pong 639 / 654 / 556 against 644 / 669 / 678; log wgmma_smoke_128x176_76739b0.log.xz).
//
// Step 7 (option tail, "auto" the default at D = 128; persistent pipelines, not causal): tail tiles. The persistent
// blocks take tiles from the counter as they free, and at the convention sizes (B*N = 16k, H = 16) 1365 blocks of
// 192 rows make 10.3 rounds on 132 SMs, run as 11: the last round leaves SMs idle (Nsight Compute had them active
// 96 % of the elapsed cycles, 8b4f242). With tail "auto" the host (_ops._wg_tail_plan) list-schedules the tiles
// over the SMs with a cost model (a tile with k of the 3 warpgroups busy costs (k + 1) / 4 of a whole one) and
// picks how many of each head's query blocks stay whole; the rows after them become 128-row tiles (one warpgroup
// idle: n_wg = 0, and store_rows writes no row past the tile's), every head's handed out after all whole blocks,
// the heads last to first (the last heads' K/V are the likeliest still in L2). At N = 4096 / 8192 / 16384 it keeps
// 20 / 41 / 82 of 22 / 43 / 86 blocks; at N = 1024 none (cost (k + 1/2) / 3.5 had moved the 64-row last blocks to
// the end there, 4 % slower in two runs). Measured (H100 80GB HBM3, torch 2.11.0+cu130, fp16 and bf16, D = 128,
// 192x128 tma-ws-persistent-pingpong, B*N = 16k, H = 16, L2 flushed, TFLOP/s, tail none against auto in the same
// run; `SMOKE_ARGS="--passes forward --tiles 192x128 --pipelines tma-ws-persistent-pingpong --tails none,auto
// --no-check --time-dtypes float16,bfloat16 --head-dims 128 --time-n 1024,4096,8192,16384" STEPS=smoke bash
// scripts/gpu_node.sh`; logs profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_tail_run{1,2}.log with the first plan,
// wgmma_smoke_tail_6674bdd.log.xz with this one), not causal:
//   N = 4096   fp16 690 / 684 / 687 -> 697 / 693 / 696, bf16 705 / 702 / 702 -> 712 / 708 / 713: +0.9-1.6 %, 6 of 6
//   N = 8192   fp16 708 / 707 / 708 -> 718 / 712 / 714, bf16 726 / 726 / 724 -> 718 / 703 / 725: -3.2 to +1.4 %
//   N = 16384  fp16 670 / 644 / 702 -> 731 / 731 / 727, bf16 701 / 686 / 735 -> 713 / 704 / 686: -6.7 to +14 %
//   N = 1024   (first plan) fp16 559 / 561 -> 537 / 538, bf16 568 / 562 -> 543 / 544; (this plan: unchanged)
// N = 16384 is the noisiest cell of these runs in either setting (a sustained load there runs at the 700 W power
// cap, scripts/clock_watch.py). The causal rows, which the option leaves alone, agree within 1 % at N >= 4096. An
// H100 bench at 6674bdd that ran out of time after its convention suite (profiles/_logs/nvidia-h100-80gb-hbm3/
// bench_convention_6674bdd_partial.csv.xz) has D = 128 full at 1.048 / 1.050x cuDNN (fp16 / bf16) at N = 4096,
// 1.07 / 1.07 at 8192, 1.21 / 1.08 at 16384; the cb973de bench had 1.04 / 1.04, 1.06 / 1.06, 1.07 / 1.07. The
// complete H100 bench at 2a30619 (profiles/nvidia-h100-80gb-hbm3/bench): 1.0495 / 1.048 at N = 4096, 1.059 / 1.062
// at 8192, 1.057 / 1.068 at 16384. Under Nsight Compute (profiles/nvidia-h100-80gb-hbm3/pipeline, 2a30619, N = 4096,
// B = 4, H = 16, fp16, kernel replay, caches flushed; tail none -> auto): tma-ws-persistent-pingpong 0.797 -> 0.789
// ms, tma-ws-persistent 0.825 -> 0.812 ms (cuDNN 0.829), DRAM bytes 261 -> 392 MB: the tail tiles read their heads'
// K/V again (0.5 TB/s, far under the memory roof). The deep tier's full section set does not always finish on the
// persistent kernels (README, "A kernel that does not finish under Nsight Compute"); without MemoryWorkloadAnalysis
// it does (profiles/nvidia-h100-80gb-hbm3/pipeline-deep): the persistent ping-pong is active 95 % of its elapsed
// cycles, not causal, at 5fcc881.
//
// Step 8 (option tail, "auto", causal calls of the tma-ws pipelines): head groups. A causal head's query blocks
// cost 1 to n_qb K/V tiles; dealt one head after another (heaviest block first), the heaviest blocks of the last
// heads are taken in the last round, and Nsight Compute had the persistent ping-pong's SMs active 89 % of the
// elapsed cycles (708.5 k of 792.9 k; cuDNN 91 %) at ba46f69 (N = 4096, B = 4, H = 16, fp16). With tail "auto" the
// heads are dealt in groups of causal_head_group (as many heads as have their K and V within 16 MiB of L2: 8 at
// N = 4096, D = 128), each group's tiles heaviest first across its heads, so that the last tiles handed out are
// the lightest of the last group. Under Nsight Compute at 5fcc881 (profiles/nvidia-h100-80gb-hbm3/pipeline-deep):
// 0.462 -> 0.432 ms, active 89 -> 95 % of the elapsed cycles (698.9 k of 735.0 k), cuDNN 0.482 ms. Measured
// (H100 80GB HBM3, torch 2.11.0+cu130, D = 128, 192x128 tma-ws-persistent-pingpong, B*N = 16k, H = 16, L2 flushed,
// TFLOP/s, tail none -> auto in the same run; the smoke command of step 7 at 5fcc881, log
// profiles/_logs/nvidia-h100-80gb-hbm3/wgmma_smoke_causal_groups_5fcc881.log.xz), causal:
//   fp16  N = 1024 / 4096 / 8192 / 16384: 401 / 592 / 652 / 689 -> 419 / 629 / 678 / 704 (+2.2 to +6.2 %)
//   bf16  N = 1024 / 4096 / 8192 / 16384: 386 / 604 / 669 / 702 -> 401 / 640 / 703 / 709 (+1.0 to +5.8 %)
// The complete H100 bench at 5fcc881 (profiles/nvidia-h100-80gb-hbm3/bench): causal D = 128 1.10-1.14x cuDNN at
// N >= 4096 (1.03-1.05 at 2a30619), full 1.054-1.074. The H200 bench at c840561 (README; every implementation of a
// configuration timed round-robin, L2 flushed by reading, fp16 and bf16, N = 4096-16384): D = 128 1.06-1.09x full,
// 1.12-1.16x causal (633-760 TFLOP/s); D = 64 (the same path since d9c72ec) 1.07-1.14x.
#include "wgmma.cuh"
#include "wgmma_softmax.cuh"

namespace fk {

// ------------------------------------------------------------------------------ one warpgroup's tile

// Issue S = Q_i K_j^T for one warpgroup's 64 rows (no wait): dQ the descriptor of its rows of the
// [BM][D] Q tile, dK of the [BN][D] K tile. k-step kd reads columns 16 kd .. of column block kd / 4
// (32 bytes per k-step inside a 128-byte row).
template <typename T, int D, int BM, int BN>
__device__ __forceinline__ void issue_scores(float (&s)[BN / 2], uint64_t dQ, uint64_t dK) {
  fence_regs(s);
  wgmma_fence();
  wgmma_kmajor_ss<T, BN, D, BM, BN>(s, dQ, dK);
  wgmma_commit();
}

// P (fp32 in s) as the A fragments of O += P V: the accumulators of 8-column blocks 2 kk and
// 2 kk + 1 are the A fragment of k-step kk.
template <typename T, int BN>
__device__ __forceinline__ void pack_p(const float (&s)[BN / 2], uint32_t (&pf)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    pf[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
    pf[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
    pf[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
    pf[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// softmax_scores, then P packed into pf.
template <typename T, int BN>
__device__ __forceinline__ bool softmax_tile(float (&s)[BN / 2], uint32_t (&pf)[BN / 16][4], float (&m)[2],
                                             float (&l)[2], float (&alpha)[2], int j0, int Nk, int causal,
                                             int wg_row0, int row0, int lane, float scale_log2) {
  const bool grew = softmax_scores<BN>(s, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2);
  pack_p<T, BN>(s, pf);
  return grew;
}

// ------------------------------------------------------------------------------ step 1: cp.async

template <typename T, int D, int BM, int BN>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
flash_wgmma_forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           T* __restrict__ O, float* __restrict__ LSE, Dims dm, float scale_log2, int causal) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int NWG = BM / 64, NT = NWG * 128;
  constexpr int KB = BN / 16;          // k16 steps of O += P V (over the keys of a tile)
  constexpr int NS = BN / 2, NO = D / 2;  // accumulator registers per thread: S, O
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;  // tile bytes
  extern __shared__ uint8_t smem_raw[];
  // SW128 tiles start on 1024-byte boundaries (the launcher allocates 1 KB of slack)
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // [BM][D]
  const uint32_t sK = sQ + TQ;                 // [2][BN][D]
  const uint32_t sV = sK + 2 * TKV;            // [2][BN][D]
  uint8_t* const smem = smem_raw + (sQ - raw);

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const long bh = blockIdx.y;  // b * H + h
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BM;
  const T* Qb = Q + bh * Nq * D;
  const T* Kb = K + dm.kv_head(bh) * Nk * D;
  const T* Vb = V + dm.kv_head(bh) * Nk * D;
  const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
  const int n_kv = (kv_len + BN - 1) / BN;
  const int wg_row0 = q0 + wg * 64;               // first query row of this warpgroup
  const int row0 = wg_row0 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8

  load_tile_sw128<BM, D, NT>(sQ, Qb, q0, Nq, tid);
  load_tile_sw128<BN, D, NT>(sK, Kb, 0, Nk, tid);
  cp_async_commit();
  load_tile_sw128<BN, D, NT>(sV, Vb, 0, Nk, tid);
  cp_async_commit();

  // descriptors of this warpgroup's 64 rows of Q and of K/V stage 0; stage 1 is TKV further
  const uint64_t dQ = desc_kmajor(sQ + wg * 64 * 128);
  const uint64_t dK = desc_kmajor(sK);
  const uint64_t dV = desc_mnmajor(sV, BN * 128);

  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int t = 0; t < n_kv; ++t) {
    const int st = t & 1;
    cp_async_wait<1>();  // Q and K_t have landed (V_t may still be in flight)
    fence_proxy_async();
    __syncthreads();
    if (t + 1 < n_kv) load_tile_sw128<BN, D, NT>(sK + (st ^ 1) * TKV, Kb, (t + 1) * BN, Nk, tid);
    cp_async_commit();

    const int j0 = t * BN;
    // causal: a tile whose first key is after this warpgroup's last row contributes nothing
    const bool active = !causal || j0 <= wg_row0 + 63;
    uint32_t pf[KB][4];
    if (active) {
      float s[NS];
      issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
      wgmma_wait<0>();
      fence_regs(s);
      float alpha[2];
      if (softmax_tile<T, BN>(s, pf, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2))
        rescale_o(o, alpha);
    }
    cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
    fence_proxy_async();
    __syncthreads();
    if (active) {
      issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (t + 1 < n_kv) load_tile_sw128<BN, D, NT>(sV + (st ^ 1) * TKV, Vb, (t + 1) * BN, Nk, tid);
    cp_async_commit();
  }
  cp_async_wait<0>();
  store_rows<T, D, BM>(o, m, l, smem, wg * 64, 1 + wg, wg_row0, Nq, bh, O, LSE, scale_log2);
}

// ------------------------------------------------------------------------------ step 2: TMA

template <typename T, int D, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
flash_wgmma_tma_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                               const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                               Dims dm, float scale_log2, int causal) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  constexpr int KB = BN / 16, NS = BN / 2, NO = D / 2;
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // [BM][D]
  const uint32_t sK = sQ + TQ;                 // [STAGES][BN][D]
  const uint32_t sV = sK + STAGES * TKV;       // [STAGES][BN][D]
  const uint32_t bar_q = sV + STAGES * TKV;    // mbarriers: Q, K[STAGES], V[STAGES]
  const uint32_t bar_k = bar_q + 8, bar_v = bar_k + 8 * STAGES;
  uint8_t* const smem = smem_raw + (sQ - raw);

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int Nq = dm.Nq, Nk = dm.Nk;
  const int bh = blockIdx.y;
  const int kvh = int(dm.kv_head(bh));
  const int q0 = (causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)) * BM;
  const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
  const int n_kv = (kv_len + BN - 1) / BN;
  const int wg_row0 = q0 + wg * 64;
  const int row0 = wg_row0 + warp * 16 + (lane >> 2);

  if (tid == 0) {
    tma_prefetch_map(&tmQ);
    tma_prefetch_map(&tmK);
    tma_prefetch_map(&tmV);
    mbar_init(bar_q, 1);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_k + 8 * s, 1);
      mbar_init(bar_v + 8 * s, 1);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(bar_q, TQ);
    tma_load_tile<D, BM>(sQ, &tmQ, bar_q, q0, bh);
    for (int s = 0; s < STAGES && s < n_kv; ++s) {
      mbar_arrive_expect_tx(bar_k + 8 * s, TKV);
      tma_load_tile<D, BN>(sK + s * TKV, &tmK, bar_k + 8 * s, s * BN, kvh);
      mbar_arrive_expect_tx(bar_v + 8 * s, TKV);
      tma_load_tile<D, BN>(sV + s * TKV, &tmV, bar_v + 8 * s, s * BN, kvh);
    }
  }

  const uint64_t dQ = desc_kmajor(sQ + wg * 64 * 128);
  const uint64_t dK = desc_kmajor(sK);
  const uint64_t dV = desc_mnmajor(sV, BN * 128);

  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  mbar_wait(bar_q, 0);
  int st = 0;        // stage of tile t
  uint32_t ph = 0;   // parity of the stage's barriers' phase for tile t: (t / STAGES) & 1
  for (int t = 0; t < n_kv; ++t) {
    const int j0 = t * BN;
    const bool active = !causal || j0 <= wg_row0 + 63;
    if (active) {
      uint32_t pf[KB][4];
      {
        float s[NS];
        mbar_wait(bar_k + 8 * st, ph);
        issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
        wgmma_wait<0>();
        fence_regs(s);
        float alpha[2];
        if (softmax_tile<T, BN>(s, pf, m, l, alpha, j0, Nk, causal, wg_row0, row0, lane, scale_log2))
          rescale_o(o, alpha);
      }
      mbar_wait(bar_v + 8 * st, ph);
      issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (t + STAGES < n_kv) {  // block-uniform
      __syncthreads();        // every warpgroup is done with stage st
      if (tid == 0) {
        const int jn = (t + STAGES) * BN;
        mbar_arrive_expect_tx(bar_k + 8 * st, TKV);
        tma_load_tile<D, BN>(sK + st * TKV, &tmK, bar_k + 8 * st, jn, kvh);
        mbar_arrive_expect_tx(bar_v + 8 * st, TKV);
        tma_load_tile<D, BN>(sV + st * TKV, &tmV, bar_v + 8 * st, jn, kvh);
      }
    }
    if (++st == STAGES) {
      st = 0;
      ph ^= 1;
    }
  }
  store_rows<T, D, BM>(o, m, l, smem, wg * 64, 1 + wg, wg_row0, Nq, bh, O, LSE, scale_log2);
}

// ------------------------------------------------------------------------------ step 3: warp specialization

// Shared memory of the warp-specialized kernel: QBUF Q tiles, the K/V ring, 1 KB of slack for the
// 1024-byte alignment of the SW128 tiles, the mbarriers.
template <int D, int BM, int BN, int QBUF, int STAGES>
constexpr int ws_smem() {
  return (QBUF * BM * D + 2 * STAGES * BN * D) * 2 + 1024 + 8 * (2 * QBUF + 4 * STAGES) + 4 * QBUF;
}
// K/V stages of the warp-specialized kernel: 3 where the shared memory of a block (227 KB) holds
// them, else 2.
template <int D, int BM, int BN, int QBUF = 1>
constexpr int ws_stages() {
  return ws_smem<D, BM, BN, QBUF, 3>() <= 227 * 1024 ? 3 : 2;
}
// Q buffers of the persistent kernel: two (the next tile's Q loads during this one's epilogue) where a
// 3-stage ring still fits beside them, else one where that buys the third stage (128x128 at D = 128), else two.
template <int D, int BM, int BN>
constexpr int ws_persistent_qbuf() {
  return ws_stages<D, BM, BN, 2>() == 3 || ws_stages<D, BM, BN, 1>() == 2 ? 2 : 1;
}

// Query tiles of one head: main_qb whole BM-row blocks, then (main_qb < ceil(Nq / BM)) the rows after them in
// tiles of BM - 64 rows (tail tiles, below). The launcher sizes the grid with it, the kernel deals tiles by it.
template <int BM>
__host__ __device__ __forceinline__ int tail_tiles_per_head(int Nq, int main_qb) {
  return main_qb * BM < Nq ? (Nq - main_qb * BM + BM - 65) / (BM - 64) : 0;
}

// Causal, tail "auto" (step 8): the heads are dealt in groups of this many, as many as have their K and V within
// 16 MiB (a third of an H100's L2), at least one; each group's tiles heaviest first across its heads.
__host__ __device__ __forceinline__ int causal_head_group(int Nk, int D, int elem_bytes, int batch_heads) {
  const long per_head = 2L * Nk * D * elem_bytes;
  const long g = (16L << 20) / (per_head > 0 ? per_head : 1);
  return int(g < 1 ? 1 : g > batch_heads ? batch_heads : g);
}

// Warpgroup 0 is the producer (one thread issues every copy), warpgroups 1 .. NWG the consumers
// (64 query rows each). Barriers per stage: full_k / full_v (the copy engine's bytes landed; one
// arrival, the producer's expect_tx) and empty_k / empty_v (NWG arrivals, one per consumer
// warpgroup once its wgmma reading the stage has completed). OVERLAP: a consumer issues S_t =
// Q K_t^T and O += P_{t-1} V_{t-1} back to back and runs the softmax of S_t while the second is in
// flight (FlashAttention-3's intra-warpgroup pipelining). PINGPONG: the consumer warpgroups take turns
// to issue their wgmma (FlashAttention-3's inter-warpgroup "ping-pong"): warpgroup c waits at named
// barrier kSchedBar + c for its turn, issues the tile's products and arrives at the next warpgroup's
// barrier, so the tensor cores run one warpgroup's GEMMs while the other does its softmax.
constexpr int kSchedBar = 4;  // named barriers 4 .. 4 + NWG - 1 (1 .. NWG: store_rows; 0: __syncthreads)
template <typename T, int D, int BM, int BN, int STAGES, bool OVERLAP, bool PINGPONG = false, int QBUF = 1,
          bool PERSIST = false>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
flash_wgmma_ws_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                              const __grid_constant__ CUtensorMap tmV, T* __restrict__ O, float* __restrict__ LSE,
                              Dims dm, int batch_heads, float scale_log2, int causal,
                              int* __restrict__ next_tile, int main_qb) {
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128) && (D == 64 || D == 128), "tile shape");
  static_assert(STAGES >= 2 && (QBUF == 1 || (QBUF == 2 && PERSIST)), "K/V ring, Q buffers");
  constexpr int NWG = BM / 64;  // consumer warpgroups
  constexpr int KB = BN / 16, NS = BN / 2, NO = D / 2;
  constexpr uint32_t TQ = BM * D * 2, TKV = BN * D * 2;
  // the register file (64 K) split: 128 producer threads x PRODUCER_REGS + NWG x 128 x CONSUMER_REGS
  constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32, CONSUMER_REGS = NWG == 2 ? 240 : 160;
  static_assert(128 * PRODUCER_REGS + NWG * 128 * CONSUMER_REGS <= 65536, "register split");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;    // [QBUF][BM][D]
  const uint32_t sK = sQ + QBUF * TQ;            // [STAGES][BN][D]
  const uint32_t sV = sK + STAGES * TKV;         // [STAGES][BN][D]
  // mbarriers: full_q, empty_q [QBUF]; full_k, full_v, empty_k, empty_v [STAGES]
  const uint32_t full_q = sV + STAGES * TKV, empty_q = full_q + 8 * QBUF;
  const uint32_t full_k = empty_q + 8 * QBUF, full_v = full_k + 8 * STAGES;
  const uint32_t empty_k = full_v + 8 * STAGES, empty_v = empty_k + 8 * STAGES;
  uint8_t* const smem = smem_raw + (sQ - raw);
  // persistent: the work tile of each Q buffer, written by the producer before the buffer's full_q arrival
  // (release), read by the consumers after their wait on it (acquire); -1: no more work
  volatile int* const sTile = reinterpret_cast<volatile int*>(smem + (empty_v + 8 * STAGES - sQ));

  const int tid = threadIdx.x, wg = tid >> 7;
  const int Nq = dm.Nq, Nk = dm.Nk;
  // Work tiles (head bh, query block j) in the order a 2-D grid (query blocks x heads) would launch them,
  // heaviest query block of a head first when causal; consecutive tiles share a head's K/V (L2 reuse). One
  // block per tile, or (PERSIST) one block per SM taking tile blockIdx.x first and then the
  // next one not yet taken, from the global counter *next_tile (zero at launch), as the hardware's block
  // scheduler would: whichever SM is free takes the next tile. A fixed deal of tiles b, b + gridDim.x, ...
  // left 14 % of the SMs' cycles idle at the end (H100, D = 128, N = 4096), and dealing causal tiles
  // heaviest-first over all heads balanced them at 5.6x the DRAM traffic.
  // Tail tiles (PERSIST, not causal; main_qb < n_qb, chosen by the host): each head's first main_qb query
  // blocks are BM-row tiles as above; the rows after them are cut into tiles of BM - 64 rows (one consumer
  // warpgroup idle), all heads' handed out after every BM-row tile, so that the last work the SMs take is
  // short and they finish closer together (flash_kernels/_ops.py: _wg_tail_plan). The tail visits the heads
  // last to first: the last heads' K/V are the likeliest still in L2.
  constexpr int TB = BM - 64;
  const int n_qb = (Nq + BM - 1) / BM;
  const int n_tail = tail_tiles_per_head<BM>(Nq, main_qb);
  const int n_main = main_qb * batch_heads, n_tiles = n_main + n_tail * batch_heads;
  // causal (truthy): 2 = step 8's head groups (tail "auto"; cg heads per group, below), 1 = one head after another
  auto tile_of = [&](int i, int& bh, int& q0, int& n_kv, int& q_end) {
    if (i < n_main) {
      if (causal) {  // group g of gh heads: its j-th heaviest query block of each head, then the (j+1)-th
        const int cg = causal > 1 ? causal_head_group(Nk, D, int(sizeof(T)), batch_heads) : 1;
        const int g = i / (cg * main_qb), gh = min(cg, batch_heads - g * cg);
        const int r = i - g * cg * main_qb, j = r / gh;
        bh = g * cg + (r - j * gh);
        q0 = (n_qb - 1 - j) * BM;
      } else {
        bh = i / main_qb;
        q0 = (i - bh * main_qb) * BM;
      }
      q_end = q0 + BM;
    } else {
      const int k = i - n_main, r = k / n_tail;
      bh = batch_heads - 1 - r;
      q0 = main_qb * BM + (k - r * n_tail) * TB;
      q_end = q0 + TB;
    }
    const int kv_len = causal ? min(Nk, q0 + BM) : Nk;
    n_kv = (kv_len + BN - 1) / BN;
  };

  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < QBUF; ++b) {
      mbar_init(full_q + 8 * b, 1);
      mbar_init(empty_q + 8 * b, NWG * 128);  // every consumer thread, after its last read of the tile
    }
    mbar_init_kv_ring<STAGES>(full_k, full_v, empty_k, empty_v, NWG);
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles meet only on mbarriers

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_map(&tmQ);
      tma_prefetch_map(&tmK);
      tma_prefetch_map(&tmV);
      int st = 0, loaded = 0;  // the ring runs on across work tiles: stage, K/V tiles issued so far
      uint32_t ph = 0;         // parity of the current phase of stage st's barriers: (loaded / STAGES) & 1
      int it = 0;
      // PERSIST with one Q buffer: a work tile's first K/V tiles (up to STAGES) are issued before its Q, whose
      // buffer frees only after the previous tile's epilogue; the ring's stages free while the consumers finish
      // that tile, so the next tile's K/V is in flight when they start it. Otherwise Q first.
      constexpr bool Q_LATE = PERSIST && QBUF == 1;
      for (int i = blockIdx.x;; ++it) {
        const int qb = it % QBUF;
        if (!PERSIST && i >= n_tiles) break;  // one tile per block
        // Q buffer qb is free once every consumer has stored the rows it staged there (work tile it - QBUF)
        auto wait_q_free = [&] {
          if (it >= QBUF) mbar_wait(empty_q + 8 * qb, ((it / QBUF) & 1) ^ 1);
        };
        if (i >= n_tiles) {
          wait_q_free();
          if constexpr (PERSIST) {  // tell the consumers there is no more work
            sTile[qb] = -1;
            mbar_arrive(full_q + 8 * qb);
          }
          break;
        }
        int bh, q0, n_kv, q_end;
        tile_of(i, bh, q0, n_kv, q_end);
        const int kvh = int(dm.kv_head(bh));
        auto load_q = [&] {
          wait_q_free();
          if constexpr (PERSIST) sTile[qb] = i;
          mbar_arrive_expect_tx(full_q + 8 * qb, TQ);
          tma_load_tile<D, BM>(sQ + qb * TQ, &tmQ, full_q + 8 * qb, q0, bh);
        };
        if constexpr (!Q_LATE) load_q();
        const int q_at = Q_LATE ? min(STAGES, n_kv) : -1;  // K/V tiles issued before Q
        for (int t = n_kv - 1, n = 0; t >= 0; --t, ++n, ++loaded) {  // last K/V tile first (the consumers' order)
          if (Q_LATE && n == q_at) load_q();
          // refilling stage st waits for its release of the tile STAGES loads ago (the previous phase)
          if (loaded >= STAGES) mbar_wait(empty_k + 8 * st, ph ^ 1);
          mbar_arrive_expect_tx(full_k + 8 * st, TKV);
          tma_load_tile<D, BN>(sK + st * TKV, &tmK, full_k + 8 * st, t * BN, kvh);
          if (loaded >= STAGES) mbar_wait(empty_v + 8 * st, ph ^ 1);
          mbar_arrive_expect_tx(full_v + 8 * st, TKV);
          tma_load_tile<D, BN>(sV + st * TKV, &tmV, full_v + 8 * st, t * BN, kvh);
          if (++st == STAGES) {
            st = 0;
            ph ^= 1;
          }
        }
        if (Q_LATE && q_at == n_kv) load_q();  // n_kv <= STAGES
        i = PERSIST ? int(gridDim.x) + atomicAdd(next_tile, 1) : n_tiles;
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, t128 = tid & 127, warp = t128 >> 5, lane = tid & 31;
    const uint64_t dK = desc_kmajor(sK);
    const uint64_t dV = desc_mnmajor(sV, BN * 128);
    // one arrival per warpgroup: its wgmma reading the stage have completed (wgmma_wait)
    auto release = [&](uint32_t bar) { mbar_arrive_if(bar, t128 == 0); };
    // ping-pong turns: every consumer warpgroup takes exactly n_kv turns per work tile (one per K/V tile,
    // the causal tiles after its rows included, with nothing issued), so the rotation never waits for a
    // warpgroup that has finished; each barrier meets 128 waiting and 128 arriving threads
    auto turn_wait = [&] {
      if constexpr (PINGPONG) bar_sync(kSchedBar + c, 256);
    };
    auto turn_pass = [&] {
      if constexpr (PINGPONG) bar_arrive(kSchedBar + (c + 1 == NWG ? 0 : c + 1), 256);
    };
    if constexpr (PINGPONG) {
      if (c == 0) bar_arrive(kSchedBar, 256);  // the first turn is warpgroup 1's
    }
    int st = 0;  // the ring, as the producer runs it: stage and phase parity of the next K/V tile
    uint32_t ph = 0;
    // S = Q K^T of the K tile in stage st, waited for (its stage released): the first tile of the
    // overlapped loop and every tile of the plain one
    auto scores_waited = [&](float (&s)[NS], uint64_t dQ) {
      mbar_wait(full_k + 8 * st, ph);
      turn_wait();
      issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));
      turn_pass();
      wgmma_wait<0>();
      fence_regs(s);
      release(empty_k + 8 * st);
    };
    auto advance = [&] {
      if (++st == STAGES) {
        st = 0;
        ph ^= 1;
      }
    };
    for (int it = 0;; ++it) {
      const int qb = it % QBUF;
      int i = int(blockIdx.x);
      if constexpr (PERSIST) {
        mbar_wait(full_q + 8 * qb, (it / QBUF) & 1);
        i = sTile[qb];
        if (i < 0) break;
      } else if (it > 0) {
        break;
      }
      int bh, q0, n_kv, q_end;
      tile_of(i, bh, q0, n_kv, q_end);
      const int wg_row0 = q0 + c * 64;
      const int row0 = wg_row0 + warp * 16 + (lane >> 2);
      // causal: tiles from n_wg on start after this warpgroup's last row and contribute nothing; a warpgroup
      // whose rows all lie past Nq (the last query block of a ragged Nq: at N = 4096 the 22nd 192-row block holds
      // 64 rows) or past its tile's (a tail tile's last 64) computes none (n_wg = 0) and only keeps the ring's
      // phases and the turns in step
      const int n_wg = wg_row0 >= Nq || wg_row0 >= q_end ? 0 : causal ? min(n_kv, (wg_row0 + 64 + BN - 1) / BN) : n_kv;
      const uint64_t dQ = desc_kmajor(sQ + qb * TQ + c * 64 * 128);

      float o[NO];
#pragma unroll
      for (int k = 0; k < NO; ++k) o[k] = 0.f;
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

      if constexpr (!PERSIST) mbar_wait(full_q, 0);
      // K/V tiles last to first, as the producer loads them. Causal: the tiles after this warpgroup's rows
      // (t >= n_wg) come first; nothing to compute, but each stage is released in its turn, after it has been
      // filled (so no warpgroup arrives twice on one phase). Then tile n_wg - 1, the only one that can reach
      // past Nk or the diagonal (n_wg - 1 = floor((last row) / BN) and rows start at multiples of 64, so every
      // key of an earlier tile is at most the warpgroup's first row), masked if it needs it; then the rest
      // without a mask.
      release_kv_unread(n_kv - n_wg, full_k, full_v, empty_k, empty_v, st, ph, turn_wait, turn_pass, release, advance);
      if constexpr (!OVERLAP) {
        for (int t = n_wg - 1; t >= 0; --t) {
          uint32_t pf[KB][4];
          {
            float s[NS];
            scores_waited(s, dQ);
            float alpha[2];
            if (softmax_tile<T, BN>(s, pf, m, l, alpha, t * BN, Nk, causal, wg_row0, row0, lane, scale_log2))
              rescale_o(o, alpha);
          }
          mbar_wait(full_v + 8 * st, ph);
          issue_pv<T, D, BN>(o, pf, desc_add(dV, st * TKV));
          wgmma_wait<0>();
          fence_regs(o);
          release(empty_v + 8 * st);
          advance();
        }
      } else if (n_wg > 0) {
        // P_{t+1} (in pf) waits for V_{t+1} in stage vst while S_t is computed
        uint32_t pf[KB][4];
        {
          float s[NS];
          scores_waited(s, dQ);
          float alpha[2];
          softmax_scores<BN>(s, m, l, alpha, (n_wg - 1) * BN, Nk, causal, wg_row0, row0, lane,
                             scale_log2);  // O = 0: no rescale
          pack_p<T, BN>(s, pf);
        }
        int vst = st;
        uint32_t vph = ph;
        advance();
        // One tile t < n_wg - 1: no mask (see above). Between wgmma_wait<1> and wgmma_wait<0> the code must not
        // branch: ptxas then waits for every wgmma before the branch (seen in the SASS: WARPGROUP.DEPBAR.LE gsb0,
        // 0x0 right after 0x1), and the softmax no longer overlaps O += P V. Hence the predicated arrival. S is a
        // fresh array per tile (not loop-carried).
        for (int t = n_wg - 2; t >= 0; --t) {
          float s[NS];
          mbar_wait(full_k + 8 * st, ph);
          turn_wait();
          issue_scores<T, D, BM, BN>(s, dQ, desc_add(dK, st * TKV));  // S_t
          mbar_wait(full_v + 8 * vst, vph);
          issue_pv<T, D, BN>(o, pf, desc_add(dV, vst * TKV));         // O += P_{t+1} V_{t+1}
          turn_pass();
          wgmma_wait<1>();                                            // S_t done, O += P V in flight
          fence_regs(s);
          release(empty_k + 8 * st);
          float alpha[2];
          const bool grew =
              softmax_scores<BN, kMaskNever>(s, m, l, alpha, t * BN, Nk, causal, wg_row0, row0, lane, scale_log2);
          fence_regs(s);  // the softmax is computed here, while O += P V runs, not sunk past the wait
          fence_regs(l);
          fence_regs(alpha);
          wgmma_wait<0>();
          fence_regs(o);
#pragma unroll
          for (int kk = 0; kk < KB; ++kk) fence_regs(pf[kk]);  // P_{t+1} is read until here
          release(empty_v + 8 * vst);
          if (grew) rescale_o(o, alpha);
          pack_p<T, BN>(s, pf);
          vst = st;
          vph = ph;
          advance();
        }
        mbar_wait(full_v + 8 * vst, vph);
        issue_pv<T, D, BN>(o, pf, desc_add(dV, vst * TKV));
        wgmma_wait<0>();
        fence_regs(o);
        release(empty_v + 8 * vst);
      }
      // writes no row past Nq or the tile's rows
      store_rows<T, D, BM>(o, m, l, smem + qb * TQ, c * 64, 1 + c, wg_row0, Nq, bh, O, LSE, scale_log2, q_end);
      // the Q buffer goes back to the producer: this thread's generic reads and writes of it are
      // ordered before the copy engine's next writes (proxy fence), then one arrival per thread
      fence_proxy_async();
      mbar_arrive(empty_q + 8 * qb);
    }
  }
}

// ------------------------------------------------------------------------------ launchers

template <typename T, int D, int BM, int BN>
cudaError_t wgmma_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = flash_wgmma_forward_kernel<T, D, BM, BN>;
  constexpr int smem = (BM * D + 4 * BN * D) * 2 + 1024;  // + slack for 1024-byte alignment
  cudaError_t err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BM), a.B * a.H), BM / 64 * 128, smem, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// The tensor maps of one call: Q [B*H][Nq][D] in boxes of BM rows, K and V [B*Hkv][Nk][D] in boxes
// of BN rows.
template <typename T, int D, int BM, int BN>
cudaError_t make_qkv_maps(const AttnArgs& a, CUtensorMap (&maps)[3]) {
  cudaError_t err = make_tile_map<T>(&maps[0], a.q, a.B * a.H, a.Nq, D, BM);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[1], a.k, a.B * a.Hkv, a.Nk, D, BN);
  if (err == cudaSuccess) err = make_tile_map<T>(&maps[2], a.v, a.B * a.Hkv, a.Nk, D, BN);
  return err;
}

template <typename T, int D, int BM, int BN>
cudaError_t wgmma_tma_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  constexpr int STAGES = 2;
  auto kernel = flash_wgmma_tma_forward_kernel<T, D, BM, BN, STAGES>;
  // tiles + slack for 1024-byte alignment + the mbarriers
  constexpr int smem = (BM * D + 2 * STAGES * BN * D) * 2 + 1024 + 8 * (1 + 2 * STAGES);
  CUtensorMap maps[3];
  cudaError_t err = make_qkv_maps<T, D, BM, BN>(a, maps);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(cdiv(a.Nq, BM), a.B * a.H), BM / 64 * 128, smem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<T*>(a.o), a.lse, dims_of(a), a.scale * kLog2e, a.causal);
  return cudaGetLastError();
}

// OVERLAP_REQUESTED: tma-ws-overlap. The 192x128 tile at D = 128 runs without the overlap: its 3
// consumer warpgroups get 160 registers each, and S, P and O of two tiles in flight need 160 alone
// (ptxas: 272 bytes of spills, wgmma serialized).
// PERSISTENT: one block per SM, each looping over work tiles (see the kernel), with two Q buffers so
// that the next tile's Q and first K/V tiles load while this one computes and stores; else one block
// per work tile.
template <typename T, int D, int BM, int BN, bool OVERLAP_REQUESTED, bool PINGPONG = false, bool PERSISTENT = false>
cudaError_t wgmma_ws_forward_launch(const AttnArgs& a, cudaStream_t stream) {
  constexpr int QBUF = PERSISTENT ? ws_persistent_qbuf<D, BM, BN>() : 1;
  constexpr int STAGES = ws_stages<D, BM, BN, QBUF>();
  constexpr bool OVERLAP = OVERLAP_REQUESTED && !(D == 128 && BM == 192 && BN == 128);
  auto kernel = flash_wgmma_ws_forward_kernel<T, D, BM, BN, STAGES, OVERLAP, PINGPONG, QBUF, PERSISTENT>;
  constexpr int smem = ws_smem<D, BM, BN, QBUF, STAGES>();
  static_assert(smem <= 227 * 1024, "shared memory of a block");
  CUtensorMap maps[3];
  cudaError_t err = make_qkv_maps<T, D, BM, BN>(a, maps);
  if (err == cudaSuccess) err = allow_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  // main_qb: option bits 8.. less one where the host planned tail tiles (persistent, not causal), else every
  // query block is a BM-row tile
  const int n_qb = cdiv(a.Nq, BM);
  const int main_qb = PERSISTENT && !a.causal && (a.option >> 8) > 0 ? std::min((a.option >> 8) - 1, n_qb) : n_qb;
  // causal: option bits 8.. non-zero = step 8's head groups (the kernel's causal argument 2)
  const int causal = a.causal ? ((a.option >> 8) > 0 ? 2 : 1) : 0;
  const long tiles = (main_qb + tail_tiles_per_head<BM>(a.Nq, main_qb)) * long(a.B) * a.H;
  long blocks = tiles;
  if constexpr (PERSISTENT) {
    int device = 0, sms = 0;
    err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    blocks = std::min<long>(tiles, sms);
    if (a.ws[0] == nullptr) return cudaErrorInvalidValue;  // the tile counter, zeroed by the caller
  }
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  kernel<<<unsigned(blocks), (BM / 64 + 1) * 128, smem, stream>>>(
      maps[0], maps[1], maps[2], static_cast<T*>(a.o), a.lse, dims_of(a), a.B * a.H, a.scale * kLog2e, causal,
      reinterpret_cast<int*>(a.ws[0]), main_qb);
  return cudaGetLastError();
}

// Pipeline codes (option bits 4..7) as flash_kernels/_ops.py names them: 0 = cp.async, 1 = tma,
// 2 = tma-ws, 3 = tma-ws-overlap, 4 = tma-ws-pingpong, 5 = tma-ws-persistent,
// 6 = tma-ws-persistent-pingpong. Bits 8..: the persistent pipelines' main query blocks per head + 1 (0: all);
// causal, the tma-ws pipelines: non-zero = step 8's head groups.
template <typename T, int D, int BM, int BN>
cudaError_t wgmma_forward_pipeline(const AttnArgs& a, cudaStream_t stream) {
  switch ((a.option >> 4) & 15) {
    case 0: return wgmma_forward_launch<T, D, BM, BN>(a, stream);
    case 1: return wgmma_tma_forward_launch<T, D, BM, BN>(a, stream);
    case 2: return wgmma_ws_forward_launch<T, D, BM, BN, false>(a, stream);
    case 3: return wgmma_ws_forward_launch<T, D, BM, BN, true>(a, stream);
    case 4: return wgmma_ws_forward_launch<T, D, BM, BN, true, true>(a, stream);
    case 5: return wgmma_ws_forward_launch<T, D, BM, BN, true, false, true>(a, stream);
    case 6: return wgmma_ws_forward_launch<T, D, BM, BN, true, true, true>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The tile table: tile code (option & 15) -> (query rows BM = 64 per warpgroup, keys per K/V tile BN).
// Codes as flash_kernels/_ops.py names them: 0 = 128x128, 1 = 128x64, 2 = 192x128, 3 = 192x64.
template <typename T, int D>
cudaError_t wgmma_forward_tiles(const AttnArgs& a, cudaStream_t stream) {
  switch (a.option & 15) {
    case 0: return wgmma_forward_pipeline<T, D, 128, 128>(a, stream);
    case 1: return wgmma_forward_pipeline<T, D, 128, 64>(a, stream);
    case 2: return wgmma_forward_pipeline<T, D, 192, 128>(a, stream);
    case 3: return wgmma_forward_pipeline<T, D, 192, 64>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fk

int flash_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream) {
  return fk::dispatch_dtype_hdim</*fp32=*/false>(a, [&](auto t, auto d) {
    return fk::wgmma_forward_tiles<typename decltype(t)::type, decltype(d)::value>(a, stream);
  });
}
