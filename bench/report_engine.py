"""Report sections for the engine figures: small-tensor latency through the asynchronous path
and negotiation cost per step vs tensor count (rows of bench/peers/hvd_async_bench.py and
perseus_collectives_bench latency)."""
from report_common import pyplot, save, us

LATENCY_BAR = 20.0  # Horovod's latency over Perseus's, at least
FLAT_GROWTH = 3.0  # engine time per step from 10 to 1000 tensors, at most, to count as flat
FLAT_ADD_US = 1.0  # ... or at most this much more (µs): below the resolution of two processes' stamps


def latency_section(rows):
    """Returns (markdown, verdict dict)."""
    c_api = next((r for r in rows if r["collective"] == "allreduce-latency"), None)
    c_wait = next((r for r in rows if r["collective"] == "allreduce-latency-wait"), None)
    py = {r["library"]: r for r in rows if r["collective"] == "async-latency"}
    out = ["## Small-tensor latency through the asynchronous path", "",
           "A 4-byte allreduce, one at a time: submit, then wait for completion. Python: "
           "`hvd.synchronize(hvd.allreduce_async_(x, name='lat'))` in a loop, the same code for "
           "both libraries (bench/peers/hvd_async_bench.py); per-op median of 50-op batches, max "
           "over ranks. C API, two ways of waiting: `perseus_allreduce` + `perseus_wait` "
           "(bench/engine_latency_bench.cc; the framework layers wait this way: spin "
           "PERSEUS_SPIN_US, then block) and `perseus_allreduce` + a busy `perseus_poll` loop + "
           "wait (bench/perseus_collectives_bench.cc `latency`).", "",
           "| path | median | p90/p99 |", "|---|---|---|"]
    if c_wait:
        out.append(f"| Perseus, C API, perseus_wait | **{us(c_wait['time_us'])}** | "
                   f"p90 {us(c_wait['p90_us'])} |")
    if c_api:
        out.append(f"| Perseus, C API, busy perseus_poll loop | **{us(c_api['time_us'])}** | "
                   f"p99 {us(c_api['p99_us'])} |")
    for lib in ("perseus", "horovod"):
        r = py.get(lib)
        if r:
            out.append(f"| {lib}, Python allreduce_async_ + synchronize | **{us(r['time_us'])}** "
                       f"| p90 {us(r['p90_us'])} |")
    if c_api and c_wait and c_api["time_us"] > 5 * c_wait["time_us"]:
        out += ["", f"The busy-poll loop is {c_api['time_us'] / c_wait['time_us']:.0f}× slower "
                "than perseus_wait: with 2 ranks on 2 cores, each caller spinning in "
                "perseus_poll holds a core its own engine thread needs, so every op waits for "
                "the scheduler to preempt the spinner. Waiting callers should block "
                "(perseus_wait), as the framework layers do."]
    verdict = None
    if "perseus" in py and "horovod" in py:
        ratio = py["horovod"]["time_us"] / py["perseus"]["time_us"]
        verdict = {"ok": ratio >= LATENCY_BAR, "text": f"Horovod / Perseus = {ratio:.1f}× "
                   f"(Python path; bar ≥ {LATENCY_BAR:g}×)"}
        out += ["", f"Horovod's latency is **{ratio:.1f}×** Perseus's through the same Python "
                "calls."]
    return "\n".join(out), verdict


