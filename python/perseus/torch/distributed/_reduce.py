"""torch.distributed ReduceOp -> the core's reduce op and the prescale it needs."""

import torch.distributed as dist

from perseus.common.exceptions import InvalidArgumentError

_R = dist.ReduceOp.RedOpType
# perseus_reduce_op (include/perseus/c_api.h): SUM 0, AVERAGE 1, MIN 2, MAX 3, PRODUCT 4.
_CORE = {_R.SUM: 0, _R.AVG: 1, _R.MIN: 2, _R.MAX: 3, _R.PRODUCT: 4}
_SUM = 0
PLAIN = _CORE  # the ops that need no prescale


def _hash_is_op_value():
    """Whether hash(ReduceOp) is its RedOpType's value, as torch binds it."""
    try:
        return all(hash(dist.ReduceOp(kind)) == int(kind) for kind in _CORE)
    except (TypeError, ValueError):
        return False


# op_key(ReduceOp or RedOpType) -> a key of PLAIN_BY_KEY. Where torch binds hash(ReduceOp) as its
# RedOpType's value, the key is the builtin hash: `reduce_op.op` builds an enum object and hashes
# it, about twice the cost, on the blocking allreduce's path.
if _hash_is_op_value():
    op_key = hash
    PLAIN_BY_KEY = {int(kind): core for kind, core in _CORE.items()}
else:
    def op_key(reduce_op):
        return getattr(reduce_op, "op", reduce_op)
    PLAIN_BY_KEY = _CORE


def plain_op(reduce_op):
    """The core op of a ReduceOp (or RedOpType) that needs no prescale, else None."""
    return PLAIN_BY_KEY.get(op_key(reduce_op))


def _factor(reduce_op):
    """PREMUL_SUM's factor: the `factor` attribute, or, where torch binds none (2.11), the
    second field of the op's pickled state."""
    factor = getattr(reduce_op, "factor", None)
    if factor is None and hasattr(reduce_op, "__getstate__"):
        state = reduce_op.__getstate__()
        if isinstance(state, tuple) and len(state) == 2:
            factor = state[1]
    return factor


def core_op(reduce_op, what):
    """(core op, prescale) for a torch ReduceOp. PREMUL_SUM multiplies by its factor first
    (torch._make_nccl_premul_sum: a number, or a one-element tensor)."""
    kind = getattr(reduce_op, "op", reduce_op)  # a ReduceOp, or a bare RedOpType
    core = _CORE.get(kind)
    if core is not None:
        return core, 1.0
    if kind == _R.PREMUL_SUM:
        factor = _factor(reduce_op)
        if factor is None:
            raise InvalidArgumentError(
                "perseus: %s with PREMUL_SUM: this torch does not expose the op's factor to "
                "Python backends; scale the tensor and use SUM" % what)
        if hasattr(factor, "item"):
            factor = factor.item()
        return _SUM, float(factor)
    raise InvalidArgumentError(
        "perseus: %s: ReduceOp.%s is not supported; use SUM, AVG, MIN, MAX, PRODUCT or "
        "PREMUL_SUM (MIN and MAX of bool tensors are logical and/or)" % (what, kind.name))
