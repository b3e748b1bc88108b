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

"""The MIG part of the NVIDIA GPU driver against the fake nvidia-smi:
NVIDIA's output formats parsed, profiles and placements from the
device, GPU instances created and destroyed through the runner."""

from __future__ import annotations

import os
import subprocess

import pytest

from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_mig
from cyborg.allinone import fake_tools

A100 = 'NVIDIA A100-SXM4-40GB'
# What a real H200 printed (read-only, 2026-11-28, driver 580.159.04, not
# in MIG mode).
REAL_H200 = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                         'fixtures', 'nvidia_smi', 'h200_580.159.04')
# The published A100-40GB table (NVIDIA MIG user guide): profile id ->
# (name, instances, placement starts, memory slices).
A100_TABLE = {
    19: ('1g.5gb', 7, (0, 1, 2, 3, 4, 5, 6), 1),
    20: ('1g.5gb+me', 1, (0, 1, 2, 3, 4, 5, 6), 1),
    15: ('1g.10gb', 4, (0, 2, 4, 6), 2),
    14: ('2g.10gb', 3, (0, 2, 4), 2),
    9: ('3g.20gb', 2, (0, 4), 4),
    5: ('4g.20gb', 1, (0,), 4),
    0: ('7g.40gb', 1, (0,), 8),
}


@pytest.fixture
def smi(tmp_path):
    """A fake nvidia-smi with GPU 0 an A100-40GB in MIG mode and GPU 1
    an A30 without; (MigTool, tools directory)."""
    tools_dir = str(tmp_path / 'tools')
    gpus = [fake_tools.Gpu(0, '0000:3b:00.0', 'GPU-a', A100),
            fake_tools.Gpu(1, '0000:5e:00.0', 'GPU-b', 'NVIDIA A30')]
    fake_mig.write_nvidia_smi_mig(tools_dir, gpus,
                                  str(tmp_path / 'mig.state'), {0: A100})
    state = fake_mig.read_state(str(tmp_path / 'mig.state'))
    state.append(fake_mig.MigGpu(1, fake_mig.MODELS['NVIDIA A30'],
                                 mig_enabled=False))
    fake_mig.write_state(str(tmp_path / 'mig.state'), state)
    tool = mig.MigTool(runner.CommandRunner(search_path=[tools_dir]), 10.0)
    return tool, tools_dir


def test_profiles_and_placements_come_from_the_device(smi):
    tool, _tools_dir = smi
    profiles = tool.profiles(0)
    assert {p.id: (p.name, p.total, tuple(x.start for x in p.placements),
                   p.placements[0].size) for p in profiles} == A100_TABLE
    assert all(p.free == p.total for p in profiles)
    assert {p.name: p.memory_gib for p in profiles}['3g.20gb'] == 19.62


def test_create_list_and_destroy_gpu_instances(smi):
    tool, _tools_dir = smi
    assert tool.gpu_instances(0) == []
    gi = tool.create_gpu_instance(0, 9, compute_instance=True)
    assert (gi.name, gi.profile_id, gi.placement) == (
        '3g.20gb', 9, mig.Placement(0, 4))
    other = tool.create_gpu_instance(0, 19, start=6)
    assert other.placement == mig.Placement(6, 1)
    assert [(c.gpu_instance, c.name, c.placement.size)
            for c in tool.compute_instances(0)] == [(gi.id, '3g.20gb', 3)]
    free = {p.name: p.free for p in tool.profiles(0)}
    assert (free['3g.20gb'], free['1g.5gb'], free['7g.40gb']) == (0, 2, 0)
    tool.destroy_gpu_instance(0, gi.id)  # with its compute instance
    tool.destroy_gpu_instance(0, gi.id)  # gone already: fine
    assert [g.id for g in tool.gpu_instances(0)] == [other.id]
    assert tool.compute_instances(0) == []


def test_a_placement_taken_is_refused_with_nvidias_reason(smi):
    tool, _tools_dir = smi
    tool.create_gpu_instance(0, 19, start=4)
    with pytest.raises(mig.MigCommandError,
                       match='Insufficient Resources'):
        tool.create_gpu_instance(0, 9, start=4)


