"""The core library's own figures (the libperseus issue), from the rows of one run: each target,
what this run measured, and, where it is not met, the measured limit (docs/algorithms.md has
the measurements of the limits)."""

from report_common import fastest_round

MIB = 1 << 20


def _rows(rows, library, collective):
    return {r["bytes"]: r for r in rows
            if r.get("library") == library and r.get("collective") == collective}


def core_section(rows):
    perseus = _rows(rows, "perseus", "allreduce")
    inplace = _rows(rows, "perseus-inplace", "allreduce")
    mpi = _rows(rows, "openmpi", "allreduce")
    out = ["## The core's targets (2 ranks, float32, this run)", "",
           "| target | measured | met? |", "|---|---|---|"]
    big = [(b, perseus[b]["busbw_gbs"]) for b in sorted(perseus) if 16 * MIB <= b <= 256 * MIB]
    if big:
        ok = all(bw >= 7.0 for _, bw in big)
        out.append("| allreduce 16–256 MiB ≥ 7 GB/s busbw, out of place | " + ", ".join(
            f"{b // MIB} MiB {bw:.2f} GB/s" for b, bw in big) + f" | {'✅' if ok else '❌'} |")
    big_in = [(b, inplace[b]["busbw_gbs"]) for b in sorted(inplace) if 16 * MIB <= b <= 256 * MIB]
    if big_in:
        ok = all(bw >= 7.0 for _, bw in big_in)
        out.append("| the same in place (as DistributedOptimizer runs it; nccl-tests reports "
                   "both) | " + ", ".join(f"{b // MIB} MiB {bw:.2f} GB/s" for b, bw in big_in)
                   + f" | {'✅' if ok else '❌'} |")
    mid = [(b, mpi[b]["time_us"] / perseus[b]["time_us"], fastest_round(mpi[b]) / fastest_round(perseus[b]))
           for b in sorted(perseus) if MIB <= b <= 4 * MIB and b in mpi]
    if mid:
        ok = all(x >= 2.0 and f >= 2.0 for _, x, f in mid)
        out.append("| allreduce 1–4 MiB ≥ 2× Open MPI (median of rounds; each at its fastest "
                   "round) | " + ", ".join(f"{b // MIB} MiB {x:.2f}× ({f:.2f}×)" for b, x, f in mid)
                   + f" | {'✅' if ok else '❌'} |")
    lat = next((r for r in rows if r.get("collective") == "allreduce-latency-wait"), None)
    if lat:
        out.append(f"| 4-byte allreduce through the engine < 20 µs | {lat['time_us']:.2f} µs "
                   f"(C API, perseus_wait) | {'✅' if lat['time_us'] < 20 else '❌'} |")
    step = next((r for r in rows if r.get("collective") == "resnet50-step"), None)
    if step:
        out.append(f"| ResNet-50 step (161 tensors) ≤ 1.15× one allreduce of the same bytes | "
                   f"{step['time_us'] / 1e3:.1f} ms vs {step['single_allreduce_us'] / 1e3:.1f} ms"
                   f" = {step['ratio']:.2f}× | {'✅' if step['ratio'] <= 1.15 else '❌'} |")
    memcpy = _rows(rows, "floor", "memcpy")
    cross = _rows(rows, "floor", "crosscore")
    cross_nt = _rows(rows, "floor", "crosscore-nt")
    if memcpy and cross:
        out += ["", "The floors in this run (bench/floor_probe_bench.cc, 2 threads on CPU 0 "
                "and 1): *memcpy* = each core copies S bytes at once (the read of every input "
                "and write of every output); *cross-core* = the rate at which a block written "
                "by one core is read by the other (per direction), written with cached stores "
                "(the reader pulls the lines from the other core) and with streaming stores "
                "(*-nt*: the reader fetches them from memory). Which of the two is faster "
                "depends on where the host places the two cores at the moment; the shared-memory "
                "collectives choose per call (docs/algorithms.md, *Slot stores*).", "",
                "| S | memcpy floor GB/s | cross-core GB/s | cross-core-nt GB/s | perseus "
                "allreduce busbw GB/s (in place) |",
                "|---|---|---|---|---|"]
        def gbs(table, b):
            return f"{table[b]['gbs']:.2f}" if b in table else "—"
        for b in sorted(set(memcpy) & set(cross)):
            mine = perseus.get(b)
            mine = (f"{mine['busbw_gbs']:.2f}" if mine else "—") + (
                f" ({inplace[b]['busbw_gbs']:.2f})" if b in inplace else "")
            out.append(f"| {b // 1024} KiB | {gbs(memcpy, b)} | {gbs(cross, b)} | "
                       f"{gbs(cross_nt, b)} | {mine} |")
    out += ["", "What limits the figures, from the floors of this run: a "
            "2-rank allreduce of S bytes must read every input and write every output once "
            "(the memcpy floor), and each rank must also receive S bytes from the other core "
            "(half of the peer's input, half of the result)."]
    for b in sorted(perseus):
        if not (MIB <= b <= 256 * MIB):
            continue
        bits = []
        if b in memcpy:
            bits.append(f"memcpy floor {memcpy[b]['gbs']:.2f} GB/s, Perseus at "
                        f"{100 * perseus[b]['busbw_gbs'] / memcpy[b]['gbs']:.0f}% of it")
        if b in mpi and b <= 4 * MIB:
            rates = ", ".join(f"{max(cross[k]['gbs'], cross_nt.get(k, cross[k])['gbs']):.1f} "
                              f"GB/s for {k // 1024} KiB blocks"
                              for k in (256 * 1024, MIB) if k in cross)
            bits.append(f"Perseus receives the {b // MIB} MiB across cores at "
                        f"{perseus[b]['busbw_gbs']:.1f} GB/s; the cross-core rate of cache-resident "
                        f"blocks in this run (the better of cached and streaming stores) is "
                        f"{rates or 'not measured'} (the pipeline moves "
                        f"256 KiB segments); 2× Open MPI would need "
                        f"{2 * mpi[b]['busbw_gbs']:.1f} GB/s across cores")
        if bits:
            out.append(f"- {b // MIB} MiB: " + "; ".join(bits) + ".")
    if not (memcpy and cross):
        out.append("- (this run has no floor rows: run bench/run_all.py without --skip perseus)")
    return "\n".join(out)
