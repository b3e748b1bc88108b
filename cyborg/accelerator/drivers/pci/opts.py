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

"""Options of the generic PCI passthrough driver ([pci_driver])."""

from oslo_config import cfg

group = cfg.OptGroup('pci_driver', title='Generic PCI passthrough driver',
                     help='PCI functions passed through whole, chosen the '
                          'way Nova\'s [pci] device_spec chooses them.')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='Which PCI functions to report: a JSON object, or '
                         'a list of them, per value, with "vendor_id", '
                         '"product_id" (4 hex digits or "*"), "address" (a '
                         'glob such as "*:3b:00.*", or an object of '
                         'regular expressions per "domain", "bus", "slot" '
                         'and "function"), and what to report: '
                         '"resource_class" (default '
                         'CUSTOM_PCI_<VENDOR>_<PRODUCT>), "traits" '
                         '(comma-separated) and "device_type". A function '
                         'takes the first spec it matches. A spec that '
                         'cannot be read, an unknown key, an invalid '
                         'resource class or trait, or specs that match a '
                         'physical function and its virtual functions, '
                         'stop the agent at start.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
