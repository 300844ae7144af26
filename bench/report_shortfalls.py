"""The "Where Perseus is not ahead" section: every figure of the run where a peer beats Perseus,
with the measured decomposition that says where the time goes and what would fix it. The
decompositions come from rows of the same run (engine latency, Python vs C API path, 1-rank vs
N-rank step), so the reason is measured, not assumed; the fixes name the mechanism."""
from report_common import human, us

OTHERS = ("openmpi", "torch-gloo", "horovod", "horovod-mpi")
# 2-thread memcpy floor of the 2-core reference host (bench/floor_probe_bench, memcpy), GB/s busbw.
FLOOR_GBS = {16 << 20: 8.8, 64 << 20: 7.6, 256 << 20: 9.6}
SMALL_BELOW = 64 << 10  # below: latency-bound (the fixed per-op cost exceeds the copy)


def collective_shortfalls(rows):
    """One line per collective and regime: the sizes a peer wins, and why."""
    latency = next((r["time_us"] for r in rows if r["collective"] == "allreduce-latency-wait"),
                   None)
    if latency is None:
        latency = next((r["time_us"] for r in rows if r["collective"] == "allreduce-latency"),
                       None)
    py = {r["bytes"]: r for r in rows
          if r["library"] == "perseus-py" and r["collective"] == "allreduce"}
    out = []
    for coll in ("allreduce", "allgather", "broadcast", "reducescatter"):
        table = {}
        for r in rows:
            if r["collective"] == coll and "busbw_gbs" in r:
                table.setdefault(r["bytes"], {})[r["library"]] = r
        small, large = [], []
        for size in sorted(table):
            d = table[size]
            peers = [(d[l]["time_us"], l) for l in OTHERS if l in d]
            if "perseus" not in d or not peers:
                continue
            best, who = min(peers)
            mine = d["perseus"]["time_us"]
            if mine < best:
                continue
            cell = f"{human(size)} ({who} {us(best)} vs {us(mine)}"
            if coll == "allreduce" and size in py:
                cell += f"; perseus-py {us(py[size]['time_us'])}"
            if size < SMALL_BELOW:
                small.append(cell + ")")
            else:
                floor = FLOOR_GBS.get(size)
                large.append(cell + f"; busbw {d['perseus']['busbw_gbs']:.2f} vs "
                             f"{d[who]['busbw_gbs']:.2f} GB/s"
                             + (f", floor ≈ {floor}" if floor else "") + ")")
        if small:
            lat = (f"Perseus's 4-byte op through the engine takes {us(latency)} in this run "
                   "(C API, perseus_wait); " if latency is not None else "")
            split = next((r for r in rows if r.get("collective") == "latency-split"), None)
            mpi4 = table.get(4, {}).get("openmpi")
            if split and coll == "allreduce" and mpi4:
                lat += (f"with the engine's timeline on, which turns posting off (the "
                        f"negotiated path, {us(split['time_us'])} per op), the collective "
                        f"itself takes {us(split.get('communicate_us', 0))} (Open MPI's whole "
                        f"4-byte op: {us(mpi4['time_us'])}) and submission to negotiated "
                        f"{us(split.get('negotiate_us', 0))}; ")
            why = ("at these sizes the time is the fixed per-op cost. A small "
                   f"{coll} of a name negotiated before is posted (Note [Posted "
                   "collectives]): no control exchange and no cycle; each rank writes its "
                   "contribution to shared memory, counts it in the name's slot and "
                   "finishes the op from the others' posts itself, with no entry and no "
                   "allocation but the handle (docs/algorithms.md, *The post lane*). Such an "
                   "op's time is the software path of the rank that posts second, which "
                   "finishes it inline: the compare-and-swap on the slot's state word and the "
                   "read of the other's post (two cross-core misses, the protocol's floor in "
                   "bench/post_board_floor_bench)")
            if coll in ("allreduce", "broadcast"):
                why += (", plus, as a blocking call (docs/algorithms.md, *Blocking calls*), "
                        "the runtime's engine pointer and the slot's lookup, each under a "
                        "mutex; the rank that posts first watches the slot's state word with "
                        "no handle; from 1 KiB also the copy into shared memory, whose lines "
                        "the peer reads (a read-for-ownership each), which Open MPI pays "
                        "too. ")
                if coll == "broadcast":
                    why += ("Open MPI's broadcast returns at the root as soon as it has "
                            "written; a posted broadcast completes when every rank posted "
                            "(what lets a pool be reused safely). ")
                why += ("Fix, not built: the engine pointer and the slot's lookup without "
                        "a lock.")
            else:
                why += (", plus the asynchronous handle: its allocation and two clock reads, "
                        "the C API's handle table (insert, find, release) and about six "
                        "uncontended mutex pairs; from 1 KiB also the copy into shared memory, "
                        "whose lines the peer reads (a read-for-ownership each), which Open "
                        "MPI pays too. Fix, not built: blocking forms of these calls, as "
                        "allreduce and broadcast have (docs/algorithms.md, *Blocking calls*), "
                        "which need the library-owned output handed over without a handle.")
            out.append(
                f"- **{coll}, small sizes (< {human(SMALL_BELOW)})**: {', '.join(small)}. {lat}"
                + why)
        if large:
            out.append(
                f"- **{coll}, bandwidth-bound sizes**: {', '.join(large)}. "
                + BANDWIDTH_WHY[coll])
    return out


