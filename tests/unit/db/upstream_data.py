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

"""The rows of the upstream databases the import is tested on.

:func:`good`: two hosts, every ARQ state, bound and leaked handles, a
device with two control path ids, a deployable without a provider, a
duplicate attribute, quota rows; everything importable.
:func:`bad`: the same plus rows the import cannot take (JSON that is
not, a profile without groups, two devices at one address, two ARQs
on one handle).
"""

import datetime
import json
import uuid

OLD = datetime.datetime(2024, 1, 1, 12, 0, 0)
NEW = datetime.datetime(2024, 6, 1, 12, 0, 0)


def u(number: int) -> str:
    """A readable uuid."""
    return '00000000-0000-4000-8000-%012d' % number


def rp(name: str) -> str:
    """Upstream's provider uuid of a deployable."""
    return str(uuid.uuid3(uuid.NAMESPACE_DNS, name))


def _pci(bus: str, device: str = '00', function: str = '0',
         domain: str = '0000', spaced: bool = False) -> str:
    info = {'domain': domain, 'bus': bus, 'device': device,
            'function': function}
    return json.dumps(info) if spaced else json.dumps(info,
                                                      separators=(',', ':'))


def _row(number: int, **values):
    return dict(id=number, created_at=OLD, updated_at=None, **values)


def good() -> dict[str, list[dict]]:
    rows = {
        'device_profiles': [
            _row(1, uuid=u(1), name='fpga-profile', description=None,
                 profile_json=json.dumps({'groups': [{
                     'resources:FPGA': '1',
                     'trait:CUSTOM_FPGA_INTEL': 'required'}]})),
            _row(2, uuid=u(2), name='gpu-profile', description='GPUs',
                 profile_json=json.dumps({'groups': [
                     {'resources:PGPU': '1'}, {'resources:PGPU': '1'}]})),
        ],
        'devices': [
            _row(1, uuid=u(11), type='FPGA', vendor='8086', model='PAC',
                 std_board_info='{"class": "Fake"}',
                 vendor_board_info='fake_vendor_info', hostname='host-a',
                 status='enabled'),
            _row(2, uuid=u(12), type='GPU', vendor='10de', model='T4',
                 std_board_info=None, vendor_board_info=None,
                 hostname='host-b', status='maintaining'),
            _row(3, uuid=u(13), type='FPGA', vendor='8086', model='N3000',
                 std_board_info=None, vendor_board_info=None,
                 hostname='host-a', status='enabled'),
        ],
        'controlpath_ids': [
            _row(1, uuid=u(21), device_id=1, cpid_type='PCI',
                 cpid_info=_pci('5e', spaced=True)),
            # Upper case and unpadded, as some drivers write it.
            _row(2, uuid=u(22), device_id=2, cpid_type='PCI',
                 cpid_info=_pci('AF', device='0')),
            # Two functions: the device's address is the lowest.
            _row(3, uuid=u(23), device_id=3, cpid_type='PCI',
                 cpid_info=_pci('d8', function='1')),
            _row(4, uuid=u(24), device_id=3, cpid_type='PCI',
                 cpid_info=_pci('d8')),
        ],
        'deployables': [
            _row(1, uuid=u(31), name='host-a_5e', num_accelerators=4,
                 device_id=1, rp_uuid=rp('host-a_5e'), driver_name='intel',
                 bitstream_id=u(99), parent_id=None, root_id=None),
            _row(2, uuid=u(32), name='host-b_af', num_accelerators=2,
                 device_id=2, rp_uuid=rp('host-b_af'), driver_name='nvidia',
                 bitstream_id=None, parent_id=None, root_id=None),
            _row(3, uuid=u(33), name='host-a_d8', num_accelerators=2,
                 device_id=3, rp_uuid=rp('host-a_d8'), driver_name='intel',
                 bitstream_id=None, parent_id=None, root_id=None),
            _row(4, uuid=u(34), name='host-a_d8_sub', num_accelerators=0,
                 device_id=3, rp_uuid=None, driver_name=None,
                 bitstream_id=None, parent_id=None, root_id=None),
        ],
        'attributes': [
            _row(1, uuid=u(41), deployable_id=1, key='rc', value='FPGA'),
            _row(2, uuid=u(42), deployable_id=1, key='trait0',
                 value='CUSTOM_FPGA_INTEL'),
            # The same key again, newer: kept.
            dict(_row(3, uuid=u(43), deployable_id=1, key='trait0',
                      value='CUSTOM_FPGA_INTEL_PAC'), created_at=NEW),
            _row(4, uuid=u(44), deployable_id=2, key='rc', value='PGPU'),
            _row(5, uuid=u(45), deployable_id=3, key='rc', value='FPGA'),
        ],
        'attach_handles': [
            _row(1, uuid=u(51), deployable_id=1, cpid_id=1, in_use=True,
                 attach_type='PCI', attach_info=_pci('5e', function='1',
                                                     spaced=True)),
            _row(2, uuid=u(52), deployable_id=1, cpid_id=1, in_use=True,
                 attach_type='PCI', attach_info=_pci('5e', function='2')),
            _row(3, uuid=u(53), deployable_id=1, cpid_id=1, in_use=True,
                 attach_type='PCI', attach_info=_pci('5e', function='3')),
            # In use, held by no ARQ (leaked by upstream).
            _row(4, uuid=u(54), deployable_id=1, cpid_id=1, in_use=True,
                 attach_type='PCI', attach_info=_pci('5e', function='4')),
            _row(5, uuid=u(55), deployable_id=2, cpid_id=2, in_use=True,
                 attach_type='PCI', attach_info=_pci('af')),
            _row(6, uuid=u(56), deployable_id=2, cpid_id=2, in_use=False,
                 attach_type='PCI', attach_info=_pci('af', function='1')),
            # Held by a Bound ARQ but not marked in use.
            _row(7, uuid=u(57), deployable_id=3, cpid_id=4, in_use=False,
                 attach_type='MDEV', attach_info=json.dumps(
                     {'asked_type': 'i915-GVTg_V5_4', 'bus': 'd8',
                      'domain': '0000', 'device': '00', 'function': '0',
                      'vgpu_mark': 'i915-GVTg_V5_4_0'})),
            _row(8, uuid=u(58), deployable_id=3, cpid_id=4, in_use=False,
                 attach_type='TEST_PCI', attach_info=_pci('d8',
                                                          function='2')),
        ],
        'extended_accelerator_requests': [
            _arq(1, 'Initial', 1),
            _arq(2, 'BindStarted', 1, host='host-a', deployable=1,
                 handle=2, instance=71),
            _arq(3, 'Bound', 1, host='host-a', deployable=1, handle=1,
                 instance=72),
            dict(_arq(4, 'Bound', 2, host='host-b', deployable=2, handle=5,
                      instance=73, group=1), project_id=None),
            _arq(5, 'BindFailed', 2, host='host-b', deployable=2,
                 instance=74),
            # Unbound, still holding a handle.
            _arq(6, 'Unbound', 1, handle=3, deployable=1),
            _arq(7, 'Bound', 1, host='host-a', deployable=3, handle=7,
                 instance=75),
            _arq(8, 'Deleting', 2),
            # Mid-bind without an instance: no event.
            _arq(9, 'BindStarted', 2, host='host-b', deployable=2),
        ],
        'quota_usages': [
            dict(id=1, created_at=OLD, updated_at=None, project_id='p1',
                 user_id='u1', resource='FPGA', in_use=1, reserved=0,
                 until_refresh=None),
            dict(id=2, created_at=OLD, updated_at=None, project_id='p2',
                 user_id='u2', resource='GPU', in_use=0, reserved=1,
                 until_refresh=None),
        ],
        'reservations': [
            dict(id=1, created_at=OLD, updated_at=None, uuid=u(81),
                 usage_id=2, project_id='p2', user_id='u2', resource='GPU',
                 delta=1, expire=None),
        ],
    }
    return rows


