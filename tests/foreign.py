"""A small Nsight Systems SQLite export as someone else's program would leave it (no GPU needed).

    from tests.foreign import make_foreign_sqlite, EXPECTED
    path = make_foreign_sqlite(tmp_path / "theirs.sqlite")

The tables and columns are the ones ``nsys export --type sqlite`` writes (2025.3: kernel and string
names as ``StringIds`` ids, NVTX push/pop ranges as eventType 59, a named domain created by an
eventType 75 row), filled with a hand-made timeline whose join is known: :data:`EXPECTED` maps each
kernel's correlation id to the range (and domain) that encloses its *launch* on its launching thread.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

GPU_NAME = "NVIDIA H100 80GB HBM3"
T1, T2 = 0x1000_0001_0001, 0x1000_0001_0002  # globalTid of two threads of one process
PID = 0x1000_0000_0000  # its globalPid: nsys's globalTid with the thread bits (the low 24) cleared
OTHER_TID, OTHER_PID = 0x2000_0002_0001, 0x2000_0000_0000  # a second process (second_process=True)
DEFAULT = "<default domain>"  # parse.DEFAULT_DOMAIN
MYLIB = "mylib"  # a domain the program created (eventType 75)

GEMM = "gemm:fwd M=4096"
MUL = "elementwise mul N=1048576"
SDPA = "sdpa flash B=4"
BROKEN = "fk:broken"  # outside every grammar: kept, labelled, never fatal
OTHER = "loader thread"

#: (name, start, end, thread, domain id; 0 = the default domain); nested ranges on T1, one on T2
RANGES = [
    (GEMM, 1_000, 5_000, T1, 0),
    (MUL, 2_000, 3_000, T1, 0),       # nested inside GEMM
    (SDPA, 7_000, 9_000, T1, 7),      # in the program's own domain
    (BROKEN, 10_000, 11_000, T1, 0),
    (OTHER, 0, 20_000, T2, 0),        # encloses every launch in time, but on another thread
]

#: correlationId -> (launch time, launching thread, kernel short name, expected range, expected domain)
KERNELS = {
    1: (500, T1, "warmup_kernel", "", ""),        # before any range on its thread (T2's range encloses it in time)
    2: (1_500, T1, "gemm_kernel", GEMM, DEFAULT),
    3: (2_500, T1, "mul_kernel", MUL, DEFAULT),   # innermost of two
    4: (4_900, T1, "gemm_epilogue", GEMM, DEFAULT),  # runs on the GPU after the range closed: the launch counts
    5: (6_000, T1, "between_kernel", "", ""),     # between ranges
    6: (8_000, T1, "flash_fwd_kernel", SDPA, MYLIB),
    7: (10_500, T1, "odd_kernel", BROKEN, DEFAULT),
    8: (12_000, T2, "loader_kernel", OTHER, DEFAULT),
    9: (30_000, T1, "tail_kernel", "", ""),       # after every range
}
EXPECTED = {cid: (rng, dom) for cid, (_, _, _, rng, dom) in KERNELS.items()}

GPU_ROW = {"vmId": 0, "id": 0, "name": GPU_NAME, "busLocation": "0000:00:06.0", "isDiscrete": 1, "l2CacheSize": 52428800,
           "totalMemory": 85017493504, "memoryBandwidth": 3352320000000, "clockRate": 1980000000, "smCount": 132,
           "chipName": "GH100", "maxShmemPerBlockOptin": 232448, "maxShmemPerSm": 233472, "maxRegistersPerSm": 65536,
           "maxWarpsPerSm": 64, "computeMajor": 9, "computeMinor": 0}


def make_foreign_sqlite(path: str | Path, *, gpu_name: str = GPU_NAME, kernel_table: str = "CUPTI_ACTIVITY_KIND_KERNEL",
                        string_ids: bool = True, kernels: bool = True, extra_kernel_table: str | None = None,
                        second_process: bool = False, same_start: bool = False) -> Path:
    """Write the synthetic export to ``path`` and return it.

    ``kernel_table``: the kernel table's name (e.g. ``CUPTI_ACTIVITY_KIND_KERNEL_V10``);
    ``extra_kernel_table``: a second kernel table (e.g. ``..._V9``) holding one decoy kernel named
    ``decoy_kernel``, to check which version a reader picks; ``string_ids`` False drops the
    ``StringIds`` table (names stay ids: a broken export); ``kernels`` False leaves no kernel;
    ``second_process`` adds a second process whose two kernels reuse correlation ids 2 and 3 (CUPTI
    numbers launches per process), launched outside every range; ``same_start`` starts the nested
    range at the same nanosecond as its parent and records it first."""
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, 1000 + len(strings))

    kcols = ("start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER, contextId INTEGER, streamId INTEGER, "
             "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
             "mangledName INTEGER, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, "
             "blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER")
    con.execute(f"CREATE TABLE {kernel_table} ({kcols})")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
                "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
                "domainId INTEGER)")
    launch = sid("cudaLaunchKernel_v7000")
    if kernels:
        for cid, (t, tid, short, _, _) in KERNELS.items():
            gstart = t + 400 if cid != 4 else 5_200  # cid 4 executes after its range has closed
            con.execute(f"INSERT INTO {kernel_table} VALUES (?,?,0,1,7,?,?,?,?,NULL,32,64,1,1,128,1,1,0,4096)",
                        (gstart, gstart + 300, cid, PID, sid(f"void {short}<float>(float *, int)"), sid(short)))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,1,?,?,?,0)", (t, t + 20, tid, cid, launch))
    if second_process:
        for cid, t in ((2, 1_600), (3, 2_600)):
            con.execute(f"INSERT INTO {kernel_table} VALUES (?,?,0,2,9,?,?,?,?,NULL,32,1,1,1,32,1,1,0,0)",
                        (t + 500, t + 600, cid, OTHER_PID, sid("other_process_kernel"), sid("other_process_kernel")))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,1,?,?,?,0)", (t, t + 20, OTHER_TID, cid, launch))
    if extra_kernel_table:
        con.execute(f"CREATE TABLE {extra_kernel_table} ({kcols})")
        con.execute(f"INSERT INTO {extra_kernel_table} VALUES (1,2,0,1,7,999,0,?,?,NULL,32,1,1,1,1,1,1,0,0)",
                    (sid("decoy_kernel"), sid("decoy_kernel")))
    # the program names its domain first (eventType 75), then pushes and pops ranges (eventType 59);
    # one range's text is a StringIds id (textId), as nsys writes repeated strings
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (50, NULL, 75, ?, ?, 7)",
                (MYLIB, T1))
    ranges = sorted(RANGES, key=lambda r: r[0] != MUL) if same_start else RANGES
    for name, start, end, tid, dom in ranges:
        if same_start and name == MUL:
            start = 1_000  # = GEMM's start
        if name == MUL:
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
                        "VALUES (?,?,59,NULL,?,?,?)", (start, end, tid, sid(name), dom))
        else:
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?,?,59,?,?,?)",
                        (start, end, name, tid, dom))
    cols = ", ".join(f"{k} {'TEXT' if isinstance(v, str) else 'INTEGER'}" for k, v in GPU_ROW.items())
    con.execute(f"CREATE TABLE TARGET_INFO_GPU ({cols})")
    row = {**GPU_ROW, "name": gpu_name}
    con.execute(f"INSERT INTO TARGET_INFO_GPU VALUES ({','.join('?' * len(row))})", tuple(row.values()))
    con.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, "
                "value TEXT)")
    for name, value in (("NvDriverVersion", "580.159.04"), ("CudaDriverVersion", "13000"), ("Hostname", "their-box"),
                        ("OsDescription", "Ubuntu 24.04.3 LTS"), ("DeviceEnvironment", "SECRET_TOKEN=do-not-copy")):
        con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Local (CLI)', ?, 0, ?)", (name, value))
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                    [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2025.3.2.0"),
                     ("EXPORT_SCHEMA_VERSION", "3.20.3")])
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1795324902781331349, '2026-11-22T05:21:42', "
                "'2026-11-22T05:21:42')")
    if string_ids:
        con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path
