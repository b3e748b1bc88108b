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

"""Options of the Inspur FPGA driver ([inspur_fpga_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('inspur_fpga_driver', title='Inspur FPGA driver',
                     help='Inspur FPGA cards (vendor 1bd4, processing '
                          'accelerators) passed through whole.')

opts = pci_opts.pci_selection_opts(
    'FPGA', 'the cards',
    device_ids_help='PCI device ids of the cards to report (e.g. 0911); '
                    'empty: every Inspur processing accelerator. Inspur '
                    'NVMe drives are never reported.')


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
