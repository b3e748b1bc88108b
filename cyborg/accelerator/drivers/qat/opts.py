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

"""Options of the Intel QuickAssist driver ([intel_qat_driver])."""

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts

group = cfg.OptGroup('intel_qat_driver', title='Intel QuickAssist driver',
                     help='Intel QAT physical functions whose virtual '
                          'functions are passed through to instances.')

opts = pci_opts.pci_selection_opts(
    'CUSTOM_QAT', 'the physical functions',
    provided='the virtual functions', empty='all of them',
    device_ids_help='PCI device ids of the QAT physical functions to '
                    'report (e.g. 4940,37c8); empty: every generation the '
                    'driver knows (dh895xcc 0435, C62x 37c8, C3xxx 19e2, '
                    '4xxx 4940, 401xx 4942, 402xx 4944, 420xx 4946). An '
                    'id that is not a QAT physical function stops the '
                    'agent at start.') + [
    cfg.ListOpt('vf_drivers', default=['vfio-pci', 'qat_vfio_pci'],
                help='Drivers a virtual function may be bound to and still '
                     'be given to an instance. Unbound virtual functions '
                     'are always offered; one bound to another driver (a '
                     'host driver such as c6xxvf) is in use by the host '
                     'and left out.'),
    cfg.BoolOpt('use_adf_ctl', default=True,
                help='Also read the devices\' state from "adf_ctl status" '
                     'when the command is installed (the out-of-tree QAT '
                     'driver); without it the state comes from sysfs '
                     'only.'),
    cfg.FloatOpt('adf_ctl_timeout', default=10.0, min=1.0,
                 help='Seconds "adf_ctl status" may take.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
