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

"""The fake ``ip``: what it keeps, what it prints, what it refuses, run
as the drivers run it (a process)."""

import os
import subprocess

import pytest

from cyborg.allinone import fake_ip

IFNAME = 'ens1f0'
MAC = '3c:fd:fe:aa:bb:00'


@pytest.fixture
def tools_dir(tmp_path):
    directory = str(tmp_path / 'tools')
    fake_ip.write_ip(directory, {IFNAME: (MAC, 3)})
    return directory


def _ip(tools_dir, *args):
    return subprocess.run([os.path.join(tools_dir, 'ip'), *args],
                          capture_output=True, text=True, timeout=30)


def test_a_vf_keeps_its_vlan_and_trust_as_ip_shows_them(tools_dir):
    assert _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '1', 'vlan',
               '100', 'trust', 'on').returncode == 0
    assert _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '2', 'vlan',
               '7').returncode == 0
    shown = _ip(tools_dir, 'link', 'show', 'dev', IFNAME)
    assert shown.returncode == 0
    # iproute2's layout: the link, its address, one line per VF.
    assert shown.stdout == (
        '2: ens1f0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq '
        'state UP mode DEFAULT group default qlen 1000\n'
        '    link/ether 3c:fd:fe:aa:bb:00 brd ff:ff:ff:ff:ff:ff\n'
        '    vf 0     link/ether 00:00:00:00:00:00 brd ff:ff:ff:ff:ff:ff, '
        'spoof checking on, link-state auto, trust off\n'
        '    vf 1     link/ether 00:00:00:00:00:00 brd ff:ff:ff:ff:ff:ff, '
        'vlan 100, spoof checking on, link-state auto, trust on\n'
        '    vf 2     link/ether 00:00:00:00:00:00 brd ff:ff:ff:ff:ff:ff, '
        'vlan 7, spoof checking on, link-state auto, trust off\n')
    # Taken out of its VLAN, trust kept.
    _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '1', 'vlan', '0')
    assert fake_ip.vf_settings(tools_dir, IFNAME) == {
        0: {'vlan': 0, 'trust': False}, 1: {'vlan': 0, 'trust': True},
        2: {'vlan': 7, 'trust': False}}


def test_the_settings_are_runtime_state(tools_dir):
    _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '0', 'vlan', '100')
    # What a reboot wipes (HostTree.reboot).
    assert os.listdir(os.path.join(tools_dir, fake_ip.RUNTIME_DIR))
    subprocess.run(['rm', '-r', os.path.join(tools_dir,
                                             fake_ip.RUNTIME_DIR)],
                   check=True)
    assert fake_ip.vf_settings(tools_dir, IFNAME)[0] == {'vlan': 0,
                                                         'trust': False}


@pytest.mark.parametrize('args,rc,stderr', [
    (('link', 'set', 'dev', 'eth9', 'vf', '0', 'vlan', '1'), 1,
     'Cannot find device "eth9"\n'),
    (('link', 'set', 'dev', IFNAME, 'vf', '3', 'vlan', '1'), 2,
     'RTNETLINK answers: Invalid argument\n'),
    (('link', 'set', 'dev', IFNAME, 'vf', '0', 'vlan', '4095'), 2,
     'ip: unknown arguments: vf 0 vlan 4095\n'),
    (('link', 'set', 'dev', IFNAME, 'vf', '0', 'qos'), 2,
     'ip: unknown arguments: vf 0 qos\n'),
    (('addr', 'show'), 2, 'ip: unknown arguments: addr show\n'),
])
def test_what_it_refuses_changes_nothing(tools_dir, args, rc, stderr):
    result = _ip(tools_dir, *args)
    assert (result.returncode, result.stderr) == (rc, stderr)
    assert fake_ip.vf_settings(tools_dir, IFNAME) == {
        vf: {'vlan': 0, 'trust': False} for vf in range(3)}


def test_a_refused_vf_is_refused_until_rewritten(tools_dir):
    fake_ip.refuse_vf(tools_dir, IFNAME, 1)
    result = _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '1', 'vlan',
                 '100')
    assert (result.returncode, result.stderr) == (
        2, 'RTNETLINK answers: Operation not permitted\n')
    assert _ip(tools_dir, 'link', 'set', 'dev', IFNAME, 'vf', '0', 'vlan',
               '100').returncode == 0
    assert fake_ip.vf_settings(tools_dir, IFNAME)[1]['vlan'] == 0
