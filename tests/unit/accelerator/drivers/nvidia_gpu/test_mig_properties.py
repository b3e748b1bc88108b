# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Property tests of MIG partitioning.

* The fake ``nvidia-smi``'s placement rules agree with the tables of
  NVIDIA's MIG user guide (copied here on their own, not taken from the
  fake): what ``-lgip``/``-lgipp`` print, and which creations NVML
  accepts, for random create/destroy sequences on each GPU model.
* The conflict users hit: a mixed 4g + 2g + 1g request fits the A100's
  seven compute slices by count but not by position.
* ``homogeneous`` capacity (instances held + still creatable, from the
  device): over random bind/unbind sequences, everything Placement
  could grant is created on the device.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.allinone import fake_mig

_EIGHT = {  # profile id -> (compute slices, instances, starts, size)
    19: (1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
    20: (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    15: (1, 4, (0, 2, 4, 6), 2),
    14: (2, 3, (0, 2, 4), 2),
    9: (3, 2, (0, 4), 4),
    5: (4, 1, (0,), 4),
    0: (7, 1, (0,), 8),
}
# NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles":
# model -> (compute slices, {profile id: (name, compute, instances,
# placement starts, memory slices)}).
PUBLISHED = {
    'NVIDIA A100-SXM4-40GB': ['1g.5gb', '1g.5gb+me', '1g.10gb', '2g.10gb',
                              '3g.20gb', '4g.20gb', '7g.40gb'],
    'NVIDIA A100-SXM4-80GB': ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                              '3g.40gb', '4g.40gb', '7g.80gb'],
    'NVIDIA H100 80GB HBM3': ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                              '3g.40gb', '4g.40gb', '7g.80gb'],
    'NVIDIA H200': ['1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb',
                    '3g.71gb', '4g.71gb', '7g.141gb'],
}
TABLES = {model: (7, {pid: (name,) + _EIGHT[pid]
                      for pid, name in zip(_EIGHT, names, strict=True)})
          for model, names in PUBLISHED.items()}
TABLES['NVIDIA A30'] = (4, {
    14: ('1g.6gb', 1, 4, (0, 1, 2, 3), 1),
    21: ('1g.6gb+me', 1, 1, (0, 1, 2, 3), 1),
    5: ('2g.12gb', 2, 2, (0, 2), 2),
    6: ('2g.12gb+me', 2, 1, (0, 2), 2),
    0: ('4g.24gb', 4, 1, (0,), 4),
})
MODELS = sorted(TABLES)


class InProcessRunner:
    """Runs ``nvidia-smi mig ...`` of the fake in this process (the
    same code the fake command runs, without a process per call)."""

    def __init__(self, gpus: list[fake_mig.MigGpu]) -> None:
        self.gpus = gpus

    def run(self, argv, timeout=0):
        assert list(argv[:2]) == ['nvidia-smi', 'mig']
        rc, out, err = fake_mig.run(self.gpus, list(argv[2:]))
        return runner_mod.CommandResult(tuple(argv), rc, out, err)


def _tool(model: str) -> tuple[mig.MigTool, fake_mig.MigGpu]:
    gpu = fake_mig.MigGpu(0, fake_mig.MODELS[model])
    return mig.MigTool(InProcessRunner([gpu]), 1.0), gpu


def _fits(table, layout, pid, start):
    """Whether the published table allows profile ``pid`` at
    ``start`` beside ``layout`` [(pid, start)]: an allowed start, no
    shared memory slice, fewer than its instance count."""
    _name, _compute, count, starts, size = table[pid]
    used = {s for p, b in layout for s in range(b, b + table[p][4])}
    return (start in starts and not used & set(range(start, start + size))
            and sum(1 for p, _b in layout if p == pid) < count)


