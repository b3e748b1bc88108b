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

"""Options of the Xilinx Alveo driver ([xilinx_fpga_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('xilinx_fpga_driver', title='Xilinx Alveo driver',
                     help='Xilinx/AMD Alveo cards under XRT: the user '
                          'function is given to instances, the management '
                          'function stays on the host.')

opts = pci_opts.pci_selection_opts(
    'FPGA', 'the cards\' management functions (xclmgmt, function 0)',
    provided='the cards', empty='every card',
    addresses_note=pci_opts.ADDRESS_CHECKED) + [
    cfg.ListOpt('user_drivers', default=['xocl', 'vfio-pci'],
                help='Drivers the user function may be bound to and still '
                     'be offered (unbound ones are offered too; libvirt '
                     'moves it to vfio-pci when it attaches it).'),
    cfg.FloatOpt('xbutil_timeout', default=300.0, min=1.0,
                 help='Seconds "xbutil program" may take to load an '
                      'xclbin.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
