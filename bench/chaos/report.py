"""The chaos soak's results table (markdown, on stdout) from a soak's --out folder
(bench/chaos/soak.py): per fault type, the resume times and the problems; per run, divergent
replicas, lost commits and leftovers. It can be run while the soak is still going: it reports
the faults recorded so far and says so.

    python bench/chaos/report.py /tmp/chaos > bench/results/chaos_soak.md

Several runs add up: give each folder, or a tarball of run folders (parallel_soak.sh's
soak_raw.tgz), so that soaks made by separate calls, on the same tree, make one table."""

import json
import math
import sys
import tarfile
import tempfile
from pathlib import Path


def read_jsonl(path):
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().endswith("}")]


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def seconds(values, q):
    return "%.2f" % percentile(values, q) if values else "-"


def fault_rows(faults):
    kinds = sorted({f["kind"] for f in faults})
    rows = ["| fault | count | resumed | p50 resume (s) | p99 resume (s) | max resume (s) | "
            "p50 / max stall (s) | hangs | other problems |", "|---" * 9 + "|"]
    for kind in kinds + ["all"]:
        these = [f for f in faults if kind in ("all", f["kind"])]
        resumed = [f["resume_s"] for f in these if "resume_s" in f]
        hangs = sum(1 for f in these if f.get("problem", "").startswith("hang"))
        other = sorted({f["problem"] for f in these
                        if f.get("problem") and not f["problem"].startswith("hang")})
        stalls = [f["stall_s"] for f in these if "stall_s" in f]
        rows.append("| %s | %d | %d | %s | %s | %s | %s / %s | %d | %s |" % (
            kind, len(these), len(resumed), seconds(resumed, 50), seconds(resumed, 99),
            seconds(resumed, 100), seconds(stalls, 50), seconds(stalls, 100), hangs,
            "; ".join(other) or "-"))
    return rows


STAGES = [("discovery", "discovery listed the slot -> perseusrun started its worker (or gave "
           "the slot to a spare)"),
          ("interpreter", "-> the worker script's first line (a spare: before the listing)"),
          ("imports", "-> its imports done (torch, perseus; a spare: only those it had left)"),
          ("until_published", "-> perseusrun published it (init() warmed up and said it was "
           "ready; one ready waits up to 0.5 s for newcomers started with it)"),
          ("rendezvous", "-> init() returned (the members reached a commit, reset and met it)"),
          ("build", "-> its model, optimizer and state built"),
          ("sync", "-> the training function entered (state synced)"),
          ("first_step", "-> its first step completed")]


def stage_rows(faults):
    """A new worker's per-stage clock (soak.py's stages()), over the grows that have one."""
    timed = [f["stages"] for f in faults if f.get("stages")]
    if not timed:
        return []
    rows = ["| stage | p50 (s) | p99 (s) | max (s) | over |", "|---|---|---|---|---|"]
    for name, what in STAGES:
        values = [t[name] for t in timed if t.get(name) is not None]
        rows.append("| %s: %s | %s | %s | %s | %d |" % (
            name, what, seconds(values, 50), seconds(values, 99), seconds(values, 100),
            len(values)))
    return rows


def overlaps(records):
    """Marks each new worker's record (grow, replace) with the kinds of the other faults and
    listings of its job that came between its listing and its first step (`_meanwhile`): a
    kill or stop there holds the new worker up as well."""
    for f in records:
        if "newcomer_s" not in f:
            continue
        start, end = f["time"], f["time"] + f["newcomer_s"]
        f["_meanwhile"] = sorted({g["kind"] for g in records if g is not f and g.get("time")
                                  and g["job"] == f["job"] and start < g["time"] < end})


NEWCOMER_GROUPS = [
    ("from a spare that had warmed up, nothing else injected meanwhile",
     lambda f: f["_from"] == "warm" and not f["_meanwhile"]),
    ("from a spare that had warmed up, another fault or listing meanwhile",
     lambda f: f["_from"] == "warm" and f["_meanwhile"]),
    ("from a spare still warming up (the spares before it had been used up)",
     lambda f: f["_from"] == "warming"),
    ("a new process: no spare was left (the spares before it had been used up)",
     lambda f: f["_from"] == "unspared"),
    ("all of the jobs with spares (the goal's)", lambda f: f["_from"] != "cold"),
    ("cold start: a new process (jobs run with --spare-workers 0)",
     lambda f: f["_from"] == "cold"),
]


def newcomer_from(f):
    """How a new worker started: "warm" / "warming" (a spare, and whether it had warmed up
    when it was given the slot), "spare" (a spare, in runs that did not say which),
    "unspared" (a new process in a job with spares: none was left), "cold" (a new process in
    a job without spares)."""
    stages = f.get("stages") or {}
    if stages.get("spare_state"):
        return stages["spare_state"]
    if stages.get("spare"):
        return "spare"
    return "unspared" if f.get("spares") else "cold"