def negotiation_section(rows):
    data = {}
    for r in rows:
        if r["collective"] == "negotiation":
            data.setdefault(r["library"], {})[r["tensors"]] = r
    out = ["## Negotiation cost per step vs tensor count", "",
           "A step submits T named 16-byte allreduces (`allreduce_async_`, as "
           "DistributedOptimizer's gradient hooks do) and then synchronizes them all; the payload "
           "is negligible. The step splits into: *submit*, the Python loop that enqueues "
           "(framework-side, linear in T for any library); *engine*, from the last enqueue of the "
           "last rank to finish submitting until the last rank has seen the last tensor "
           "complete (`synchronize` of the last handle; the ranks share one host and so one "
           "monotonic clock): what negotiating the T tensors across ranks, fusion and the "
           "collective add once every rank's framework has handed everything over (a tensor "
           "cannot be negotiated before its last rank submits it); *completion*, the Python `synchronize` calls for the other "
           "handles (framework-side, linear in T). Both libraries negotiate while the loop still "
           "submits, so *engine* is the negotiation cost the step actually waits for. "
           "*engine (core)*, Perseus only: the same span taken from the engines' own stamps of "
           "the last tensor (`Handle.times()`: the last rank's submission to the last rank's "
           "completion), in steps of their own, so the Python calls around `synchronize`, which "
           "run with caches cooled by a loop over T tensors, stay out of it; Horovod has no such "
           "stamps, and its *engine* includes those calls (a few µs, against its milliseconds).",
           ""]
    if not data:
        return "\n".join(out + ["(no rows)"]), None
    libs = [l for l in ("perseus", "horovod") if l in data]
    has_core = any("engine_core_us" in r for r in data.get("perseus", {}).values())
    counts = sorted({t for d in data.values() for t in d})
    out += ["| tensors | " + " | ".join(f"{l} step / submit / engine / completion"
                                          for l in libs) +
            (" | perseus engine (core)" if has_core else "") +
            " | engine per tensor |", "|" + "---|" * (len(libs) + 2 + (1 if has_core else 0))]
    for t in counts:
        cells = []
        per_tensor = []
        for l in libs:
            r = data[l].get(t)
            cells.append(f"{us(r['time_us'])} / {us(r['submit_us'])} / {us(r['engine_us'])}"
                         f" / {us(r.get('completion_us', 0.0))}" if r else "—")
            if r:
                per_tensor.append(f"{l} {us(r['engine_us'] / t)}")
        if has_core:
            r = data["perseus"].get(t)
            cells.append(us(r["engine_core_us"]) if r and "engine_core_us" in r else "—")
        out.append(f"| {t} | " + " | ".join(cells) + " | " + ", ".join(per_tensor) + " |")
    growth = {}
    for l in libs:
        d = data[l]
        lo, hi = (10 if 10 in d else min(d)), max(d)  # the brief's range: 10 to 1000
        if hi > lo:
            growth[l] = (d[hi]["engine_us"] / max(d[lo]["engine_us"], 1e-3), lo, hi,
                         d[hi]["engine_us"] - d[lo]["engine_us"])
    out += [""] + [f"- {l}: engine time grows {g:.1f}× (+{us(add)}) from {lo} to {hi} tensors "
                   f"({hi // lo}× the tensors)." for l, (g, lo, hi, add) in growth.items()]
    core = None
    if has_core and "perseus" in growth:
        lo, hi = growth["perseus"][1], growth["perseus"][2]
        a, b = data["perseus"][lo].get("engine_core_us"), data["perseus"][hi].get("engine_core_us")
        if a is not None and b is not None:
            core = (b / max(a, 1e-3), lo, hi, b - a)
            out.append(f"- perseus, engine (core): grows {core[0]:.1f}× (+{us(core[3])}) from "
                       f"{lo} to {hi} tensors.")
    counted = [(t, data["perseus"][t]["engine_stats_per_step"]) for t in counts
               if "perseus" in data and t in data["perseus"]
               and "engine_stats_per_step" in data["perseus"][t]]
    if counted:
        out += ["", "Perseus's engine counters per step (`perseus.torch.engine_stats()`, "
                "differences around each step): the negotiation messages it sent. Cached tensors "
                "are negotiated by one AND of a bit vector per cycle; *coordinator rounds* "
                "count negotiations that went to the coordinator (new names, stall checks); "
                "*posted* allreduces skipped negotiation (Note [Posted collectives]).", "",
                "| tensors | cycles | control ANDs | control bytes | coordinator rounds | "
                "cached / coordinated responses | posted | time in negotiation (incl. waiting "
                "for the other rank) |", "|---|---|---|---|---|---|---|---|"]
        for t, st in counted:
            out.append(f"| {t} | {st['cycles']:.1f} | {st['control_exchanges']:.1f} | "
                       f"{st['control_bytes']:.0f} B | {st['coordinator_rounds']:.2f} | "
                       f"{st['cached_responses']:.0f} / {st['coordinated_responses']:.0f} | "
                       f"{st.get('posted_allreduces', 0):.0f} | "
                       f"{us(st['negotiation_ns'] / 1e3)} |")
    link = plot(data, libs)
    if link:
        out += ["", f"![negotiation cost vs tensor count]({link})"]
    verdict = None
    if "perseus" in growth and "horovod" in growth:
        h = growth["horovod"]
        # Perseus's own span where the engines stamped it, else the framework-visible one.
        p, basis = (core, "engine (core stamps)") if core else (growth["perseus"], "engine")
        # "Flat": over 100x the tensors, at most FLAT_GROWTH x, or less than FLAT_ADD_US more
        # (sub-microsecond spans between two processes' stamps are at the clock's and the
        # cache line's resolution), and less growth than Horovod's.
        flat = p[0] <= FLAT_GROWTH or p[3] <= FLAT_ADD_US
        verdict = {"ok": flat and p[0] < h[0],
                   "text": f"{basis} time growth {p[1]}→{p[2]} tensors: Perseus {p[0]:.1f}× "
                   f"(+{us(p[3])}), Horovod {h[0]:.1f}× (+{us(h[3])}) (flat: ≤ {FLAT_GROWTH:g}× "
                   f"or ≤ +{FLAT_ADD_US:g} µs); framework-visible, Perseus "
                   f"{growth['perseus'][0]:.1f}× (+{us(growth['perseus'][3])})"}
    return "\n".join(out), verdict


def plot(data, libs):
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, l in enumerate(libs):
        pts = sorted(data[l].items())
        ax.plot([t for t, _ in pts], [r["time_us"] for _, r in pts], marker="o",
                color=f"C{i}", label=f"{l} step")
        ax.plot([t for t, _ in pts], [max(r["engine_us"], 1e-2) for _, r in pts], marker="x",
                color=f"C{i}", linestyle="--", label=f"{l} engine (last enqueue → last done)")
        core = [(t, r["engine_core_us"]) for t, r in pts if "engine_core_us" in r]
        if core:
            ax.plot([t for t, _ in core], [max(v, 1e-2) for _, v in core], marker="+",
                    color=f"C{i}", linestyle=":", label=f"{l} engine (core stamps)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tensors per step (16 B each)")
    ax.set_ylabel("time per step (µs)")
    ax.set_title("negotiation cost per step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save(fig, plt, "negotiation_cost.png")
