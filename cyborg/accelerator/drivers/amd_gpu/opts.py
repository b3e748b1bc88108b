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

"""Options of the AMD GPU driver ([amd_gpu])."""

from oslo_config import cfg

group = cfg.OptGroup(
    'amd_gpu', title='AMD GPU driver',
    help='Options of amd_gpu_driver, which reports AMD GPUs for '
         'passthrough (PGPU) and the virtual functions of MxGPU (SR-IOV) '
         'GPUs (VGPU).')

opts = [
    cfg.ListOpt('passthrough_drivers', default=['vfio-pci'],
                help='Host drivers a GPU without virtual functions may be '
                     'bound to and still be reported for passthrough. An '
                     'unbound GPU is always reported; a GPU bound to '
                     'another driver (amdgpu) is in use by the host and '
                     'not reported.'),
    cfg.ListOpt('vf_drivers', default=['vfio-pci'],
                help='Host drivers a virtual function of an MxGPU GPU may '
                     'be bound to and still be offered to instances; an '
                     'unbound one always is.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
