"""AIACC-Training's import path: `import perseus.mxnet.horovod as hvd` is perseus.mxnet itself."""
import sys

from perseus import mxnet as _mxnet

sys.modules[__name__] = _mxnet
