# Copyright 2026 The Cyborg Authors.
#
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

"""cyborg.accelerator.drivers.utils.sysfs: the host root, confined link
resolution and safe reads and writes, on fixture trees."""

import errno
import os

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone.host_tree import HostTree
from cyborg.conf import agent as agent_conf
from tests.fixtures.hosts import hosts


@pytest.fixture
def tree(tmp_path):
    return hosts.sriov_nic_host(str(tmp_path / 'host'))


@pytest.fixture
def host(tree):
    return sysfs.HostRoot(tree.root)


def test_host_root_option_defaults_to_slash_and_builds_the_root(tmp_path):
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    conf([], project='cyborg')
    assert conf.agent.host_root == '/'
    conf.set_override('host_root', str(tmp_path), group='agent')
    try:
        assert sysfs.HostRoot.from_conf(conf).root == str(tmp_path)
    finally:
        # oslo.config keeps an override on the option group, which every
        # configuration that registers cyborg.conf.agent shares: it would
        # reach later tests of the worker.
        conf.clear_override('host_root', group='agent')


def test_root_that_is_a_link_is_resolved(tmp_path, tree):
    os.symlink(tree.root, str(tmp_path / 'alias'))
    host = sysfs.HostRoot(str(tmp_path / 'alias'))
    assert host.root == tree.root
    assert sysfs.read_text(host, pci.device_path(hosts.X710_PF,
                                                 'vendor')) == '0x8086'


def test_resolve_follows_relative_links_inside_the_root(tree, host):
    real = host.resolve('/sys/bus/pci/devices/%s/physfn/driver'
                        % hosts.X710_VFS[0])
    assert real == tree.abs('sys/bus/pci/drivers/i40e')
    assert host.host_path(real) == '/sys/bus/pci/drivers/i40e'


def test_resolve_keeps_missing_components(tree, host):
    assert host.resolve('/sys/nothing/here') == tree.abs('sys/nothing/here')


def test_a_link_that_goes_while_it_is_resolved_is_a_missing_one(
        tree, host, monkeypatch):
    # A driver unbinds between the check that "driver" is a link and the
    # read of that link.
    link = tree.abs(tree.dev(hosts.X710_PF, 'driver'))
    real_readlink = os.readlink

    def readlink(path):
        if path == link:
            os.unlink(path)
        return real_readlink(path)
    monkeypatch.setattr(os, 'readlink', readlink)
    path = '/sys/bus/pci/devices/%s/driver' % hosts.X710_PF
    assert host.resolve(path) == link
    assert sysfs.link_name(host, path) is None


def test_relative_link_climbing_out_of_the_root_is_refused(tree, host):
    dev = tree.dev(hosts.X710_PF)
    depth = dev.count('/') + 1
    tree.raw_link(dev + '/evil', '../' * (depth + 1) + 'etc')
    with pytest.raises(errors.OutsideRootError):
        sysfs.read_text(host, pci.device_path(hosts.X710_PF, 'evil',
                                              'passwd'))
    with pytest.raises(errors.OutsideRootError):
        sysfs.link_name(host, pci.device_path(hosts.X710_PF, 'evil'))


def test_dotdot_in_a_path_cannot_leave_the_root(host):
    with pytest.raises(errors.OutsideRootError):
        sysfs.read_text(host, '/sys/../../etc/hostname')


def test_absolute_link_under_a_custom_root_is_refused(tree, host):
    # An absolute target would name the agent's own filesystem, not the
    # host's; the kernel never makes one in sysfs.
    tree.unbind(hosts.E810_PF)
    tree.raw_link(tree.dev(hosts.E810_PF, 'driver'),
                  tree.abs('sys/bus/pci/drivers/ice'))
    with pytest.raises(errors.OutsideRootError):
        pci.driver(host, hosts.E810_PF)


def test_absolute_links_are_followed_when_the_root_is_slash(tree):
    host = sysfs.HostRoot('/')
    tree.raw_link('abs-link', tree.abs(tree.dev(hosts.X710_PF)))
    assert sysfs.read_text(host, tree.abs('abs-link/vendor')) == '0x8086'


def test_link_loop_raises(tree, host):
    tree.raw_link('loop-a', 'loop-b')
    tree.raw_link('loop-b', 'loop-a')
    with pytest.raises(errors.LinkLoopError):
        sysfs.read_text(host, '/loop-a')


def test_host_path_refuses_a_path_outside(host, tmp_path):
    assert host.host_path(host.root) == '/'
    assert host.host_path(host.root + '/..sys') == '/..sys'
    with pytest.raises(errors.OutsideRootError):
        host.host_path(str(tmp_path))


