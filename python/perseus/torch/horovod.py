"""AIACC-Training's import path: `import perseus.torch.horovod as hvd` is perseus.torch itself."""
import sys

from perseus import torch as _torch

sys.modules[__name__] = _torch