def newcomer_rows(newcomers):
    rows = ["| new worker | count | p50 (s) | p99 (s) | max (s) | <= 5 s |",
            "|---|---|---|---|---|---|"]
    for f in newcomers:
        f["_from"] = newcomer_from(f)
    for what, member in NEWCOMER_GROUPS:
        values = [f["newcomer_s"] for f in newcomers if member(f)]
        rows.append("| %s | %d | %s | %s | %s | %s |" % (
            what, len(values), seconds(values, 50), seconds(values, 99), seconds(values, 100),
            "%.0f%%" % (100.0 * sum(v <= 5 for v in values) / len(values)) if values else "-"))
    return rows


def mix_line(faults, replaced):
    """The faults' mix against the issue's (about 60% kills, 10% stops, 30% grow/shrink)."""
    classes = [("kills", lambda k: k == "kill" or k.startswith("exit@")),
               ("stops", lambda k: k == "stop"), ("grows", lambda k: k == "grow"),
               ("shrinks", lambda k: k == "shrink")]
    parts = []
    for name, member in classes:
        n = sum(1 for f in faults if member(f["kind"]))
        parts.append("%s %d (%.0f%%)" % (name, n, 100.0 * n / max(1, len(faults))))
    changed = sum(1 for f in faults if f.get("drawn", f["kind"]) != f["kind"]
                  and not (f["drawn"] == "resize" and f["kind"] in ("grow", "shrink")))
    return ("- mix (the issue asks for about 60%% kills, aimed exits included, 10%% stops, 30%% "
            "grow/shrink): %s; %d injected as another kind than drawn (a removal that would "
            "leave fewer than --min-np members with no new worker coming became a grow, an "
            "exit@join at --max-np an exit@commit); besides, %d replacements (a slot listed "
            "for a lost member, timed as new workers, not counted as faults)"
            % (", ".join(parts), changed, replaced))


def stage_tables(new_workers):
    """The stage tables of the new workers of jobs with spares and of the cold starts."""
    lines = []
    for what, cold in (("in jobs with spares", False), ("cold starts", True)):
        rows = stage_rows([f for f in new_workers if (newcomer_from(f) == "cold") == cold])
        if rows:
            lines += ["Where that time goes, stage by stage, %s (from perseusrun's log, read as "
                      "it is written, and the new worker's records):" % what, ""] + rows + [""]
    return lines


def goal_rows(faults, new_workers, jobs, timeout):
    """The issue's goals against what the run measured."""
    kills = [f["resume_s"] for f in faults if "resume_s" in f
             and (f["kind"] == "kill" or f["kind"].startswith("exit@"))
             and f["kind"] not in ("exit@join", "exit@broadcast")]
    stops = [f["resume_s"] for f in faults if "resume_s" in f and f["kind"] == "stop"]
    spared = [f for f in new_workers if newcomer_from(f) != "cold"]
    newcomers = [f["newcomer_s"] for f in spared]
    clean = [f["newcomer_s"] for f in spared
             if newcomer_from(f) == "warm" and not f.get("_meanwhile")]
    cold = [f["newcomer_s"] for f in new_workers if newcomer_from(f) == "cold"]
    problems = sum(1 for f in faults if f.get("problem"))
    zero = sum(j["divergent_count"] + j["lost_commit_count"] + len(j["leftover_pids"]) +
               len(j["leftover_shm"]) for j in jobs) + problems

    def row(goal, value, met):
        return "| %s | %s | %s |" % (goal, value, "met" if met else "**not met**")
    return ["| goal | measured | |", "|---|---|---|",
            row("kills (SIGKILL and the exits at negotiation, commit, allreduce): p99 resume "
                "<= 2 s", "%s s over %d" % (seconds(kills, 99), len(kills)),
                kills and percentile(kills, 99) <= 2),
            row("stops: resume <= PERSEUS_TIMEOUT + 2 s = %.0f s" % (timeout + 2),
                "max %s s over %d" % (seconds(stops, 100), len(stops)),
                stops and max(stops) <= timeout + 2),
            row("a new worker's first step <= 5 s after discovery lists it (jobs with spares; "
                "cold starts below)", "p99 %s s over %d (from a warmed-up spare with nothing "
                "else injected meanwhile: p99 %s s over %d)" % (
                    seconds(newcomers, 99), len(newcomers), seconds(clean, 99), len(clean)),
                newcomers and percentile(newcomers, 99) <= 5),
            "| a cold start (a new process, not a spare: jobs run with --spare-workers 0), "
            "for reference | p50 %s s, p99 %s s, max %s s over %d | |" % (
                seconds(cold, 50), seconds(cold, 99), seconds(cold, 100), len(cold)),
            row("0 hangs, 0 divergent replicas, 0 lost commits, 0 leftovers, every fault "
                "recovered from", "%d" % zero, zero == 0)]


