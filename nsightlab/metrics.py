"""The Nsight Compute metrics the captures collect, named in one place.

The roofline metrics are those of Nsight Compute's own ``SpeedOfLight_Hierarchical{Single,Half,
Tensor}RooflineChart`` sections (peaks as ``.peak_sustained`` per cycle, clocks as
``cycles_elapsed.avg.per_second``), collected as totals (``.sum``) so that the analysis can divide
by the kernel's own duration; plus the L2 and DRAM traffic of the L2-thrashing analysis and the
launch statistics. Kept short on purpose: each extra counter group can cost a replay pass.
"""

from __future__ import annotations

#: clock of each unit (cycles per second, as measured during the kernel)
CLOCKS = {
    "sm": "sm__cycles_elapsed.avg.per_second",
    "dram": "dram__cycles_elapsed.avg.per_second",
    "lts": "lts__cycles_elapsed.avg.per_second",
    "l1tex": "l1tex__cycles_elapsed.avg.per_second",
}

#: compute work: counted instructions (thread-level for fp32/fp16, warp-level for the tensor pipe)
WORK = {
    "ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "hfma": "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "hadd": "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "hmul": "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "tensor_inst": "smsp__inst_executed_pipe_tensor.sum",
}

#: peak instruction rates per cycle for the whole GPU (Nsight's roofline peaks)
PEAKS = {
    "ffma": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "hfma": "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
    "tensor_inst": "sm__inst_executed_pipe_tensor.sum.peak_sustained",
    "dram_bytes": "dram__bytes.sum.peak_sustained",
    "l2_bytes": "l1tex__m_xbar2l1tex_read_bytes.sum.peak_sustained",
    "l1_writeback": "l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained",
}

#: memory traffic at each level of the hierarchy
TRAFFIC = {
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "dram_bytes": "dram__bytes.sum",
    "l2_to_l1": "l1tex__m_xbar2l1tex_read_bytes.sum",
    "l1_writeback": "l1tex__lsu_writeback_active_mem_lg.sum",
    "l1_bytes": "l1tex__t_bytes.sum",
    "lts_bytes": "lts__t_bytes.sum",
    "lts_sectors": "lts__t_sectors.sum",
    "lts_sectors_hit": "lts__t_sectors_lookup_hit.sum",
    "lts_sectors_miss": "lts__t_sectors_lookup_miss.sum",
    "lts_hit_rate": "lts__t_sector_hit_rate.pct",
    "shared_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
}

#: launch statistics and the kernel's own time
LAUNCH = {
    "duration": "gpu__time_duration.sum",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "smem_static": "launch__shared_mem_per_block_static",
    "smem_dynamic": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "sm_throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "mem_throughput": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
}

GROUPS = {"clocks": CLOCKS, "work": WORK, "peaks": PEAKS, "traffic": TRAFFIC, "launch": LAUNCH}

#: FLOPs per counted instruction: an FMA is two, add and multiply one; fp16 FMA instructions
#: counted per thread operate on half2 pairs on sm_80+ (Nsight's Half roofline counts 2 per hfma,
#: i.e. per instruction not per lane). One warp-level mma.sync m16n8k16 is 16*8*16*2 = 4096 FLOP.
FLOP_PER_INST = {"ffma": 2, "fadd": 1, "fmul": 1, "hfma": 2, "hadd": 1, "hmul": 1, "tensor_inst": 4096}
#: bytes per unit of the L1 writeback counter (Nsight's derived metric multiplies by 128)
L1_WRITEBACK_BYTES = 128
SHARED_WAVEFRONT_BYTES = 128


def metric_names() -> list[str]:
    """Every metric ncu is asked for, in a stable order without duplicates."""
    seen: dict[str, None] = {}
    for group in GROUPS.values():
        for name in group.values():
            seen.setdefault(name, None)
    return list(seen)
