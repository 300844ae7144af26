"""Gradient compression for allreduce (Horovod's horovod.torch.compression)."""

import torch

from ..common.compression import (Compressor, NoneCompressor, make_compression,
                                  make_fp16_compressor)

FP16Compressor = make_fp16_compressor(
    is_wide_float=lambda t: t.dtype.is_floating_point and t.dtype != torch.float16,
    cast=lambda t, dtype: t.type(dtype),
    dtype_of=lambda t: t.dtype,
    half=torch.float16)

Compression = make_compression(FP16Compressor)

__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor"]
