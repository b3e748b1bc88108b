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

"""Options of the Huawei Ascend NPU driver ([huawei_ascend_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('huawei_ascend_driver', title='Huawei Ascend driver',
                     help='Huawei Ascend NPUs passed through whole.')

opts = pci_opts.pci_selection_opts(
    'CUSTOM_NPU', 'the NPUs',
    device_ids_help='PCI device ids of the NPUs to report (e.g. d801); '
                    'empty: every model the driver knows (310 d100, 310P '
                    'd500, 910 d801, 910B d802, 910 A3 d803). An unknown '
                    'id stops the agent at start.') + [
    cfg.BoolOpt('use_npu_smi', default=True,
                help='Also read the NPUs\' health from "npu-smi info" when '
                     'it is installed (NPUs on the host driver); without '
                     'it, health comes from sysfs only.'),
    cfg.FloatOpt('npu_smi_timeout', default=10.0, min=1.0,
                 help='Seconds each "npu-smi" call may take.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
