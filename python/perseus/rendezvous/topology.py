"""The topology variables a rank starts with: perseusrun sets them for each rank of a fixed job
(runner/launch.py), and an elastic worker sets them for itself from its assignment in each
membership (common/elastic/worker.py), so that the two cannot differ."""


def rank_env(slot):
    """The topology variables of one rank: Perseus's, the same under horovodrun's names (data
    loaders read them before init()), and RANK/WORLD_SIZE/LOCAL_RANK, which PyTorch Lightning,
    Accelerate and Hugging Face read. `slot` has rank, size, local_rank, local_size,
    cross_rank, cross_size and host."""
    env = {}
    for prefix in ("PERSEUS_", "HOROVOD_"):
        env.update({prefix + "RANK": str(slot.rank), prefix + "SIZE": str(slot.size),
                    prefix + "LOCAL_RANK": str(slot.local_rank),
                    prefix + "LOCAL_SIZE": str(slot.local_size),
                    prefix + "CROSS_RANK": str(slot.cross_rank),
                    prefix + "CROSS_SIZE": str(slot.cross_size), prefix + "HOSTNAME": slot.host})
    env.update({"RANK": str(slot.rank), "WORLD_SIZE": str(slot.size),
                "LOCAL_RANK": str(slot.local_rank), "LOCAL_WORLD_SIZE": str(slot.local_size)})
    return env
