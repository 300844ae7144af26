"""Gradient compression shared by the framework layers (Horovod's Compression.none/.fp16).

A framework supplies only how to tell a floating-point tensor and how to cast one; the
protocol (compress -> (tensor, ctx), decompress(tensor, ctx)) lives here once."""


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


def make_fp16_compressor(is_wide_float, cast, dtype_of, half):
    """An FP16Compressor for one framework: floating-point tensors wider than float16 travel
    as `half` and come back in their own dtype; other tensors pass through."""

    class FP16Compressor(Compressor):
        @staticmethod
        def compress(tensor):
            if is_wide_float(tensor):
                return cast(tensor, half), dtype_of(tensor)
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else cast(tensor, ctx)

    return FP16Compressor


def make_compression(fp16_compressor):
    class Compression:
        """Compression.none and Compression.fp16, as in Horovod."""
        none = NoneCompressor
        fp16 = fp16_compressor

    return Compression
