"""ElasticSampler (Horovod 0.28's horovod.torch.elastic.sampler): a DistributedSampler whose
unprocessed indices are split again over the new membership after a reset.

Contract: used from the training thread (and by DataLoader iteration in it); reset() reads
rank() and size(), so the Perseus core must be initialised when it is constructed or reset.
"""

import math
import random

import torch.utils.data

from perseus.common import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions `dataset` over the ranks, Horovod's way: the epoch's order (shuffled with
    seed + epoch when `shuffle`) is the same on every rank, rank r takes every size()-th index
    from position r, and the processed prefix of that order is skipped after a reset.

    Use it in a TorchState, call record_batch() after each batch and set_epoch() at the end of
    each epoch (not the start: that would forget a partly processed epoch)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # positions of this epoch's order processed by all ranks
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: a new order when shuffling, and nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank has processed one more batch of `batch_size` samples."""
        self.processed_num += batch_size * self.num_replicas

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices in batch `batch_idx` of `batch_size` of the current pass."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def record_indices(self, indices):
        """Records `indices` as this rank's share of a processed step: every rank is taken to
        have processed as many (the ranks step together), so len(indices) * size() positions
        of the epoch's order are done."""
        self.processed_num += len(indices) * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Splits what is left of the epoch over the current rank() and size()."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._mine()

    def _mine(self):
        # Padded by repeating the start, so that every rank has num_samples indices.
        padded = self.remaining_indices[:]
        while len(padded) < self.total_size:
            padded += padded[:self.total_size - len(padded)]
        return padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self.indices = self._mine()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
