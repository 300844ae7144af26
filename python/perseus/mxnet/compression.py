"""Gradient compression for DistributedTrainer (Horovod's horovod.mxnet.compression)."""


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and casts the result back."""

    @staticmethod
    def compress(tensor):
        if "float" in str(tensor.dtype):
            return tensor.astype("float16", copy=False), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx, copy=False)


class Compression:
    """Compression.none and Compression.fp16, as in Horovod."""
    none = NoneCompressor
    fp16 = FP16Compressor


__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor"]
