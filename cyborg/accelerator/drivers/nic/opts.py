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

"""Options of the SR-IOV NIC driver ([intel_nic_driver])."""

from oslo_config import cfg

group = cfg.OptGroup('intel_nic_driver', title='SR-IOV NIC driver',
                     help='Intel X710/XXV710/XL710 and E810, and NVIDIA '
                          '(Mellanox) ConnectX, network cards whose '
                          'virtual functions are passed through to '
                          'instances.')

opts = [
    cfg.ListOpt('physical_device_mappings', default=[],
                help='Physical network of each physical function, as '
                     '<physnet>:<interface> or <physnet>:<PCI address> '
                     '(e.g. physnet1:ens1f0,physnet2:0000:5e:00.0), as '
                     'the SR-IOV agent of Neutron maps them. A physical '
                     'function may be in one physical network only. '
                     'Addresses are safer: interface names can change '
                     'across reboots. Its virtual functions get the trait '
                     'CUSTOM_PHYSNET_<PHYSNET> and the physical network in '
                     'their attach information.'),
    cfg.ListOpt('device_ids', default=[],
                help='<vendor>:<device> ids of the physical functions to '
                     'report (e.g. 8086:1592,15b3:101d); empty: every card '
                     'the driver knows. An id that is not a known SR-IOV '
                     'physical function stops the agent at start.'),
    cfg.BoolOpt('mapped_only', default=False,
                help='Report only the physical functions that '
                     'physical_device_mappings maps to a physical '
                     'network.'),
    cfg.StrOpt('resource_class', default='CUSTOM_NIC',
               help='Placement resource class of the virtual functions.'),
    cfg.ListOpt('vf_drivers',
                default=['vfio-pci', 'iavf', 'i40evf', 'ixgbevf',
                         'mlx5_core'],
                help='Drivers a virtual function may be bound to when it '
                     'is bound to an instance (vfio-pci, or the host VF '
                     'driver libvirt detaches it from); an unbound VF is '
                     'always accepted. The bind of a VF on another driver '
                     'fails: something else holds it.'),
    cfg.ListOpt('vf_vlans', default=[],
                help='VLAN of the virtual functions of a physical network, '
                     'as <physnet>:<vlan id> (e.g. physnet1:100). At bind '
                     'the agent runs "ip link set dev <PF interface> vf '
                     '<N> vlan <id>" (the VF then sends and receives only '
                     'that VLAN, untagged in the guest); at unbind "vlan '
                     '0". Each physical network must be one of '
                     'physical_device_mappings. Needs the ip command '
                     '(iproute2).'),
    cfg.BoolOpt('vf_trust', default=False,
                help='Make each virtual function trusted at bind ("ip '
                     'link set dev <PF interface> vf <N> trust on": the '
                     'guest may change its MAC address and use promiscuous '
                     'mode) and untrusted again at unbind. Needs the ip '
                     'command (iproute2).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
