"""What both DistributedOptimizers (optimizer.py, and adasum_optimizer.py for op=Adasum) keep
per parameter: its name in the collectives, and the backward passes left before it is
reduced."""


def count_backward_pass(optimizer, p):
    """Counts one backward pass that accumulated p's gradient; True on the pass that must reduce
    it (the backward_passes_per_step-th since the last step()). Shared by the optimizers whose
    hooks reduce per parameter."""
    if p in optimizer._handles and optimizer._handles[p][0] is not None:
        if optimizer._allreduce_delay[p] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times "
                "before call to step(). Increase backward_passes_per_step to "
                "accumulate gradients locally.")
    optimizer._allreduce_delay[p] -= 1
    return optimizer._allreduce_delay[p] == 0


def parameter_names(param_groups, named_parameters):
    """{parameter: name} after Horovod's checks of named_parameters (tuples, unique names,
    every parameter named); unnamed optimizers get allreduce.noname.<group>.<index>."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%s.%s" % (i, j), v)
                            for i, group in enumerate(param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    all_params = [v for group in param_groups for v in group["params"]]
    unnamed = {id(v) for v in all_params} - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
