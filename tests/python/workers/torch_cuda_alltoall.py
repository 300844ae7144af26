"""alltoall with splits on the GPU returns received_splits on the GPU, as Horovod's
(splits.new()); splits on the CPU or as a list keep them on the CPU. Needs a GPU; ranks may
share one. Prints 'PASS <check>' per check."""

import torch

import perseus.torch as hvd


def check_received_splits_follow_splits(rank, size):
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    x = torch.arange(size * 2, dtype=torch.float32, device=dev)
    for dtype in (torch.int32, torch.int64):
        out, received = hvd.alltoall(x, splits=torch.full((size,), 2, dtype=dtype, device=dev),
                                     name="a2a.gpu.%s" % dtype)
        assert out.is_cuda and received.device == dev, (out.device, received.device)
        assert received.tolist() == [2] * size, received
    for splits in (torch.full((size,), 2, dtype=torch.int32), [2] * size):
        out, received = hvd.alltoall(x, splits=splits, name="a2a.cpu.%s" % type(splits))
        assert out.is_cuda and received.device.type == "cpu", received.device
        assert received.tolist() == [2] * size, received


def main():
    hvd.init()
    check_received_splits_follow_splits(hvd.rank(), hvd.size())
    print("PASS check_received_splits_follow_splits", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