def test_a_gpu_without_mig_mode(smi):
    tool, _tools_dir = smi
    assert tool.mig_gpus() == {pci.parse_address('0000:3b:00.0'): 0}
    # Its profiles are listed (as a real H200 out of MIG mode lists them);
    # its instances are not, with exit status 0 and NVIDIA's line.
    assert {p.name for p in tool.profiles(1)} >= {'1g.6gb', '4g.24gb'}
    with pytest.raises(mig.MigNotEnabled):
        tool.gpu_instances(1)
    with pytest.raises(mig.MigNotEnabled):
        tool.create_gpu_instance(1, 14)


def _real(name):
    with open(os.path.join(REAL_H200, name)) as f:
        return f.read()


def test_a_real_h200s_listings_parse():
    profiles = mig.parse_lgip(_real('mig_lgip.txt'))
    assert [(p.id, p.name, p.free, p.total, p.memory_gib)
            for p in profiles] == [
        (19, '1g.18gb', 7, 7, 16.0), (20, '1g.18gb+me', 1, 1, 16.0),
        (15, '1g.35gb', 4, 4, 32.5), (14, '2g.35gb', 3, 3, 32.5),
        (9, '3g.71gb', 2, 2, 69.75), (5, '4g.71gb', 1, 1, 69.75),
        (0, '7g.141gb', 1, 1, 140.0)]
    placements = mig.parse_lgipp(_real('mig_lgipp.txt'))
    assert placements[(0, 15)] == tuple(
        mig.Placement(s, 2) for s in (0, 2, 4, 6))
    assert placements[(0, 0)] == (mig.Placement(0, 8),)
    assert len(placements) == 7


def test_the_fake_prints_what_a_real_h200_prints(tmp_path):
    """Out of MIG mode, the fake H200 answers -lgip, -lgipp and -lgi
    byte for byte as the real one did (driver 580.159.04)."""
    gpus = [fake_mig.MigGpu(0, fake_mig.MODELS['NVIDIA H200'],
                            mig_enabled=False)]
    for args, name in ((['-lgip'], 'mig_lgip.txt'),
                       (['-lgipp'], 'mig_lgipp.txt'),
                       (['-lgi'], 'mig_lgi.txt')):
        assert fake_mig.run(gpus, args) == (0, _real(name), ''), args


def test_a_missing_nvidia_smi(tmp_path):
    tool = mig.MigTool(runner.CommandRunner(search_path=[str(tmp_path)]),
                       10.0)
    with pytest.raises(mig.MigCommandError, match='not found'):
        tool.profiles(0)


def test_still_creatable_agrees_with_the_free_column(smi):
    tool, _tools_dir = smi
    for profile_id, start in ((19, 1), (14, 4), (19, 6)):
        tool.create_gpu_instance(0, profile_id, start=start)
        instances = tool.gpu_instances(0)
        for profile in tool.profiles(0):
            assert mig.still_creatable(profile, instances) == profile.free


def test_homogeneous_capacity(smi):
    tool, _tools_dir = smi
    one_g = next(p for p in tool.profiles(0) if p.id == 19)
    assert mig.homogeneous_capacity(one_g, []) == 7
    tool.create_gpu_instance(0, 19)
    tool.create_gpu_instance(0, 19)
    one_g = next(p for p in tool.profiles(0) if p.id == 19)
    assert mig.homogeneous_capacity(one_g, tool.gpu_instances(0)) == 7
    tool.create_gpu_instance(0, 14)
    one_g = next(p for p in tool.profiles(0) if p.id == 19)
    # A GPU holding another profile serves none of this one.
    assert mig.homogeneous_capacity(one_g, tool.gpu_instances(0)) is None


def test_the_fake_answers_other_queries_from_its_table(smi):
    _tool, tools_dir = smi
    out = subprocess.run([tools_dir + '/nvidia-smi', '-q'],
                         capture_output=True, text=True, check=True)
    assert 'NVIDIA A100-SXM4-40GB' in out.stdout
    assert fake_tools.calls(tools_dir)[-1] == ['nvidia-smi', '-q']


@pytest.mark.parametrize('text', [
    '', 'garbage\n', '|   0  MIG 1g.5gb   nineteen  7/7  4.75  No |\n'])
def test_parsers_skip_what_is_not_theirs(text):
    assert mig.parse_lgip(text) == []
    assert mig.parse_lgipp(text) == {}
    assert mig.parse_lgi(text) == []
    assert mig.parse_lci(text) == []


def test_lgipp_of_a_profile_with_one_placement():
    assert mig.parse_lgipp('GPU  0 Profile ID  0 Placement : {0}:8\n') == {
        (0, 0): (mig.Placement(0, 8),)}
