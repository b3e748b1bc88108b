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

"""MIG-backed vGPUs on a fixture vGPU 17+ host whose H200 runs MIG mode
(the fake nvidia-smi keeps its instances): creation, release, and the
journal's roll-back of what a killed agent left half done."""

from __future__ import annotations

import threading

import pytest

from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.nvidia_gpu import mig_vgpu
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone import fake_mig
from cyborg.allinone import fake_tools
from tests.fixtures.hosts import hosts

H200_1G = 1414  # NVIDIA H200X-1-18C on the fixture's VFs


@pytest.fixture
def host(tmp_path):
    """(tree, MigVgpus, MigTool) over the fixture host."""
    tree = hosts.nvidia_vgpu17_host(str(tmp_path / 'host'))
    fake_mig.write_nvidia_smi_mig(
        tree.tools_dir, [fake_tools.Gpu(0, hosts.VGPU17_PF, 'GPU-h',
                                        'NVIDIA H200')],
        str(tmp_path / 'mig.state'), {0: 'NVIDIA H200'})
    tool = mig.MigTool(runner.CommandRunner(search_path=[tree.tools_dir]),
                       10.0)
    vgpus = mig_vgpu.MigVgpus(tool, sysfs.HostRoot(tree.root),
                              str(tmp_path / 'state' / 'mig'))
    return tree, vgpus, tool


def _vf(index):
    return pci.parse_address(hosts.vgpu17_vfs()[index])


def _current(tree, index):
    return int(tree.read(tree.dev(hosts.vgpu17_vfs()[index], 'nvidia',
                                  'current_vgpu_type')))


@pytest.mark.parametrize('name, profile', [
    ('NVIDIA A100-3-20C', '3g.20gb'), ('A100-1-5CME', '1g.5gb+me'),
    ('NVIDIA H200X-1-18C', '1g.18gb'), ('H100-7-80C', '7g.80gb'),
    ('NVIDIA A100-20C', None), ('GRID T4-16Q', None)])
def test_mig_profile_of_a_vgpu_type(name, profile):
    assert mig_vgpu.mig_profile_name(name) == profile


def test_create_and_destroy(host):
    tree, vgpus, tool = host
    gi = vgpus.create('arq-1', 0, '1g.18gb', _vf(0), H200_1G)
    assert (gi.name, gi.placement) == ('1g.18gb', mig.Placement(0, 1))
    assert _current(tree, 0) == H200_1G
    # A repeated bind changes nothing.
    assert vgpus.create('arq-1', 0, '1g.18gb', _vf(0), H200_1G) == gi
    vgpus.create('arq-2', 0, '1g.18gb', _vf(1), H200_1G)
    assert len(tool.gpu_instances(0)) == 2
    vgpus.destroy('arq-1')
    vgpus.destroy('arq-1')  # a repeated release
    assert _current(tree, 0) == 0
    assert [g.id for g in tool.gpu_instances(0)] != [gi.id]
    assert len(tool.gpu_instances(0)) == 1
    assert list(vgpus.journal.entries()) == ['arq-2']


def test_no_room_leaves_nothing(host):
    tree, vgpus, tool = host
    vgpus.create('big', 0, '7g.141gb', _vf(0), H200_1G)
    with pytest.raises(mig_vgpu.PartitionError,
                       match='Insufficient Resources'):
        vgpus.create('small', 0, '1g.18gb', _vf(1), H200_1G)
    assert _current(tree, 1) == 0
    assert list(vgpus.journal.entries()) == ['big']
    with pytest.raises(mig_vgpu.PartitionError, match='no MIG profile'):
        vgpus.create('odd', 0, '5g.99gb', _vf(1), H200_1G)


def test_a_vf_that_refuses_the_type_rolls_the_instance_back(host):
    tree, vgpus, tool = host
    tree.set_vgpu_type(hosts.vgpu17_vfs()[2], 1428)
    with pytest.raises(mig_vgpu.PartitionError, match='runs vGPU type'):
        vgpus.create('arq-1', 0, '1g.18gb', _vf(2), H200_1G)
    assert tool.gpu_instances(0) == []
    assert vgpus.journal.entries() == {}


def test_roll_back_an_instance_created_but_not_recorded(host):
    """The agent was killed between nvidia-smi's creation and the
    journal's record of the instance id."""
    tree, vgpus, tool = host
    vgpus.create('kept', 0, '1g.18gb', _vf(0), H200_1G)
    vgpus.journal.write('cut', {'gpu': 0, 'profile': 19,
                                'vf': hosts.vgpu17_vfs()[1],
                                'type': H200_1G, 'gi': None,
                                'step': mig_vgpu.STEP_INTENT})
    tool.create_gpu_instance(0, 19)
    assert vgpus.roll_back_unfinished() == ['cut']
    assert len(tool.gpu_instances(0)) == 1  # the recorded one stays
    assert list(vgpus.journal.entries()) == ['kept']


def test_roll_back_after_the_type_was_written(host):
    tree, vgpus, tool = host
    gi = tool.create_gpu_instance(0, 19)
    tree.set_vgpu_type(hosts.vgpu17_vfs()[3], H200_1G)
    vgpus.journal.write('cut', {'gpu': 0, 'profile': 19,
                                'vf': hosts.vgpu17_vfs()[3],
                                'type': H200_1G, 'gi': gi.id,
                                'step': mig_vgpu.STEP_INSTANCE})
    assert vgpus.roll_back_unfinished() == ['cut']
    assert _current(tree, 3) == 0
    assert tool.gpu_instances(0) == []