@pytest.mark.parametrize('model', MODELS)
def test_profiles_and_placements_are_the_published_ones(model):
    tool, _gpu = _tool(model)
    _slices, table = TABLES[model]
    assert {p.id: (p.name, p.total, tuple(x.start for x in p.placements),
                   p.placements[0].size) for p in tool.profiles(0)} == {
        pid: (name, count, starts, size)
        for pid, (name, _c, count, starts, size) in table.items()}


def test_the_tables_keep_compute_within_the_gpu():
    fake_mig.check_tables()


operations = st.lists(st.tuples(
    st.booleans(), st.integers(0, 30), st.integers(-1, 7)), max_size=25)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), ops=operations)
def test_random_creations_and_destructions_follow_the_tables(model, ops):
    tool, gpu = _tool(model)
    slices, table = TABLES[model]
    ids = sorted(table)
    layout: list[tuple[int, int]] = []
    for create, pick, start in ops:
        if create:
            pid = ids[pick % len(ids)]
            want = None if start < 0 else start
            allowed = [b for b in table[pid][3]
                       if _fits(table, layout, pid, b)]
            expected = allowed if want is None else [
                b for b in allowed if b == want]
            try:
                gi = tool.create_gpu_instance(0, pid, start=want)
            except mig.MigCommandError:
                assert expected == []
            else:
                assert gi.placement.start in expected
                layout.append((pid, gi.placement.start))
        elif tool.gpu_instances(0):
            gis = tool.gpu_instances(0)
            gi = gis[pick % len(gis)]
            tool.destroy_gpu_instance(0, gi.id)
            layout.remove((gi.profile_id, gi.placement.start))
        # What the device lists is the layout, and the layout is valid.
        assert sorted((g.profile_id, g.placement.start)
                      for g in tool.gpu_instances(0)) == sorted(layout)
        assert sum(table[p][1] for p, _b in layout) <= slices
        for profile in tool.profiles(0):
            free = [b for b in table[profile.id][3]
                    if _fits(table, layout, profile.id, b)]
            assert (profile.free > 0) == bool(free)


def test_mixed_4g_2g_1g_fits_by_count_not_by_position():
    """4g + 2g + 1g is 7 compute slices, the A100's all. Made in that
    order, NVML places them at 0, 4 and 6; with the 1g taken at slice 5
    (where a churned GPU may have it), the 2g has no placement left."""
    tool, _gpu = _tool('NVIDIA A100-SXM4-40GB')
    made = [tool.create_gpu_instance(0, pid) for pid in (5, 14, 19)]
    assert [g.placement.start for g in made] == [0, 4, 6]
    for gi in made:
        tool.destroy_gpu_instance(0, gi.id)
    tool.create_gpu_instance(0, 5)
    tool.create_gpu_instance(0, 19, start=5)
    assert {p.id: p.free for p in tool.profiles(0)}[14] == 0
    with pytest.raises(mig.MigCommandError, match='Insufficient Resources'):
        tool.create_gpu_instance(0, 14)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 30)),
                    max_size=40))
def test_homogeneous_grants_are_always_realizable(model, ops):
    """One profile per GPU, total = held + still creatable (from the
    device); Placement grants while used < total; an empty GPU may
    switch profile. Every grant is created on the device."""
    tool, _gpu = _tool(model)
    profiles = {p.id: p for p in tool.profiles(0)}
    serving: int | None = None
    held: list[int] = []
    for bind, pick in ops:
        if bind:
            if not held:  # an empty GPU follows demand
                serving = sorted(profiles)[pick % len(profiles)]
            assert serving is not None
            profile = next(p for p in tool.profiles(0) if p.id == serving)
            total = mig.homogeneous_capacity(profile, tool.gpu_instances(0))
            assert total is not None
            if len(held) < total:  # Placement grants: it must be made
                held.append(tool.create_gpu_instance(0, serving).id)
        elif held:
            tool.destroy_gpu_instance(0, held.pop(pick % len(held)))
    assert len(tool.gpu_instances(0)) == len(held)
