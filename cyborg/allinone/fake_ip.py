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
# under the License.

"""A fake ``ip`` for the virtual functions of network cards: what
``ip link set dev IF vf N [vlan V] [trust on|off]`` sets, shown again by
``ip link show dev IF`` as iproute2 prints it.

Used by the all-in-one's demo host and the fixture hosts; never by a
driver. As with a real card, the settings are runtime state: they live in
``<tools_dir>/.runtime`` (:data:`RUNTIME_DIR`), which
:meth:`~cyborg.allinone.host_tree.HostTree.reboot` wipes, so a rebooted
host's VFs are back in no VLAN and untrusted. What does not change with a
reboot (each interface's MAC address and VF count, and the VFs the card
refuses to configure: :func:`refuse_vf`) is kept beside the tool.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from typing import Any

#: Where fake tools keep runtime state (wiped by a host's reboot).
RUNTIME_DIR = '.runtime'
_LINKS = '.ip-links.json'
_VFS = 'ip-vfs.json'
#: What a VF is set to after a boot.
_BOOT = {'vlan': 0, 'trust': False}


def write_ip(tools_dir: str, links: dict[str, tuple[str, int]]) -> str:
    """Write the fake ``ip`` of the interfaces ``links`` (``{ifname:
    (MAC address, number of VFs)}``), every VF as after a boot; its
    path."""
    # Here, not at the top: the fake ``ip`` loads this module alone, with
    # the standard library only (see fake_tools._SCRIPT).
    from cyborg.allinone import fake_tools
    os.makedirs(tools_dir, exist_ok=True)
    _write(os.path.join(tools_dir, _LINKS), {
        ifname: {'mac': mac, 'vfs': count, 'refused': []}
        for ifname, (mac, count) in links.items()})
    return fake_tools.write_tool(tools_dir, 'ip', {},
                                 (__name__, 'main', tools_dir))


def refuse_vf(tools_dir: str, ifname: str, index: int) -> None:
    """From now on the card refuses to configure VF ``index`` of
    ``ifname`` (as a failing card or firmware answers)."""
    with _locked(tools_dir):
        links = _read(os.path.join(tools_dir, _LINKS))
        links[ifname]['refused'].append(index)
        _write(os.path.join(tools_dir, _LINKS), links)


def vf_settings(tools_dir: str, ifname: str) -> dict[int, dict[str, Any]]:
    """Each VF of ``ifname``: ``{'vlan': int, 'trust': bool}``."""
    links = _read(os.path.join(tools_dir, _LINKS))
    settings = _read(_vfs_path(tools_dir)).get(ifname, {})
    return {index: dict(_BOOT, **settings.get(str(index), {}))
            for index in range(links[ifname]['vfs'])}


def show(tools_dir: str, ifname: str) -> str:
    """What ``ip link show dev <ifname>`` prints (iproute2 5.x)."""
    links = _read(os.path.join(tools_dir, _LINKS))
    index = sorted(links).index(ifname) + 2  # after lo
    lines = ['%d: %s: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq '
             'state UP mode DEFAULT group default qlen 1000'
             % (index, ifname),
             '    link/ether %s brd ff:ff:ff:ff:ff:ff'
             % links[ifname]['mac']]
    for vf, setting in vf_settings(tools_dir, ifname).items():
        vlan = ', vlan %d' % setting['vlan'] if setting['vlan'] else ''
        trust = 'on' if setting['trust'] else 'off'
        lines.append('    vf %d     link/ether 00:00:00:00:00:00 brd '
                     'ff:ff:ff:ff:ff:ff%s, spoof checking on, link-state '
                     'auto, trust %s' % (vf, vlan, trust))
    return '\n'.join(lines) + '\n'


def main(tools_dir: str, argv: list[str]) -> int:
    """The command line: ``link show dev IF`` or ``link set dev IF vf N
    ...``; anything else is refused as unknown (exit status 2)."""
    links = _read(os.path.join(tools_dir, _LINKS))
    if argv[:3] in (['link', 'show', 'dev'], ['link', 'set', 'dev']) \
            and len(argv) > 3 and argv[3] not in links:
        sys.stderr.write('Cannot find device "%s"\n' % argv[3])
        return 1
    if argv[:3] == ['link', 'show', 'dev'] and len(argv) == 4:
        sys.stdout.write(show(tools_dir, argv[3]))
        return 0
    if argv[:3] == ['link', 'set', 'dev'] and argv[4:5] == ['vf']:
        return _set_vf(tools_dir, links[argv[3]], argv[3], argv[5:])
    sys.stderr.write('ip: unknown arguments: %s\n' % ' '.join(argv))
    return 2


def _set_vf(tools_dir: str, link: dict[str, Any], ifname: str,
            args: list[str]) -> int:
    try:
        index = int(args[0])
        changes = _parse_settings(args[1:])
    except (IndexError, ValueError):
        sys.stderr.write('ip: unknown arguments: vf %s\n' % ' '.join(args))
        return 2
    if not 0 <= index < link['vfs'] or index in link['refused']:
        # What the kernel answers for a VF it has not, or will not set.
        sys.stderr.write('RTNETLINK answers: %s\n' % (
            'Operation not permitted' if index in link['refused']
            else 'Invalid argument'))
        return 2
    with _locked(tools_dir):
        state = _read(_vfs_path(tools_dir))
        state.setdefault(ifname, {}).setdefault(str(index), {}).update(
            changes)
        os.makedirs(os.path.join(tools_dir, RUNTIME_DIR), exist_ok=True)
        _write(_vfs_path(tools_dir), state)
    return 0


def _parse_settings(args: list[str]) -> dict[str, Any]:
    """``vlan V`` and ``trust on|off`` pairs; ValueError otherwise."""
    if len(args) % 2:
        raise ValueError(args)
    changes: dict[str, Any] = {}
    for name, value in zip(args[::2], args[1::2], strict=True):
        if name == 'vlan' and value.isdigit() and int(value) <= 4094:
            changes['vlan'] = int(value)
        elif name == 'trust' and value in ('on', 'off'):
            changes['trust'] = value == 'on'
        else:
            raise ValueError(name)
    return changes


def _vfs_path(tools_dir: str) -> str:
    return os.path.join(tools_dir, RUNTIME_DIR, _VFS)


@contextlib.contextmanager
def _locked(tools_dir: str):
    # Agents' binds run concurrently: one writer of the files at a time.
    with open(os.path.join(tools_dir, '.ip.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _write(path: str, data: dict[str, Any]) -> None:
    # Written whole, then renamed: a reader never sees half a file.
    temporary = path + '.tmp'
    with open(temporary, 'w') as f:
        json.dump(data, f, sort_keys=True)
    os.replace(temporary, path)
