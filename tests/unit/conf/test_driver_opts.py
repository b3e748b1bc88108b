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

"""Drivers' option groups, found through their entry points."""

from oslo_config import cfg
import pytest

from cyborg.conf import driver_opts
from cyborg.conf import opts

GROUPS = {'fake_driver', 'intel_qat_driver', 'intel_nic_driver',
          'inspur_nvme_ssd_driver', 'pci_driver', 'nvidia_gpu', 'amd_gpu',
          'intel_fpga_driver', 'xilinx_fpga_driver', 'inspur_fpga_driver',
          'huawei_ascend_driver'}


def test_every_drivers_group_is_found():
    names = [group.name for group, _opts in driver_opts.driver_opts()]
    assert sorted(names) == sorted(GROUPS)  # each once


def test_registration_makes_the_groups_readable():
    conf = cfg.ConfigOpts()
    driver_opts.register_driver_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    assert conf.fake_driver.num_devices == 1
    assert conf.intel_qat_driver.resource_class == 'CUSTOM_QAT'
    assert conf.nvidia_gpu.enabled_vgpu_types == []


def test_the_sample_configuration_lists_them_once():
    names = [group if isinstance(group, str) else group.name
             for group, _opts in opts.list_opts()]
    assert len(names) == len(set(names))
    assert GROUPS <= set(names)


def test_options_that_cannot_be_loaded_fail_loudly():
    with pytest.raises(ImportError):
        driver_opts._load_failed(None, None, ImportError('broken'))
