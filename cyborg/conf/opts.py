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

"""Lists every cyborg option for oslo-config-generator."""

import collections

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.accelerator.drivers.amd_gpu import opts as amd_gpu
from cyborg.conf import api
from cyborg.conf import bitstream_cache
from cyborg.conf import conductor
from cyborg.conf import default
from cyborg.accelerator.drivers.fake import opts as fake_driver
from cyborg.conf import glance
from cyborg.accelerator.drivers.ascend import opts as huawei_ascend_driver
from cyborg.accelerator.drivers.fpga import inspur_opts as inspur_fpga_driver
from cyborg.accelerator.drivers.ssd import opts as inspur_nvme_ssd_driver
from cyborg.accelerator.drivers.fpga import intel_opts as intel_fpga_driver
from cyborg.accelerator.drivers.nic import opts as intel_nic_driver
from cyborg.accelerator.drivers.qat import opts as intel_qat_driver
from cyborg.conf import nova
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_gpu
from cyborg.accelerator.drivers.pci import opts as pci_driver
from cyborg.conf import placement
from cyborg.conf import upgrade_levels
from cyborg.accelerator.drivers.fpga import xilinx_opts as xilinx_fpga_driver

_MODULES = (default, api, conductor, agent, fake_driver, placement, nova,
            upgrade_levels, intel_qat_driver, intel_nic_driver,
            inspur_nvme_ssd_driver, pci_driver, nvidia_gpu, amd_gpu,
            intel_fpga_driver, xilinx_fpga_driver, inspur_fpga_driver,
            huawei_ascend_driver, glance, bitstream_cache)


def list_opts():
    grouped = collections.OrderedDict()
    for module in _MODULES:
        for group, opts in module.list_opts().items():
            grouped.setdefault(group, []).extend(opts)
    return list(grouped.items())


def set_lib_defaults():
    """Defaults cyborg changes in the libraries it uses."""
    from oslo_middleware import cors
    from oslo_policy import opts as policy_opts

    cfg.set_defaults(cors.CORS_OPTS,
                     allow_headers=['X-Auth-Token',
                                    'X-OpenStack-Request-ID',
                                    'X-Identity-Status', 'X-Roles',
                                    'X-Service-Catalog', 'X-User-Id',
                                    'X-Project-Id',
                                    'OpenStack-API-Version'],
                     expose_headers=['X-Auth-Token',
                                     'X-OpenStack-Request-ID',
                                     'X-Subject-Token', 'X-Service-Token',
                                     'OpenStack-API-Version',
                                     'OpenStack-API-Minimum-Version',
                                     'OpenStack-API-Maximum-Version'],
                     allow_methods=['GET', 'PUT', 'POST', 'DELETE',
                                    'PATCH'])
    policy_opts.set_defaults(cfg.CONF, policy_file='policy.yaml',
                             enforce_scope=True, enforce_new_defaults=True)
