"""Gradient compression for DistributedTrainer (Horovod's horovod.mxnet.compression)."""

import numpy as np

from ..common.compression import (Compressor, NoneCompressor, make_compression,
                                  make_fp16_compressor)

FP16Compressor = make_fp16_compressor(
    is_wide_float=lambda t: np.dtype(t.dtype).kind == "f" and np.dtype(t.dtype) != np.float16,
    cast=lambda t, dtype: t.astype(dtype, copy=False),
    dtype_of=lambda t: t.dtype,
    half="float16")

Compression = make_compression(FP16Compressor)

__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor"]
