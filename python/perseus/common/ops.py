"""Reduce-op constants (Horovod's values) and their translation to perseus_reduce_op."""

import warnings

from perseus.common.exceptions import InvalidArgumentError, UnsupportedError

# Horovod's public values (horovod/common/basics.py): user code may compare or store them.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5

# perseus_reduce_op in include/perseus/c_api.h.
_TO_CORE = {Sum: 0, Average: 1, Min: 2, Max: 3, Product: 4}
_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
          Product: "Product"}


def reduce_op_name(op):
    return _NAMES.get(op, repr(op))


def to_core_op(op):
    """The perseus_reduce_op for a Horovod op constant."""
    if op == Adasum:
        raise UnsupportedError("op=Adasum is not supported by Perseus; use op=Average or op=Sum "
                               "(Adasum's scale-invariant sum has no Perseus implementation)")
    try:
        return _TO_CORE[op]
    except (KeyError, TypeError):
        raise InvalidArgumentError("unknown reduce op %r; use Average, Sum, Min, Max or Product"
                                   % (op,))


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
