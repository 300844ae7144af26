"""The one model shape both training benchmarks build (torch_train_bench.py, mxnet_train_bench.py):
conv(channels->conv, 3x3) -> relu -> conv(conv->conv, 3x3) -> relu -> maxpool 2 -> flatten ->
`depth` x [dense(width) -> relu] -> dense(classes). Synthetic inputs of channels x image x image.
"""
from dataclasses import dataclass


@dataclass
class ModelSpec:
    channels: int = 3
    image: int = 32
    conv: int = 16
    width: int = 256
    depth: int = 16
    classes: int = 10

    @staticmethod
    def add_arguments(parser):
        d = ModelSpec()
        parser.add_argument("--image", type=int, default=d.image)
        parser.add_argument("--conv", type=int, default=d.conv)
        parser.add_argument("--width", type=int, default=d.width)
        parser.add_argument("--depth", type=int, default=d.depth)

    @staticmethod
    def from_args(args):
        return ModelSpec(image=args.image, conv=args.conv, width=args.width, depth=args.depth)

    def describe(self):
        return "cnn%dx%d-mlp%dx%d" % (self.conv, self.image, self.depth, self.width)
