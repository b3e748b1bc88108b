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

"""Options of the NVMe SSD driver ([inspur_nvme_ssd_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('inspur_nvme_ssd_driver', title='NVMe SSD driver',
                     help='NVMe controllers passed through whole to '
                          'instances. The controller of a mounted or '
                          'otherwise used disk (the boot disk) is never '
                          'reported.')

opts = [
    cfg.ListOpt('vendor_ids', default=['1bd4'],
                help='PCI vendor ids of the NVMe controllers to report: '
                     'Inspur (1bd4) by default; add others, e.g. Huawei '
                     '(19e5) for the ES3000.'),
] + pci_opts.pci_selection_opts(
    'CUSTOM_SSD', 'the controllers',
    empty='every controller of the vendors above that is not in use')


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