def test_read_text_strips_and_missing_is_none(host):
    assert sysfs.read_text(host, pci.device_path(
        hosts.X710_PF, 'class')) == '0x020000'
    assert sysfs.read_text(host, pci.device_path(
        hosts.X710_PF, 'no_such_attribute')) is None
    assert sysfs.read_text(host, '/sys/bus/pci/devices/0000:00:00.0/'
                           'vendor') is None


def test_read_text_of_a_directory_is_a_read_error(host):
    with pytest.raises(errors.SysfsReadError) as caught:
        sysfs.read_text(host, pci.device_path(hosts.X710_PF, 'net'))
    assert caught.value.errno == errno.EISDIR


def test_read_int_bases(tree, host):
    path = pci.device_path(hosts.X710_PF, 'sriov_vf_device')
    assert sysfs.read_int(host, path, 16) == 0x154c
    assert sysfs.read_int(host, pci.device_path(hosts.X710_PF, 'vendor'),
                          0) == 0x8086
    assert sysfs.read_int(host, pci.device_path(hosts.X710_PF,
                                                'sriov_totalvfs')) == 64
    assert sysfs.read_int(host, pci.device_path(hosts.X710_PF,
                                                'nothing')) is None


def test_read_int_of_garbage_raises_a_value_error(tree, host):
    tree.write(tree.dev(hosts.X710_PF, 'numa_node'), 'unknown')
    with pytest.raises(errors.SysfsValueError) as caught:
        sysfs.read_int(host, pci.device_path(hosts.X710_PF, 'numa_node'))
    assert caught.value.text == 'unknown'


def test_read_lines_and_key_values(host):
    uevent = sysfs.read_key_values(host, pci.device_path(hosts.X710_PF,
                                                         'uevent'))
    assert uevent['DRIVER'] == 'i40e'
    assert uevent['PCI_CLASS'] == '20000'
    assert sysfs.read_lines(host, '/nothing') is None
    assert sysfs.read_key_values(host, '/nothing') is None
    assert len(sysfs.read_lines(host, pci.device_path(hosts.X710_PF,
                                                      'uevent'))) == 6


def test_read_link_and_link_name(tree, host):
    assert sysfs.link_name(host, pci.device_path(hosts.X710_PF,
                                                 'driver')) == 'i40e'
    assert sysfs.read_link(host, pci.device_path(
        hosts.X710_PF, 'driver')) == tree.abs('sys/bus/pci/drivers/i40e')
    assert sysfs.link_name(host, pci.device_path(hosts.X710_PF,
                                                 'driver') + '/') == 'i40e'
    # A file is no link; a missing link is None.
    assert sysfs.read_link(host, pci.device_path(hosts.X710_PF,
                                                 'vendor')) is None
    assert sysfs.link_name(host, pci.device_path(hosts.E810_UNBOUND_PF,
                                                 'driver')) is None


def test_list_dir_sorted_and_missing_empty(host):
    assert sysfs.list_dir(host, '/sys/class/net') == [
        'ens785f0', 'ens785f0v0', 'ens801f0', 'ens801f0v0', 'ens801f0v1']
    assert sysfs.list_dir(host, '/sys/class/nope') == []
    assert sysfs.list_dir(host, pci.device_path(hosts.X710_PF,
                                                'vendor')) == []


def test_exists(host):
    assert sysfs.exists(host, pci.device_path(hosts.X710_PF))
    assert not sysfs.exists(host, pci.device_path('0000:00:1f.7'))


def test_write_text_replaces_the_value(tree, host):
    path = pci.device_path(hosts.X710_PF, 'sriov_numvfs')
    sysfs.write_text(host, path, '0')
    assert tree.read(tree.dev(hosts.X710_PF, 'sriov_numvfs')) == '0'


def test_write_text_never_creates_an_attribute(tree, host):
    path = pci.device_path(hosts.E810_UNBOUND_PF, 'no_such_attribute')
    with pytest.raises(errors.SysfsWriteError) as caught:
        sysfs.write_text(host, path, '1')
    assert caught.value.errno == errno.ENOENT
    assert not os.path.exists(tree.abs(tree.dev(hosts.E810_UNBOUND_PF,
                                                'no_such_attribute')))


def test_write_text_through_an_escaping_link_is_refused(tmp_path):
    tree = HostTree(str(tmp_path / 'host'))
    (tmp_path / 'outside').write_text('keep\n')
    tree.raw_link('sys/escape', '../../outside')
    with pytest.raises(errors.OutsideRootError):
        sysfs.write_text(sysfs.HostRoot(tree.root), '/sys/escape', 'x')
    assert (tmp_path / 'outside').read_text() == 'keep\n'


def test_path_joins_parts():
    assert sysfs.path('sys/bus/pci/devices', '0000:3b:00.0',
                      'vendor') == '/sys/bus/pci/devices/0000:3b:00.0/vendor'
    assert sysfs.path('/sys/', '/class/') == '/sys/class'
