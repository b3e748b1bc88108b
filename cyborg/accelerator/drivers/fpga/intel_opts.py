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

"""Options of the Intel FPGA driver ([intel_fpga_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('intel_fpga_driver', title='Intel FPGA driver',
                     help='Intel FPGA cards (PAC, OFS/Agilex, Silicom '
                          'N5010) under the kernel\'s DFL driver.')

opts = pci_opts.pci_selection_opts(
    'FPGA', 'the cards (their physical functions)',
    provided='the FPGA regions', empty='every card found',
    addresses_note=pci_opts.ADDRESS_CHECKED) + [
    cfg.FloatOpt('fpgaconf_timeout', default=300.0, min=1.0,
                 help='Seconds "fpgaconf" may take to program a region.'),
    cfg.BoolOpt('fpgaconf_segment', default=True,
                help='Pass the PCI segment (domain) to "fpgaconf" '
                     '(--segment, OPAE 1.4 and later). Without it, cards '
                     'outside segment 0000 cannot be programmed.'),
    cfg.BoolOpt('use_fpgainfo', default=True,
                help='Also check the cards with "fpgainfo fme" when the '
                     'OPAE tools are installed: a card the tool does not '
                     'list, or lists with another PR interface id, is '
                     'unhealthy.'),
    cfg.FloatOpt('fpgainfo_timeout', default=10.0, min=1.0,
                 help='Seconds "fpgainfo fme" may take.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
