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

"""Options of the fake accelerator driver ([fake_driver])."""

from oslo_config import cfg

group = cfg.OptGroup('fake_driver', title='Fake accelerator driver',
                     help='A driver that reports simulated devices, for '
                          'development, tests and benchmarks.')

opts = [
    cfg.IntOpt('num_devices', default=1, min=0,
               help='Number of simulated devices.'),
    cfg.StrOpt('device_type', default='FPGA',
               choices=['GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD'],
               help='Device type of the simulated devices.'),
    cfg.StrOpt('resource_class', default='FPGA',
               help='Placement resource class of each device.'),
    cfg.ListOpt('traits', default=['CUSTOM_FAKE_DEVICE'],
                help='Traits of each device.'),
    cfg.IntOpt('accelerators_per_device', default=4, min=1, max=64,
               help='Accelerators (and attach handles) per device.'),
    cfg.StrOpt('handle_type', default='TEST_PCI',
               choices=['PCI', 'MDEV', 'TEST_PCI'],
               help='Attach handle type. TEST_PCI handles are ignored by '
                    'Nova; PCI and MDEV look like real ones.'),
    cfg.StrOpt('preparation',
               choices=['none', 'mdev', 'vf', 'vgpu_type', 'program'],
               help='Preparation each device\'s deployable declares (what '
                    'the agent does to a handle at bind and undoes at '
                    'unbind); unset: the default of its handles (mdev for '
                    'MDEV handles, none for others).'),
    cfg.IntOpt('children_per_device', default=0, min=0, max=16,
               help='Nested report: each device\'s deployable holds this '
                    'many child deployables (as a PF holds VFs), each with '
                    'the handles of accelerators_per_device, the parent '
                    'none; 0: one deployable per device, not nested.'),
    cfg.StrOpt('mdev_type', default='fake-mdev-1',
               help='mdev type of MDEV attach handles.'),
    cfg.StrOpt('mdev_dir',
               help='Directory where the handles the driver prepares '
                    '(the mdevs of MDEV handles, and the handles of '
                    'deployables declaring another preparation) appear, '
                    'one file per handle named by its uuid (as '
                    '/sys/bus/mdev/devices would show mdevs); unset: they '
                    'are only logged.'),
    cfg.FloatOpt('prepare_delay', default=0.0, min=0.0, mutable=True,
                 help='Seconds preparing an MDEV handle takes (to simulate '
                      'slow mdev creation).'),
    cfg.FloatOpt('discover_delay', default=0.0, min=0.0, mutable=True,
                 help='Seconds each discovery takes (to simulate a slow '
                      'vendor tool).'),
    cfg.ListOpt('prepare_failures', default=[], mutable=True,
                help='PCI addresses of devices whose attach handles fail to '
                     'prepare (the driver raises, as when an mdev cannot be '
                     'created); "*" makes every preparation fail. Only '
                     'handles that need preparation (MDEV, or any handle of '
                     'a deployable declaring a preparation) are affected. '
                     'For tests of failed binds.'),
    cfg.ListOpt('program_failures', default=[], mutable=True,
                help='PCI addresses of devices that fail to be programmed '
                     '(the driver raises, as when a bitstream is refused); '
                     '"*" makes every programming fail. For tests of failed '
                     'binds.'),
    cfg.StrOpt('vendor', default='0xABCD', help='Vendor id reported.'),
    cfg.StrOpt('model', default='Fake Accelerator', help='Model reported.'),
    cfg.ListOpt('unhealthy_devices', default=[], mutable=True,
                help='Addresses of devices reported unhealthy.'),
    cfg.StrOpt('devices_file',
               help='JSON file describing the devices; when it exists it '
                    'replaces the options above and is re-read at every '
                    'discovery. A list of objects with "address" and '
                    'optionally "type", "resource_class", "traits", '
                    '"accelerators", "handle_type", "preparation", '
                    '"children", "health", "taints" (driver taints in '
                    'their wire form), "signals" (health signal names '
                    'given at every discovery, e.g. ["xid.48"], judged by '
                    'the [remediation] catalog) and "reset" ("ok" or '
                    '"fail": what a reset of the device does).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
