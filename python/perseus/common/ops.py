"""Reduce-op constants (Horovod's values) and their translation to perseus_reduce_op."""

import warnings

from perseus.common.exceptions import InvalidArgumentError
from perseus.common.native import core

# Horovod's public values (horovod/common/basics.py): user code may compare or store them.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5

# perseus_reduce_op in include/perseus/c_api.h.
_TO_CORE = {Sum: 0, Average: 1, Min: 2, Max: 3, Product: 4, Adasum: 5}
_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
          Product: "Product"}


def reduce_op_name(op):
    return _NAMES.get(op, repr(op))


def to_core_op(op):
    """The perseus_reduce_op for a Horovod op constant."""
    try:
        return _TO_CORE[op]
    except (KeyError, TypeError):
        raise InvalidArgumentError("unknown reduce op %r; use Average, Sum, Adasum, Min, Max or "
                                   "Product" % (op,))


def check_adasum(op, process_set_id):
    """Horovod's refusal, with its type and text, of an Adasum allreduce over a number of ranks
    that is not a power of two (Adasum combines ranks in pairs over log2(size) levels)."""
    if op != Adasum:
        return
    n = core().process_set_info(process_set_id)[1]
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")


def resolve_op(op, average, default=Average):
    """Horovod's `average=` deprecation: only one of op/average may be given; average=True
    means Average and False Sum; neither means `default`."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return default if op is None else op
