"""The Nsight Compute metrics the captures collect, named in one place.

The roofline metrics are those of Nsight Compute's own ``SpeedOfLight_Hierarchical{Single,Half,
Tensor}RooflineChart`` sections (peaks as ``.peak_sustained`` per cycle, clocks as
``cycles_elapsed.avg.per_second``), collected as totals (``.sum``) so that the analysis can divide
by the kernel's own duration; plus the L2 and DRAM traffic of the L2-thrashing analysis and the
launch statistics. Kept short on purpose: each extra counter group can cost a replay pass (a first
list of 38 metrics took 14 passes per kernel on the H200; the manifest records the count). This list
takes 5; measured by dropping one metric or group at a time (``STEPS=passes bash scripts/gpu_node.sh``
on a GPU machine prints the passes each costs): the four SASS instruction counters share one (instrumented) pass, and ``lts__lts2xbar_cycles_active`` and
``lts__t_sector_hit_rate`` each force one more; every other metric rides along.
"""

from __future__ import annotations

#: clock of each unit (cycles per second, as measured during the kernel)
CLOCKS = {
    "sm": "sm__cycles_elapsed.avg.per_second",
    "dram": "dram__cycles_elapsed.avg.per_second",
    "lts": "lts__cycles_elapsed.avg.per_second",
    "l1tex": "l1tex__cycles_elapsed.avg.per_second",
    "smsp": "smsp__cycles_elapsed.avg.per_second",
}

#: compute work: counted instructions (thread-level for fp32/fp16, warp-level for the tensor pipe)
WORK = {
    "ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "hfma": "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "tensor_fp16": "sm__ops_path_tensor_src_fp16.sum",
}

#: peak instruction rates per cycle for the whole GPU (Nsight's roofline peaks)
PEAKS = {
    "ffma": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "hfma": "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
    "tensor_fp16": "sm__ops_path_tensor_src_fp16.sum.peak_sustained",
    "dram_bytes": "dram__bytes.sum.peak_sustained",
    "lts2xbar": "lts__lts2xbar_cycles_active.sum.peak_sustained",
    "l1_writeback": "l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained",
}

#: memory traffic at each level of the hierarchy
TRAFFIC = {
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "dram_bytes": "dram__bytes.sum",
    "lts2xbar": "lts__lts2xbar_cycles_active.sum",
    "l1_writeback": "l1tex__lsu_writeback_active_mem_lgds.sum",
    "lts_sectors": "lts__t_sectors.sum",
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
}

GROUPS = {"clocks": CLOCKS, "work": WORK, "peaks": PEAKS, "traffic": TRAFFIC, "launch": LAUNCH}

#: FLOPs per counted unit, as Nsight Compute 2025.3's hierarchical roofline sections weigh them:
#: FFMA x2, FADD/FMUL x1 (Single); HFMA x4, HADD/HMUL x2 (Half: packed half2 instructions); the
#: tensor path counters already count operations (Tensor section: sm__ops_path_tensor_*).
#: (HADD/HMUL and the bf16 tensor path are left out to save replay passes: the suites are fp16 and
#: the kernels do their softmax arithmetic in fp32.)
FLOP_PER_INST = {"ffma": 2, "fadd": 1, "fmul": 1, "hfma": 4, "tensor_fp16": 1}
#: bytes per unit of the traffic counters Nsight turns into bytes (its derived__ metrics)
L1_WRITEBACK_BYTES = 128  # l1tex__lsu_writeback_active_mem_lgds (cycles) -> bytes
LTS2XBAR_BYTES = 32  # lts__lts2xbar_cycles_active (cycles) -> bytes
SHARED_WAVEFRONT_BYTES = 128


def metric_names() -> list[str]:
    """Every metric ncu is asked for, in a stable order without duplicates."""
    seen: dict[str, None] = {}
    for group in GROUPS.values():
        for name in group.values():
            seen.setdefault(name, None)
    return list(seen)

#: the deep tier's Nsight Compute sections: the ones that explain a kernel's time (stall reasons, pipes,
#: occupancy and its limiter, memory tables, instruction mix, per-instruction source counters). A report
#: captured with ``--set full`` or ``--set detailed`` holds them too (SourceCounters: ``full`` only).
DEEP_SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                 "MemoryWorkloadAnalysis_Chart", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
                 "InstructionStats", "SourceCounters")
#: the sections without which the bottleneck analysis cannot run at all (SourceCounters only feeds hotspots)
BOTTLENECK_SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
