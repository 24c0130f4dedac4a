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

# --------------------------------------------------------------------------- the deep tier's metrics (bottleneck analysis)

#: a warp stall reason's metric: STALL_METRIC.format(reason) (the reasons: nsightlab.analysis.bottleneck.STALLS)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

#: the per-launch quantities of the bottleneck analysis (nsightlab.analysis.bottleneck.profile): column -> the
#: report's metric
PROFILE_METRICS: dict[str, str] = {
    "time_ns": "gpu__time_duration.sum",
    "compute_sol_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_sol_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_slots_busy_pct": "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    "eligible_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "warp_cycles_per_issued": "smsp__average_warp_latency_per_inst_issued.ratio",
    "inst_issued": "smsp__inst_issued.sum",
    "inst_issued_per_scheduler": "smsp__inst_issued.avg",
    "warps_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
    "eligible_warps_per_scheduler": "smsp__warps_eligible.avg.per_cycle_active",
    "sm_active_cycles": "sm__cycles_active.avg",
    "elapsed_cycles": "gpc__cycles_elapsed.max",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "spill_requests": "derived__local_spilling_requests",
    "shared_ld_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared_st_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "shared_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_st_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "global_ld_instructions": "smsp__sass_inst_executed_op_global_ld.sum",
    "global_ld_bytes_per_sector": "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "global_st_instructions": "smsp__sass_inst_executed_op_global_st.sum",
    "global_st_bytes_per_sector": "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "threads_per_inst": "smsp__thread_inst_executed_per_inst_executed.ratio",
    "pred_on_threads_per_inst": "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes_per_s": "dram__bytes.sum.per_second",
    "l2_sectors_per_s": "lts__t_sectors.sum.per_second",
}
#: bytes in one L2 sector: the bottleneck profile's ``l2_tbps`` is Nsight's L2 sectors per second times it
L2_SECTOR_BYTES = 32
#: the bottleneck profile's throughputs in TB/s, as the metrics they are read from
TBPS_METRIC = {"dram_tbps": "dram__bytes.sum.per_second / 1e12",
               "l2_tbps": f"lts__t_sectors.sum.per_second x {L2_SECTOR_BYTES} bytes / 1e12"}
#: occupancy limits (blocks per SM that each resource allows): column -> metric
OCCUPANCY_LIMITS: dict[str, str] = {
    "registers": "launch__occupancy_limit_registers", "shared memory": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps", "blocks": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}
#: a pipe's utilization metric (instructions executed, or cycles active, in % of peak): its name in ``ip`` / ``cp``
PIPE_METRIC = r"^sm__(?:inst_executed_pipe_(?P<ip>\w+?)|pipe_(?P<cp>\w+?)_cycles_active)\.avg\.pct_of_peak_sustained_active$"


# --------------------------------------------------------------------------- the counters' other names (nsightlab.analysis.counters)

#: a SASS instruction counter (thread level, predicated-on threads): ``.format(unit="smsp" or "sm", op="ffma", ...)``
SASS_INST = "{unit}__sass_thread_inst_executed_op_{op}_pred_on.sum"
#: Nsight Compute's derived, FLOP-weighted form of it: ``.format(unit=..., op=..., weight=2)``
DERIVED_SASS_INST = "derived__{unit}__sass_thread_inst_executed_op_{op}_pred_on_x{weight}"
#: the tensor path's operation counters, by input type
TENSOR_PATH = {"tensor_fp16": "sm__ops_path_tensor_src_fp16.sum", "tensor_bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
               "tensor_tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "tensor_fp64": "sm__ops_path_tensor_src_fp64.sum"}
#: the dense tensor peak itself, where a report holds it (no halving needed: nsightlab.analysis.counters.TENSOR_DENSE_FACTOR)
TENSOR_DENSE_PEAK = "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained"
#: the tensor path's peak per second, as a report may state it (its 2:4 sparse rate)
TENSOR_PEAK_PER_SECOND = "sm__ops_path_tensor_src_fp16.sum.peak_sustained_elapsed.per_second"
#: the fp64 FMA peak per cycle
DFMA_PEAK = "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"
#: a unit's elapsed cycles and its clock: ``.format(unit="sm")``
UNIT_CYCLES = "{unit}__cycles_elapsed.avg"
UNIT_CLOCK = "{unit}__cycles_elapsed.avg.per_second"
#: Nsight Compute's derived L2 and L1 byte counters (with ``.per_second`` or ``.peak_sustained``)
DERIVED_L2_BYTES = "derived__lts__lts2xbar_bytes.sum"
DERIVED_L1_BYTES = "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum"
#: the GPU's SM count, first found first
SM_COUNT = ("launch__sm_count", "device__attribute_multiprocessor_count")
