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

"""The message cyborg-all-in-one prints once it is ready.

Every command it shows runs as printed, in another shell, against the
running all-in-one: its endpoints and state directory, the ``openstack``
of this installation, the device profile groups of the demo hardware in
the client's ``--group`` form, and the ids of the demo bitstreams in the
local Glance.
"""

import dataclasses
import os
import shlex
import sys

from cyborg.allinone import demo_host

#: The first line: tests and scripts wait for it.
RUNNING = 'Cyborg all-in-one is running.'

#: The microversion the client needs to show a device profile by name.
PROFILE_BY_NAME_VERSION = '2.2'


@dataclasses.dataclass(frozen=True)
class Endpoints:
    api: str
    placement: str
    state_dir: str
    glance: str | None = None
    #: ``/metrics`` of the conductor and the agent ([metrics]), if on.
    conductor_metrics: str | None = None
    agent_metrics: str | None = None


def client_path() -> str:
    """The directory of this installation's ``openstack`` (the
    virtualenv's bin), or '' when it is not installed next to cyborg."""
    bin_dir = os.path.dirname(sys.executable)
    if os.access(os.path.join(bin_dir, 'openstack'), os.X_OK):
        return bin_dir
    return ''


def _client_lines(endpoints: Endpoints) -> list[str]:
    bin_dir = client_path()
    if bin_dir:
        lines = ['  export PATH=%s:"$PATH"' % shlex.quote(bin_dir)]
    else:
        lines = ['  # pip install python-openstackclient first']
    return lines + ['  export OS_AUTH_TYPE=none OS_ENDPOINT=%s'
                    % endpoints.api]


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` as aligned columns (the last one left as it is)."""
    widths = [max(len(row[i]) for row in rows)
              for i in range(len(rows[0]) - 1)]
    return ['  ' + '  '.join([cell.ljust(width) for cell, width
                              in zip(row[:-1], widths, strict=True)]
                             + [row[-1]]).rstrip()
            for row in rows]


def demo_groups() -> list[tuple[str, str, str]]:
    """(address, device, ``--group`` value) of each demo device."""
    return [
        (demo_host.DEMO_PGPU, 'NVIDIA Tesla T4, passthrough',
         'resources:PGPU=1'),
        (demo_host.DEMO_VGPU_PARENT, 'NVIDIA Tesla T4, %d vGPUs %s'
         % (demo_host.DEMO_VGPU_COUNT, demo_host.DEMO_VGPU_TYPE),
         'resources:VGPU=1,trait:%s=required' % demo_host.DEMO_VGPU_TRAIT),
        (demo_host.DEMO_QAT_PF, 'Intel QAT 4xxx, %d VFs'
         % len(demo_host.DEMO_QAT_VFS), 'resources:CUSTOM_QAT=1'),
        (demo_host.DEMO_NIC_PF, 'Intel E810, %d VFs, %s VLAN %d'
         % (len(demo_host.DEMO_NIC_VFS), demo_host.DEMO_PHYSNET,
            demo_host.DEMO_VLAN),
         'resources:CUSTOM_NIC=1,trait:%s=required'
         % demo_host.DEMO_PHYSNET_TRAIT),
        (demo_host.DEMO_FPGA_PF, 'Intel FPGA N6000, programmed at bind',
         'resources:FPGA=1,accel:function_name=gzip  (or aes)'),
    ]


def _fake_examples(endpoints: Endpoints) -> list[str]:
    return [
        '  openstack accelerator device profile create try-fpga \\',
        '      --group resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required',
        '  openstack accelerator device profile list',
        '  openstack --os-accelerator-api-version %s accelerator device '
        'profile show try-fpga' % PROFILE_BY_NAME_VERSION,
        '  openstack accelerator arq create try-fpga',
        '',
        'Ask Placement where such a profile fits:',
        '',
        "  curl -s -H 'X-Auth-Token: admin' \\",
        "      -H 'OpenStack-API-Version: placement 1.26' \\",
        "      '%s/allocation_candidates?resources=FPGA:1"
        "&required=CUSTOM_FAKE_DEVICE'" % endpoints.placement,
    ]


def _demo_examples(endpoints: Endpoints, root: str, images) -> list[str]:
    lines = [
        '  openstack accelerator device profile create try-qat \\',
        '      --group resources:CUSTOM_QAT=1',
        '  openstack accelerator arq create try-qat',
        '',
        'The demo hardware (fake, in %s; a thread stands in for the '
        'kernel' % root,
        'and makes the vGPUs the driver creates), and the device profile '
        'group',
        'that asks for each:',
        '',
    ]
    lines += _table([('Address', 'Device', '--group')] + demo_groups())
    if images is not None:
        lines += ['', 'The FPGA bitstreams in the local Glance (%s):'
                  % endpoints.glance, '']
        lines += _table([('Image id', 'Name', 'Function')] + [
            (image_id, record['name'],
             record.get('function_name', ''))
            for image_id, record in sorted(images.images.items(),
                                           key=lambda i: i[1]['name'])])
    lines += [
        '',
        'Ask Placement where a QAT VF fits:',
        '',
        "  curl -s -H 'X-Auth-Token: admin' \\",
        "      -H 'OpenStack-API-Version: placement 1.26' \\",
        "      '%s/allocation_candidates?resources=CUSTOM_QAT:1'"
        % endpoints.placement,
    ]
    return lines


NOVA_NOTE = [
    '`openstack accelerator arq bind` looks the instance up in Nova, and',
    '`arq unbind` and deleting a bound ARQ need a service token: without',
    'Nova, send the requests Nova sends with curl (README.md, "The Nova',
    'flow"). `deployable program DEPLOYABLE IMAGE` finds its image in the',
    'local Glance (with --demo-hardware or --bitstream-dir; with',
    '--glance-url URL, set OS_IMAGE_ENDPOINT_OVERRIDE=URL).',
]


def ready(endpoints: Endpoints, kernel: demo_host.DemoKernel | None = None,
          images=None) -> str:
    """The ready message: endpoints, then commands to try; ``kernel`` is
    the demo hardware's, ``images`` the local Glance stand-in
    (:class:`cyborg.allinone.local_images.ImageServer`)."""
    lines = [RUNNING, '',
             '  API:        %s' % endpoints.api,
             '  Placement:  %s  (X-Auth-Token: admin)' % endpoints.placement]
    if endpoints.glance:
        lines.append('  Glance:     %s  (local, read-only: FPGA '
                     'bitstreams)' % endpoints.glance)
    if endpoints.conductor_metrics:
        lines.append('  Metrics:    %s (conductor), %s (agent)' % (
            endpoints.conductor_metrics, endpoints.agent_metrics))
    lines += ['  State:      %s' % endpoints.state_dir, '',
              'In another shell, use the OpenStack client (no Keystone: '
              'you act as an',
              'administrator):', '']
    lines += _client_lines(endpoints)
    lines.append('  openstack accelerator device list')
    if kernel is None:
        lines += _fake_examples(endpoints)
    else:
        lines += _demo_examples(endpoints, kernel.tree.root, images)
    lines += [''] + NOVA_NOTE + ['', 'Press Ctrl-C to stop.', '']
    return '\n'.join(lines)