BANDWIDTH_WHY = {
    "allreduce": ("The shared-memory pipeline already reads each input and writes each output "
                  "once and moves half of each across cores once each way, both cores reducing "
                  "(docs/algorithms.md, *Shared memory*); here both libraries run at about the "
                  "cross-core rate of the floors table (*The core's targets*). Tried without "
                  "gain: single-copy reads of the peer's input (CMA), other segment sizes, "
                  "streaming stores in place (docs/algorithms.md, *Tried for large allreduces*)."),
    "allgather": ("Mid-sized broadcasts and allgathers read straight from the "
                  "peer's buffer (one copy, cross-memory attach, as Open MPI's vader does); "
                  "large ones pipeline through the shared-memory slots, where that measured "
                  "faster (docs/algorithms.md, *Single-copy broadcasts and allgathers*). Up to "
                  "64 KiB per rank a name negotiated before is posted, with no control "
                  "exchange and no cycle (Note [Posted collectives]); above, every such op is "
                  "negotiated first, where Open MPI's starts at once; that share is not "
                  "separated in this run."),
}
BANDWIDTH_WHY["broadcast"] = BANDWIDTH_WHY["allgather"]
BANDWIDTH_WHY["reducescatter"] = BANDWIDTH_WHY["allreduce"]


def latency_shortfall(rows, verdict):
    if not verdict or verdict["ok"]:
        return []
    c_api = next((r for r in rows if r["collective"] == "allreduce-latency-wait"), None) or \
        next((r for r in rows if r["collective"] == "allreduce-latency"), None)
    py = next((r for r in rows if r["collective"] == "async-latency"
               and r["library"] == "perseus"), None)
    line = f"- **small-tensor latency**: {verdict['text']}."
    if c_api and py:
        line += (f" Perseus's C API op takes {us(c_api['time_us'])}, its Python op "
                 f"{us(py['time_us'])}: {us(py['time_us'] - c_api['time_us'])} per op is the "
                 "Python layer (tensor wrapping, handle objects, the wait). Fix: a leaner "
                 "allreduce_async_/synchronize path (no per-call allocation, GIL released "
                 "while waiting)" if py["time_us"] > 2 * c_api["time_us"] else
                 f" Perseus's C API op takes {us(c_api['time_us'])}, close to the Python "
                 "figure, so the engine's own cycle is the cost. Fix: a shorter engine cycle "
                 "for cached single tensors.")
    return [line]


