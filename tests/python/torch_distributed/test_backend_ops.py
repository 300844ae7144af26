"""The perseus torch.distributed backend: every operation against its expected values (each
reduce op, several dtypes), DDP, FSDP2 and the object collectives at 2 ranks; groups
(new_group, new_subgroups, split_group) and 1-D and 2x2 device meshes at 4 ranks; the same on
the ProcessGroup route at 4 ranks."""
import pytest

from distsupport import ok, perseusrun

pytestmark = pytest.mark.timeout(200)


def test_every_op_ddp_fsdp2():
    r, out = perseusrun(2, "ops", "consumers", timeout=180)
    ok(r, out, "OPS OK", 2)
    assert out.count("CONSUMERS OK") == 2, out[-8000:]


def test_groups_and_device_mesh_at_four_ranks():
    r, out = perseusrun(4, "groups", "mesh", timeout=180)
    ok(r, out, "GROUPS OK", 4)
    assert out.count("MESH OK") == 4, out[-8000:]


def test_process_group_route():
    """The ProcessGroup route (torch 2.11's only one): every op, DDP, FSDP2 and the objects,
    groups and meshes, and the refusal of a mixed backend string."""
    r, out = perseusrun(4, "process_group_groups", "ops", "consumers", "groups", "mesh",
                        "launch_mixed", timeout=180)
    ok(r, out, "OPS OK", 4)
    for marker in ("CONSUMERS OK", "GROUPS OK", "MESH OK", "refused"):
        assert out.count(marker) == 4, (marker, out[-8000:])
