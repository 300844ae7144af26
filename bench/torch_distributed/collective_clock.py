"""Where a step's time goes between a backend's collectives and the rest: a clock around
torch.distributed's all-gather and reduce-scatter calls, which fsdp.py reads per step.

FSDP2 on CPU calls its all-gathers and reduce-scatters synchronously (async_op=False: CPU
streams are no-ops, so nothing of the next layer's all-gather overlaps this layer's compute),
so a call's span is the collective, and the step splits into:
  - waiting: from this rank's call until the last rank of the group made the same call (the
    other ranks' compute being slower, or their previous collective ending later);
  - collective: from the last rank's call until this rank's call returned: the backend's own
    time (negotiation, data movement, completion);
  - the rest: compute, FSDP2's copies into and out of the collectives' buffers, Python.
The ranks' clocks are one (time.perf_counter is CLOCK_MONOTONIC, shared by the processes of
a host), so arrivals compare across ranks. A backend that does not synchronize its ranks (the
"local" floor: synchronized=False) has no waiting: its calls are its copies.

    clock = CollectiveClock().install()
    ... steps ...
    clock.split(steps)  # every rank calls it: {"collective_ms": ..., "waiting_ms": ...,
                        #                      "last_arrivals": [calls each rank came last]}
"""
import time

import torch
import torch.distributed as dist

# The calls FSDP2 makes (all_gather_single, reduce_scatter_single) and the names other torch
# releases give them.
_CALLS = ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor",
          "reduce_scatter_tensor")


class CollectiveClock:
    def __init__(self):
        self.spans = []  # (arrived, returned) of each outermost call, in call order
        self._saved = {}
        self._depth = 0

    def install(self):
        for name in _CALLS:
            fn = getattr(dist, name, None)
            if fn is not None:
                self._saved[name] = fn
                setattr(dist, name, self._timed(fn))
        return self

    def uninstall(self):
        for name, fn in self._saved.items():
            setattr(dist, name, fn)
        self._saved = {}

    def reset(self):
        self.spans = []

    def _timed(self, fn):
        def call(*args, **kwargs):
            # One torch name may call another: only the outermost call is a collective.
            self._depth += 1
            arrived = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.spans.append((arrived, time.perf_counter()))
        return call

    def split(self, steps, synchronized=True):
        """Per step, this rank's time in collectives after the group's last rank arrived and its
        time waiting for that rank (ms), with the calls per step. Every rank calls it, after
        the same steps (so with the same calls); the clock stops. synchronized=False: the
        backend's calls do not wait for each other, so all of a call's span is its own."""
        self.uninstall()
        mine = torch.tensor(self.spans, dtype=torch.float64).reshape(-1, 2)
        arrived, returned = mine[:, 0], mine[:, 1]
        last = arrived
        out = {}
        if synchronized:
            every = mine.new_empty((dist.get_world_size() * mine.shape[0], 2))
            dist.all_gather_into_tensor(every, mine)
            last, latest = every.view(-1, mine.shape[0], 2)[:, :, 0].max(dim=0)
            # Which rank arrived last, how often: a rank that is always last is the slow one.
            out["last_arrivals"] = torch.bincount(latest, minlength=dist.get_world_size()).tolist()
        waiting = (torch.minimum(last, returned) - arrived).clamp(min=0)
        collective = (returned - torch.maximum(last, arrived)).clamp(min=0)
        return dict(out, collective_ms=collective.sum().item() / steps * 1e3,
                    waiting_ms=waiting.sum().item() / steps * 1e3,
                    collectives_per_step=len(self.spans) // max(1, steps))
