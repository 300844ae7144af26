"""The perseus torch.distributed backend at 2 ranks: every operation against its expected
values (each reduce op, several dtypes), groups, device meshes, DDP and FSDP2 briefly."""
import pytest

from distsupport import ok, perseusrun

pytestmark = pytest.mark.timeout(200)


def test_every_op():
    r, out = perseusrun(2, "ops")
    ok(r, out, "OPS OK", 2)


def test_groups_subgroups_split_group():
    r, out = perseusrun(2, "groups")
    ok(r, out, "GROUPS OK", 2)


def test_groups_at_four_ranks():
    r, out = perseusrun(4, "groups")
    ok(r, out, "GROUPS OK", 4)


def test_device_mesh_2x2():
    r, out = perseusrun(4, "mesh")
    ok(r, out, "MESH OK", 4)


def test_ddp_fsdp2_objects():
    r, out = perseusrun(2, "consumers")
    ok(r, out, "CONSUMERS OK", 2)