def test_a_destruction_cut_short_is_finished_at_start(host):
    tree, vgpus, tool = host
    vgpus.create('arq-1', 0, '1g.18gb', _vf(0), H200_1G)
    entry = vgpus.journal.read('arq-1')
    # Killed after the VF was reset and the instance destroyed.
    tree.set_vgpu_type(hosts.vgpu17_vfs()[0], 0)
    tool.destroy_gpu_instance(0, entry['gi'])
    vgpus.journal.write('arq-1', dict(entry,
                                      step=mig_vgpu.STEP_DESTROYING))
    assert vgpus.roll_back_unfinished() == ['arq-1']
    assert vgpus.journal.entries() == {}


def test_a_bad_key_is_refused(host):
    _tree, vgpus, _tool = host
    with pytest.raises(ValueError):
        vgpus.create('../x', 0, '1g.18gb', _vf(0), H200_1G)


def test_restore_after_a_reboot_whatever_ids_the_device_gives(host,
                                                              tmp_path):
    """The device numbers the new instances itself: an entry whose old
    id is given to another entry's new instance is still recreated."""
    tree, vgpus, tool = host
    vgpus.create('a', 0, '1g.18gb', _vf(0), H200_1G)
    vgpus.create('b', 0, '1g.18gb', _vf(1), H200_1G)
    # The journal's ids swapped, as a reboot can leave them.
    a, b = vgpus.journal.read('a'), vgpus.journal.read('b')
    vgpus.journal.write('a', dict(a, gi=b['gi']))
    vgpus.journal.write('b', dict(b, gi=a['gi']))
    state = str(tmp_path / 'mig.state')
    gpus = fake_mig.read_state(state)
    gpus[0].gis = []
    fake_mig.write_state(state, gpus)
    for index in (0, 1):
        tree.set_vgpu_type(hosts.vgpu17_vfs()[index], 0)
    assert vgpus.orphans([0]) == []
    assert vgpus.restore() == ['a', 'b']
    assert len(tool.gpu_instances(0)) == 2
    assert {vgpus.journal.read(k)['gi'] for k in 'ab'} == {
        g.id for g in tool.gpu_instances(0)}
    assert (_current(tree, 0), _current(tree, 1)) == (H200_1G, H200_1G)
    assert vgpus.restore() == []  # nothing lost now


def test_a_partition_that_cannot_be_restored_leaves_the_others(host,
                                                               tmp_path):
    """With ``failed``, one partition the host cannot take back (its VF
    lost its vGPU files) is reported, and the other is restored."""
    tree, vgpus, tool = host
    vgpus.create('a', 0, '1g.18gb', _vf(0), H200_1G)
    vgpus.create('b', 0, '1g.18gb', _vf(1), H200_1G)
    state = str(tmp_path / 'mig.state')
    gpus = fake_mig.read_state(state)
    gpus[0].gis = []
    fake_mig.write_state(state, gpus)
    tree.set_vgpu_type(hosts.vgpu17_vfs()[0], 0)
    tree.set_vgpu_type(hosts.vgpu17_vfs()[1], 0)
    tree.remove(tree.dev(hosts.vgpu17_vfs()[0], 'nvidia'))
    failed: dict[str, str] = {}
    assert vgpus.restore(failed) == ['b']
    assert list(failed) == ['a']
    assert 'cannot set vGPU type %d' % H200_1G in failed['a']
    assert _current(tree, 1) == H200_1G
    # Without, the first failure raises, as it always did.
    gpus = fake_mig.read_state(state)
    gpus[0].gis = []
    fake_mig.write_state(state, gpus)
    with pytest.raises(mig_vgpu.PartitionError):
        vgpus.restore()


def test_a_failed_creation_waits_for_one_under_way(host):
    """A creation that fails rolls back the instances no journal entry
    records; one under way (created, its id not yet recorded) is not
    rolled back with it: the second waits for the first."""
    tree, vgpus, tool = host
    for index in range(6):
        vgpus.create('arq-%d' % index, 0, '1g.18gb', _vf(index), H200_1G)
    created = threading.Event()
    go_on = threading.Event()
    create = tool.create_gpu_instance

    def slow_create(*args, **kwargs):
        gi = create(*args, **kwargs)
        if threading.current_thread().name == 'first':
            created.set()
            go_on.wait(10)
        return gi

    tool.create_gpu_instance = slow_create  # type: ignore[method-assign]
    errors = []

    def second():
        try:
            vgpus.create('arq-b', 0, '1g.18gb', _vf(8), H200_1G)
        except mig_vgpu.PartitionError as exc:
            errors.append(str(exc))

    first = threading.Thread(target=vgpus.create, name='first', args=(
        'arq-a', 0, '1g.18gb', _vf(7), H200_1G))
    first.start()
    assert created.wait(10)
    late = threading.Thread(target=second)
    late.start()
    late.join(0.5)
    assert late.is_alive()  # waiting for the first
    go_on.set()
    first.join(10)
    late.join(10)
    # The GPU was full: the second failed, and took nothing with it.
    assert len(errors) == 1 and 'Insufficient' in errors[0]
    assert len(tool.gpu_instances(0)) == 7
    assert _current(tree, 7) == H200_1G and _current(tree, 8) == 0
    assert sorted(vgpus.journal.entries()) == sorted(
        ['arq-%d' % i for i in range(6)] + ['arq-a'])
