#!/usr/bin/env python3
"""Time from launch to the first completed allreduce: 4 ranks on 2 network-namespace hosts
(tests/python/multihost/netns_hosts.py), 2 per host, under perseusrun, Open MPI's mpirun,
MPICH's mpiexec, Intel MPI's mpiexec.hydra, Slurm's srun (a real slurmctld/slurmd started
here) and torchrun (static rendezvous, one agent per host), with the same worker
(tests/python/launchers/topology_worker.py, perseus._core and numpy; no torch import in the
ranks).

For each launcher and repetition it reports, in seconds:
  total     launch command started -> the last rank's first allreduce completed;
  to_python launch command started -> the first rank's Python started running the script;
  perseus   the last rank to have imported perseus -> the last rank's first allreduce
            completed: init() (rendezvous, connections) and one allreduce once every rank
            is ready, i.e. what Perseus adds to the launcher's own start time.
Prints a Markdown table of medians. Needs root, Debian's mpich, slurm and munge, and Intel
MPI's runtime under /opt/impi (scripts/setup.sh).
Usage: sudo python3 bench/launchers/launch_to_first_allreduce.py [--reps 5]
"""
import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "tests", "python"), os.path.join(ROOT, "tests", "python",
                                                                    "launchers")]
import launchsupport  # noqa: E402,F401  (puts tests/python/multihost on sys.path)
import netns_hosts  # noqa: E402
import slurm_cluster  # noqa: E402
from multihost_launch import MultiHostLaunchers  # noqa: E402


def measure(launch):
    if launch.returncode != 0:
        raise SystemExit("launch failed:\n" + launch.output[-4000:])
    res = launchsupport.results(launch.output)
    assert sorted(res) == [0, 1, 2, 3], launch.output[-4000:]
    return {"total": max(r["first_allreduce"] for r in res.values()) - launch.started,
            "to_python": min(r["start"] for r in res.values()) - launch.started,
            "perseus": max(r["first_allreduce"] for r in res.values()) -
                       max(r["imported"] for r in res.values())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with netns_hosts.VirtualCluster(["h1", "h2"], own_hostnames=True) as net, \
            slurm_cluster.SlurmCluster(net) as slurm:
        runners = MultiHostLaunchers(net, slurm)
        cases = [("perseusrun -np 4 -H h1:2,h2:2", runners.perseusrun),
                 ("mpirun (Open MPI 4.1, hostfile, ssh)", runners.mpirun),
                 ("mpiexec (MPICH 4.0 Hydra, ssh)", runners.mpiexec_mpich),
                 ("mpiexec.hydra (Intel MPI 2021.19, ssh)", runners.mpiexec_impi),
                 ("srun -N 2 --ntasks-per-node 2 (Slurm 22.05)", runners.srun),
                 ("torchrun --nnodes 2 --nproc-per-node 2 (static)", runners.torchrun_static)]
        rows = []
        for name, run in cases:
            samples = []
            for rep in range(args.reps):
                kwargs = {"port": 29600 + 2 * rep} if run == runners.torchrun_static else {}
                samples.append(measure(run(**kwargs)))
            med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
            rows.append((name, med, min(s["total"] for s in samples),
                         max(s["total"] for s in samples)))
            print("%-50s total %.2f s (%.2f-%.2f), to first Python %.2f s, Perseus %.3f s"
                  % (name, med["total"], rows[-1][2], rows[-1][3], med["to_python"],
                     med["perseus"]), file=sys.stderr, flush=True)
    print("| launcher | launch -> first allreduce (median, min-max) | launch -> first rank's "
          "Python | Perseus: last rank ready -> first allreduce done |")
    print("|---|---|---|---|")
    for name, med, lo, hi in rows:
        print("| %s | %.2f s (%.2f-%.2f) | %.2f s | %.3f s |"
              % (name, med["total"], lo, hi, med["to_python"], med["perseus"]))


if __name__ == "__main__":
    main()
