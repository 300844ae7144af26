"""Process sets created and removed many more times than a job has group ids (61): member
lists within one host and across hosts, each used by a one-line allreduce (the arena's
per-group lines), a 64 KiB one (barriers) and a barrier, every result checked. A removed set's
group id goes to a new set with other members (Note [Reused group ids])."""

import torch

import perseus.torch as hvd
import relcommon as rc


def main():
    args = rc.parse(lambda p: p.add_argument("--sets", type=int, default=80))
    res = rc.Results(args.results)
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    lists = [[0, 1], list(range(size)), [1, size - 1], [size - 2, size - 1], [0, size - 1],
             list(range(1, size))]
    for i in range(args.sets):
        members = sorted(set(lists[i % len(lists)]))
        ps = hvd.add_process_set(members)
        if rank in members:
            for _ in range(i % 3 + 1):
                tiny = hvd.allreduce(torch.tensor([float(rank)] * 3), op=hvd.Sum,
                                     name="churn.tiny", process_set=ps)
                assert tiny[0].item() == sum(members), (i, members, tiny)
                big = hvd.allreduce(torch.ones(16384), op=hvd.Sum, name="churn.big",
                                    process_set=ps)
                assert big[-1].item() == len(members), (i, members, big[-1])
                hvd.barrier(process_set=ps)
        hvd.remove_process_set(ps)
    res.report(outcome="ok", sets=args.sets)
    hvd.barrier()
    hvd.shutdown()


if __name__ == "__main__":
    main()
