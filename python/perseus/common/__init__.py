"""Framework-neutral layer: the adapter over the `_core` extension that the torch and mxnet
layers share (basics, process sets, ops, handles, object collectives, exceptions)."""