#: The deployable uuid of each upstream deployable id in :func:`good`.
DEPLOYABLE_RP = {1: rp('host-a_5e'), 2: rp('host-b_af'), 3: rp('host-a_d8')}


def _arq(number: int, state: str, profile: int, host: str | None = None,
         deployable: int | None = None, handle: int | None = None,
         instance: int | None = None, group: int = 0) -> dict:
    return _row(number, uuid=u(60 + number), project_id='proj-1',
                state=state, device_profile_id=profile,
                device_profile_group_id=group, hostname=host,
                device_rp_uuid=(DEPLOYABLE_RP[deployable]
                                if deployable and host else None),
                instance_uuid=u(instance) if instance else None,
                attach_handle_id=handle, substate='Initial',
                deployable_id=deployable)


def bad() -> dict[str, list[dict]]:
    rows = good()
    rows['device_profiles'].append(
        _row(3, uuid=u(3), name='no-groups', description=None,
             profile_json='{"group": []}'))
    rows['devices'] += [
        _row(4, uuid=u(14), type='FPGA', vendor='8086', model='PAC',
             std_board_info=None, vendor_board_info=None, hostname='host-c',
             status='enabled'),
        # At the address of device 1 on the same host.
        _row(5, uuid=u(15), type='FPGA', vendor='8086', model='PAC',
             std_board_info=None, vendor_board_info=None, hostname='host-a',
             status='enabled'),
    ]
    rows['controlpath_ids'] += [
        _row(5, uuid=u(25), device_id=4, cpid_type='PCI',
             cpid_info='0000:3b:00.0'),
        _row(6, uuid=u(26), device_id=5, cpid_type='PCI',
             cpid_info=_pci('5e')),
    ]
    rows['deployables'].append(
        _row(5, uuid=u(35), name='host-a_5e_again', num_accelerators=1,
             device_id=5, rp_uuid=rp('host-a_5e_again'), driver_name='intel',
             bitstream_id=None, parent_id=None, root_id=None))
    rows['attach_handles'].append(
        _row(9, uuid=u(59), deployable_id=5, cpid_id=6, in_use=False,
             attach_type='PCI', attach_info='{"domain": "0000", "bus"'))
    # A second Bound ARQ on the handle of ARQ 3.
    rows['extended_accelerator_requests'].append(
        _arq(10, 'Bound', 1, host='host-a', deployable=1, handle=1,
             instance=76))
    return rows