def training_shortfalls(rows, ranks):
    out = []
    train = [r for r in rows if r["collective"] == "train"]
    for fw in ("torch", "mxnet"):
        by = {(r["library"], r["ranks"]): r for r in train if r["framework"] == fw}
        many = [r for (lib, n), r in by.items() if n == ranks]
        mine = [r for r in many if r["library"].startswith("perseus")]
        peers = [r for r in many if not r["library"].startswith("perseus")]
        if not mine or not peers:
            continue
        best_mine = max(mine, key=lambda r: r["samples_per_s"])
        best_peer = max(peers, key=lambda r: r["samples_per_s"])
        if best_mine["samples_per_s"] >= best_peer["samples_per_s"]:
            continue
        m1, p1 = by.get((best_mine["library"], 1)), by.get((best_peer["library"], 1))
        line = (f"- **{fw} training at {ranks} ranks**: {best_peer['library']} "
                f"{best_peer['samples_per_s']:.0f} samples/s vs {best_mine['library']} "
                f"{best_mine['samples_per_s']:.0f}.")
        if best_mine["samples_per_s"] >= 0.95 * best_peer["samples_per_s"]:
            line += (" Within 5%: less than the run-to-run spread of the same figure on this "
                     "machine (each row's `rounds_step_ms` in bench/results/latest.jsonl), so "
                     "the split below is noise as much as cause.")
        none = by.get(("none", 1))
        if m1 and p1:
            mo = best_mine["step_ms"] - m1["step_ms"]
            po = best_peer["step_ms"] - p1["step_ms"]
            line += (f" Step at 1 rank: {m1['step_ms']:.1f} ms vs {p1['step_ms']:.1f} ms"
                     + (f" (compute only: {none['step_ms']:.1f} ms, so the Perseus wrapper costs "
                        f"{m1['step_ms'] - none['step_ms']:.1f} ms per step, "
                        f"{(m1['step_ms'] - none['step_ms']) * 1e3 / m1['tensors']:.0f} µs per "
                        "gradient tensor, with nobody to talk to)" if none else "")
                     + f"; distribution overhead (step at {ranks} − step at 1): {mo:.1f} ms vs "
                     f"{po:.1f} ms. ")
            if m1["step_ms"] - p1["step_ms"] > mo - po:
                line += ("Most of the gap is there at 1 rank already: a fixed cost per gradient "
                         "tensor in the Perseus path (submission, the engine's hand-off and "
                         "completion back into the framework), paid even without peers. Fix: "
                         "cut the per-op engine round trip (see the latency section: the same "
                         "cost per op) and skip the collective at size 1.")
            else:
                line += ("The gap is in the distribution overhead: gradient communication not "
                         "hidden behind backward. Fix: start allreduces as gradients become "
                         "ready, fuse them into fewer, larger messages, and keep the engine "
                         "thread from competing with compute for the two cores (yield when "
                         "idle instead of spinning).")
        out.append(line)
    return out


def negotiation_shortfall(rows, verdict):
    if not verdict or verdict["ok"]:
        return []
    neg = {r["tensors"]: r for r in rows
           if r.get("collective") == "negotiation" and r.get("library") == "perseus"}
    lo, hi = neg.get(10), neg.get(1000)
    detail = ""
    if lo and hi and "engine_stats_per_step" in lo and "engine_stats_per_step" in hi:
        a, b = lo["engine_stats_per_step"], hi["engine_stats_per_step"]
        detail = (f" What Perseus sends to negotiate stays small and skips the coordinator: from 10 to 1000 "
                  f"tensors per step, {a['control_exchanges']:.1f} → {b['control_exchanges']:.1f} "
                  f"control ANDs of {a['control_bytes'] / max(a['control_exchanges'], 1):.0f} → "
                  f"{b['control_bytes'] / max(b['control_exchanges'], 1):.0f} bytes, "
                  f"{b['coordinator_rounds']:.2f} coordinator rounds (counters above).")
    own = ""
    if hi and "engine_own_us" in hi:
        own = (f" Measured from each rank's own last enqueue instead (which adds the ranks' "
               f"skew in finishing their Python loops), 1000 tensors take "
               f"{us(hi['engine_own_us'])} against {us(hi['engine_us'])}.")
    core = ""
    if lo and hi and "engine_core_us" in lo and "engine_core_us" in hi:
        core = (f" The engines' own stamps of the last tensor (engine (core)) take "
                f"{us(lo['engine_core_us'])} at 10 tensors and {us(hi['engine_core_us'])} at 1000.")
    return [f"- **negotiation**: {verdict['text']}.{detail}{own}{core} Once a name is known its "
            "tensors are posted (Note [Posted collectives]): no cycle, no control exchange and no "
            "coordinator per step (counters above: the few cycles are stall checks and the "
            "next step's barrier). What grows with T in the framework-visible span is the Python "
            "side of the step's last `synchronize`, run right after a loop that touched T "
            "tensors, handles and their objects (bench/negotiation_tail_probe.py: the handle "
            "lookup takes several µs after 1000 submissions against under 1 µs after 10, and two "
            "back-to-back `time.perf_counter()` calls 3-7× longer): caches cooled by the loop, "
            "for Horovod too. Fix, not built: a `synchronize` with fewer Python steps (handle "
            "state kept in the core object, no Python-level table)."]


def shortfalls_section(rows, ranks, lat_v, neg_v):
    lines = (collective_shortfalls(rows) + latency_shortfall(rows, lat_v)
             + training_shortfalls(rows, ranks) + negotiation_shortfall(rows, neg_v))
    out = ["## Where Perseus is not ahead", "",
           "Generated from this run's rows (bench/report_shortfalls.py): each figure a peer "
           "wins, with the measured split of the time and the fix.", ""]
    return "\n".join(out + (lines or ["Nowhere in this run."]))
