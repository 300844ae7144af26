"""Cross-process synchronized batch-norm arithmetic, independent of how ranks talk.

Every function takes ``allreduce(name, vector) -> vector``: a blocking sum of a 1-D float64
NDArray over the ranks of the normalisation group. Each rank contributes its local sums, so
the statistics are exactly those of the concatenated batch, also when ranks hold different
(or zero) numbers of samples:

  forward   n = sum_r n_r,  mean = sum_r Sx_r / n,  var = sum_r Sxx_r / n - mean^2  (biased)
  backward  dx = gamma * invstd * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n)
            dgamma, dbeta stay local (the trainer sums parameter gradients across ranks)

Sums are accumulated in float64 so that E[x^2] - E[x]^2 does not cancel catastrophically.
Conventions follow MXNet's BatchNorm/SyncBatchNorm: channel axis 1, ``fix_gamma`` means
gamma = 1 and dgamma = 0, moving statistics ``m = m * momentum + batch * (1 - momentum)``
with the biased variance.
"""
import mxnet as mx


def _channel_shape(x):
    return (1, -1) + (1,) * (len(x.shape) - 2)


def _per_channel_sum(a):
    if len(a.shape) == 1:
        return a
    return mx.nd.sum(a, axis=1, exclude=True)


def is_empty(x):
    return any(d == 0 for d in x.shape)


_empty = is_empty


def local_moments(x):
    """[Sx (C), Sxx (C), n] of this rank, float64."""
    channels = x.shape[1]
    if _empty(x):
        return mx.nd.zeros((2 * channels + 1,), ctx=x.context, dtype="float64")
    x64 = x.astype("float64")
    count = x.size // channels
    return mx.nd.concat(_per_channel_sum(x64), _per_channel_sum(x64 * x64),
                        mx.nd.array([count], ctx=x.context, dtype="float64"), dim=0)


def global_stats(x, allreduce, name):
    """(mean, var, count) of the group's concatenated batch, float64 (mean/var per channel)."""
    channels = x.shape[1]
    total = allreduce(name, local_moments(x))
    count = float(total[2 * channels].asscalar())
    if count <= 0:
        raise ValueError("PerseusSyncBatchNorm %r: every rank of the group has an empty batch; "
                         "there are no statistics to normalise with" % name)
    mean = total[:channels] / count
    var = mx.nd.maximum(total[channels:2 * channels] / count - mean * mean, 0)
    return mean, var, count


def normalize(x, gamma, beta, mean, var, eps, fix_gamma):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta; returns (y, invstd float64). y is None
    for an empty x: no op may touch a zero-size array outside NumPy-shape mode, which is
    thread-local and off on MXNet's CustomOp threads."""
    invstd = 1.0 / mx.nd.sqrt(var.astype("float64") + eps)
    if _empty(x):
        return None, invstd
    g = mx.nd.ones_like(gamma) if fix_gamma else gamma
    scale = (g.astype("float64") * invstd).astype(x.dtype)
    shift = (beta.astype("float64") - mean.astype("float64") * g.astype("float64") * invstd)
    shape = _channel_shape(x)
    y = mx.nd.broadcast_add(mx.nd.broadcast_mul(x, scale.reshape(shape)),
                            shift.astype(x.dtype).reshape(shape))
    return y, invstd


def forward_train(x, gamma, beta, eps, fix_gamma, allreduce, name):
    """Training forward: returns (y, mean, var, invstd, count)."""
    mean, var, count = global_stats(x, allreduce, name)
    y, invstd = normalize(x, gamma, beta, mean, var, eps, fix_gamma)
    return y, mean, var, invstd, count


def backward_train(dy, x, gamma, mean, invstd, count, fix_gamma, allreduce, name):
    """Training backward: returns (dx, dgamma, dbeta); dgamma/dbeta are this rank's share;
    dx is None for an empty x (see normalize)."""
    channels = x.shape[1]
    if _empty(x):
        local = mx.nd.zeros((2 * channels,), ctx=x.context, dtype="float64")
        dgamma = dbeta = mx.nd.zeros((channels,), ctx=x.context, dtype="float64")
        xhat = None
    else:
        shape = _channel_shape(x)
        xhat = mx.nd.broadcast_mul(mx.nd.broadcast_sub(x.astype("float64"), mean.reshape(shape)),
                                   invstd.reshape(shape))
        dy64 = dy.astype("float64")
        dbeta = _per_channel_sum(dy64)
        dgamma = _per_channel_sum(dy64 * xhat)
        local = mx.nd.concat(dbeta, dgamma, dim=0)
    total = allreduce(name, local)
    if fix_gamma:
        dgamma = mx.nd.zeros_like(dgamma)
    if xhat is None:
        dx = None
    else:
        g = mx.nd.ones_like(gamma) if fix_gamma else gamma
        shape = _channel_shape(x)
        mean_dy = (total[:channels] / count).reshape(shape)
        mean_dy_xhat = (total[channels:] / count).reshape(shape)
        coef = (g.astype("float64") * invstd).reshape(shape)
        dx64 = mx.nd.broadcast_mul(
            mx.nd.broadcast_sub(mx.nd.broadcast_sub(dy64, mean_dy),
                                mx.nd.broadcast_mul(xhat, mean_dy_xhat)), coef)
        dx = dx64.astype(dy.dtype)
    return dx, dgamma.astype(gamma.dtype), dbeta.astype(gamma.dtype)


def backward_global_stats(dy, gamma, moving_var, eps, fix_gamma):
    """Backward with fixed (moving) statistics: dx = dy * gamma / sqrt(moving_var + eps)."""
    g = mx.nd.ones_like(gamma) if fix_gamma else gamma
    coef = (g.astype("float64") / mx.nd.sqrt(moving_var.astype("float64") + eps))
    return mx.nd.broadcast_mul(dy, coef.astype(dy.dtype).reshape(_channel_shape(dy)))


def update_moving(moving_mean, moving_var, mean, var, momentum):
    """In place, as MXNet: moving = moving * momentum + batch * (1 - momentum)."""
    moving_mean[:] = (moving_mean.astype("float64") * momentum +
                      mean * (1 - momentum)).astype(moving_mean.dtype)
    moving_var[:] = (moving_var.astype("float64") * momentum +
                     var * (1 - momentum)).astype(moving_var.dtype)