def run_line(out):
    """One soak run's command, seed and fault count, and its faults and jobs."""
    command = json.loads((out / "command.json").read_text())
    recorded = read_jsonl(out / "faults.jsonl")
    overlaps(recorded)
    faults = [f for f in recorded if f.get("problem") != "not fired"]
    injected = sum(1 for f in faults if f["kind"] != "replace")
    argv = command["argv"]
    wanted = argv[argv.index("--faults") + 1] if "--faults" in argv else "1000"
    line = "- `%s` (seed %d): **%d** faults of the %s asked for%s; %s CPUs (those it may run " \
        "on), load average %s at the start" % (
            " ".join(["python"] + argv), command["seed"], injected, wanted,
            "" if str(injected) == str(wanted) else
            " (%s: these are the faults it got through)" % (
                "the end of its --minutes" if "--minutes" in argv else "stopped early"),
            command.get("cpus", "?"),
            " ".join("%.1f" % x for x in command.get("loadavg", ())))
    unfired = len(recorded) - len(faults)
    return line, faults, read_jsonl(out / "jobs.jsonl"), unfired, argv


def run_folders(args, scratch):
    """The run folders named by `args`: folders as they are, tarballs extracted into scratch
    (each run folder in one holds a command.json)."""
    folders = []
    for i, arg in enumerate(args):
        path = Path(arg)
        if path.is_dir():
            folders.append(path)
            continue
        into = Path(scratch) / str(i)
        with tarfile.open(path) as tar:
            # The "data" filter where this Python has it (3.11.4 on): no links out, no devices.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(into, **safe)
        folders += sorted(c.parent for c in into.glob("**/command.json"))
    return folders


def main():
    """Arguments: one or more --out folders of soak runs, or tarballs of them; the table adds
    them up."""
    with tempfile.TemporaryDirectory() as scratch:
        runs = [run_line(folder) for folder in run_folders(sys.argv[1:], scratch)]
    # A replacement (a slot listed for a lost member) is a new worker, not a fault.
    faults = [f for r in runs for f in r[1] if f["kind"] != "replace"]
    new_workers = [f for r in runs for f in r[1] if "newcomer_s" in f]
    replaced = sum(1 for r in runs for f in r[1] if f["kind"] == "replace")
    jobs = [j for r in runs for j in r[2]]
    unfired = sum(r[3] for r in runs)
    argv = runs[0][4]
    timeout = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 3.0
    phases = {}
    for f in faults:
        if f["kind"].startswith("exit@"):
            phases[f["kind"][5:]] = phases.get(f["kind"][5:], 0) + 1
    lines = [
        "# Elastic chaos soak",
        "",
        "Generated by `bench/chaos/report.py` from the runs of `bench/chaos/soak.py` below "
        "(what each fault is and what is measured: its docstring).",
        "",
    ] + [r[0] for r in runs] + [
        "",
        "- faults injected in all: **%d**" % len(faults),
        mix_line(faults, replaced),
        "- jobs (perseusrun runs, each taking up to --faults-per-job faults): %d ended" % len(jobs),
        "- exits aimed at a phase, per phase: %s; armed but never fired (no fault counted): %d"
        % (", ".join("%s %d" % kv for kv in sorted(phases.items())) or "none", unfired),
        "",
        "## Goals",
    ] + goal_rows(faults, new_workers, jobs, timeout) + [
        "",
        "## Per fault type",
        "Resume: from the fault (the kill, the stop, the hooked exit, the discovery listing) "
        "to the first step completed by a later membership. Stall: the longest time in that "
        "window in which no rank completed a step (for a grow, how long the members stopped "
        "training to take the new worker in). A hang: no step for --hang-s.",
        "",
    ] + fault_rows(faults) + [
        "",
        "## New workers",
        "From the discovery listing (a grow, or a replacement) to the new worker's first "
        "completed step, by how it started: a spare (perseusrun --spare-workers) that had "
        "warmed up when perseusrun gave it the slot, one still warming up, or a new process. "
        "`Meanwhile`: another fault or listing of the same job between the listing and the "
        "first step (a kill or stop there holds the new worker's membership up too).",
        "",
    ] + newcomer_rows(new_workers) + [
        "",
    ] + stage_tables(new_workers) + [
        "## Per run",
        "| check | result |",
        "|---|---|",
        "| divergent replicas (entries whose parameter checksums differ across ranks) | %d of "
        "%d entries |" % (sum(j["divergent_count"] for j in jobs), sum(j["entries"] for j in jobs)),
        "| lost commits (an entry resuming before the newest completed commit) | %d |"
        % sum(j["lost_commit_count"] for j in jobs),
        "| jobs that ended with a problem | %d: %s |" % (
            sum(1 for j in jobs if j["problem"]),
            "; ".join(sorted({j["problem"] for j in jobs if j["problem"]})) or "-"),
        "| leftover processes after perseusrun exited | %d |"
        % sum(len(j["leftover_pids"]) for j in jobs),
        "| leftover /dev/shm segments of the job | %d |"
        % sum(len(j["leftover_shm"]) for j in jobs),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
