"""Train a small CNN on MNIST-format data with perseus.torch (Horovod API).

    perseusrun -np 2 python torch_mnist.py --epochs 1
    perseusrun -np 2 python torch_mnist.py --max-steps 20      # quick check

Data: gzip (or raw) IDX files train-images-idx3-ubyte[.gz] etc. in --data-dir; the default is
Fashion-MNIST from Debian's dataset-fashion-mnist package. Each rank trains on its shard; the
learning rate is scaled by the number of ranks."""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd

DEFAULT_DATA_DIRS = ["/usr/share/datasets/fashion-mnist", "/usr/share/dataset-fashion-mnist"]


def read_idx(folder, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            _, dtype, ndim = struct.unpack(">HBB", data[:4])
            shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    raise FileNotFoundError("%s[.gz] not found in %s; pass --data-dir" % (stem, folder))


def load(folder, train):
    prefix = "train" if train else "t10k"
    images = read_idx(folder, prefix + "-images-idx3-ubyte").astype(np.float32) / 255.0
    labels = read_idx(folder, prefix + "-labels-idx1-ubyte").astype(np.int64)
    return torch.from_numpy((images - 0.5) / 0.5).unsqueeze(1), torch.from_numpy(labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def progress(epoch, step, steps, loss, width=30):
    """A text progress bar: redrawn in place on a terminal, one line per update otherwise
    (perseusrun prefixes whole lines)."""
    done = int(width * step / max(steps, 1))
    line = "epoch %d [%s%s] %d/%d loss %.4f" % (epoch, "=" * done, " " * (width - done), step,
                                                steps, loss)
    if sys.stdout.isatty():
        sys.stdout.write("\r" + line + ("\n" if step == steps else ""))
    else:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="folder with MNIST-format IDX files")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="single-rank learning rate")
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after N steps")
    p.add_argument("--test-samples", type=int, default=0, help="evaluate on N samples (0: all)")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    folder = args.data_dir or next((d for d in DEFAULT_DATA_DIRS if os.path.isdir(d)),
                                   DEFAULT_DATA_DIRS[0])
    x_train, y_train = load(folder, True)
    x_test, y_test = load(folder, False)
    # Shard by rank: rank r takes every size-th sample starting at r.
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    steps = len(x_train) // args.batch_size
    if args.max_steps:
        steps = min(steps, args.max_steps)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(len(x_train))
        start = time.time()
        for step in range(steps):
            idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            every = 1 if sys.stdout.isatty() else max(1, steps // 5)
            if hvd.rank() == 0 and ((step + 1) % every == 0 or step == steps - 1):
                progress(epoch, step + 1, steps, loss.item())
        elapsed = time.time() - start
        images = hvd.allreduce(torch.tensor(float(steps * args.batch_size)), op=hvd.Sum).item()
        if hvd.rank() == 0:
            print("epoch %d: %.1f images/s in total (%d ranks)" % (epoch, images / elapsed,
                                                                    hvd.size()))

    model.eval()
    n = args.test_samples or len(x_test)
    # Each rank evaluates a shard of the test set; the counts are summed.
    xs, ys = x_test[:n][hvd.rank()::hvd.size()], y_test[:n][hvd.rank()::hvd.size()]
    with torch.no_grad():
        correct = (model(xs).argmax(1) == ys).sum()
    correct = hvd.allreduce(correct, op=hvd.Sum).item()
    if hvd.rank() == 0:
        print("test accuracy: %.4f (%d samples)" % (correct / n, n))


if __name__ == "__main__":
    main()
