"""Report section for end-to-end training throughput and scaling efficiency (rows of
bench/training/*_train_bench.py)."""
from report_common import pyplot, save

ORDER = {"torch": ("perseus", "horovod", "ddp"),
         "mxnet": ("perseus-trainer", "perseus-kvstore", "horovod", "mxnet-ps")}
DESCRIBE = {
    ("torch", "perseus"): "perseus.torch.DistributedOptimizer",
    ("torch", "horovod"): "horovod.torch.DistributedOptimizer (horovodrun --gloo)",
    ("torch", "ddp"): "torch DistributedDataParallel, Gloo",
    ("mxnet", "perseus-trainer"): "perseus.mxnet.DistributedTrainer",
    ("mxnet", "perseus-kvstore"):
        "gluon.Trainer(kvstore=perseus.mxnet.create('dist_sync_perseus'))",
    ("mxnet", "horovod"): "horovod.mxnet.DistributedTrainer (horovodrun --gloo)",
    ("mxnet", "mxnet-ps"): "gluon.Trainer(kvstore='dist_sync'), 1 server + scheduler",
}


def is_perseus(lib):
    return lib.startswith("perseus")


def training_section(rows, ranks):
    """Returns (markdown, list of verdict dicts, one per framework)."""
    train = [r for r in rows if r["collective"] == "train"]
    out = ["## End-to-end training throughput", "",
           "Same model, synthetic data and step count for every library: a small CNN front and "
           "a deep MLP body (bench/training/model_spec.py), SGD with momentum, batch 32 per "
           "rank, one compute thread per rank (so 1 rank uses one core and 2 ranks the two). "
           "Throughput is samples/s over all ranks from the median of timed windows, and each "
           "library's figure is the median of interleaved runs (run_all.py TRAIN_ROUNDS; every "
           "row keeps the runs' step times in `rounds_step_ms`): single runs differ by 10-15% "
           "from one minute to the next on a shared 2-core machine. Scaling "
           "efficiency = throughput at N ranks / (N × throughput at 1 rank of the same "
           "library). *overhead* = step time at N ranks − step time at 1 rank: the per-step cost "
           "of distribution (communication not hidden behind backward, plus contention). "
           "*wrapper cost* = step time at 1 rank − the compute-only step (plain optimizer, no "
           "library, one process: the *none* row): what the library costs when there is nobody "
           "to talk to.", ""]
    if train:
        r0 = train[0]
        out += [f"Model `{r0['model']}`: {r0['params']:,} parameters in {r0['tensors']} "
                "tensors.", ""]
    verdicts = []
    plot_data = {}
    for fw, libs in ORDER.items():
        by = {(r["library"], r["ranks"]): r for r in train if r["framework"] == fw}
        if not by:
            continue
        out += [f"### {'PyTorch' if fw == 'torch' else 'MXNet'}", "",
                f"| library | 1 rank samples/s (step ms) | {ranks} ranks samples/s (step ms) "
                f"| scaling efficiency | overhead ms/step | wrapper cost ms/step |",
                "|---|---|---|---|---|---|"]
        none = by.get(("none", 1))
        if none:
            out.append(f"| compute only (none) | {none['samples_per_s']:.0f} "
                       f"({none['step_ms']:.1f}) | — | — | — | — |")
        best_peer, best_perseus = None, None
        for lib in libs:
            one, many = by.get((lib, 1)), by.get((lib, ranks))
            if not one and not many:
                continue
            eff = (f"{many['samples_per_s'] / (ranks * one['samples_per_s']):.1%}"
                   if one and many else "—")
            over = f"{many['step_ms'] - one['step_ms']:.1f}" if one and many else "—"
            cell = (lambda r: f"{r['samples_per_s']:.0f} ({r['step_ms']:.1f})" if r else "—")
            wrap = f"{one['step_ms'] - none['step_ms']:.1f}" if one and none else "—"
            out.append(f"| {DESCRIBE.get((fw, lib), lib)} | {cell(one)} | **{cell(many)}** | "
                       f"{eff} | {over} | {wrap} |")
            plot_data.setdefault(fw, []).append((lib, one, many))
            if many:
                slot = "perseus" if is_perseus(lib) else "peer"
                best = best_perseus if slot == "perseus" else best_peer
                if best is None or many["samples_per_s"] > best["samples_per_s"]:
                    if slot == "perseus":
                        best_perseus = many
                    else:
                        best_peer = many
        out.append("")
        if best_perseus and best_peer:
            ratio = best_perseus["samples_per_s"] / best_peer["samples_per_s"]
            verdicts.append({"ok": ratio >= 1.0, "text": (
                f"{fw} at {ranks} ranks: best Perseus ({best_perseus['library']}) / best peer "
                f"({best_peer['library']}) = {ratio:.2f}×")})
            out += [f"Best Perseus path over the best peer at {ranks} ranks: **{ratio:.2f}×**.",
                    ""]
    link = plot(plot_data, ranks)
    if link:
        out += [f"![training throughput]({link})", ""]
    return "\n".join(out), verdicts


def plot(plot_data, ranks):
    plt = pyplot()
    if plt is None or not plot_data:
        return None
    fig, axes = plt.subplots(1, len(plot_data), figsize=(5 * len(plot_data), 4), squeeze=False)
    for ax, (fw, entries) in zip(axes[0], plot_data.items()):
        names = [lib for lib, _, _ in entries]
        xs = range(len(names))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], [one["samples_per_s"] if one else 0
                                         for _, one, _ in entries], w, label="1 rank")
        ax.bar([x + w / 2 for x in xs], [many["samples_per_s"] if many else 0
                                         for _, _, many in entries], w, label=f"{ranks} ranks")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=20, ha="right")
        ax.set_ylabel("samples/s (all ranks)")
        ax.set_title("PyTorch" if fw == "torch" else "MXNet")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
    return save(fig, plt, "training_throughput.png")
