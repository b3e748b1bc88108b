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

import importlib
import inspect

import pytest

from cyborg.domain import resource_names as names


@pytest.mark.parametrize(
    'text, expected',
    [('fpga', 'FPGA'), (' custom-a-b ', 'CUSTOM_A_B'), ('VGPU', 'VGPU')],
)
def test_normalize(text, expected):
    assert names.normalize(text) == expected


@pytest.mark.parametrize(
    'text, expected',
    [
        ('intel fpga.v2', 'CUSTOM_INTEL_FPGA_V2'),
        ('CUSTOM_X', 'CUSTOM_X'),
        ('custom-x', 'CUSTOM_X'),
    ],
)
def test_custom_name(text, expected):
    assert names.custom_name(text) == expected


@pytest.mark.parametrize(
    'name, valid',
    [
        ('FPGA', True),
        ('PGPU', True),
        ('VGPU', True),
        ('CUSTOM_QAT', True),
        ('CUSTOM_', False),
        ('QAT', False),
        ('custom_x', False),
        ('CUSTOM_A-B', False),
    ],
)
def test_resource_class(name, valid):
    assert names.is_valid_resource_class(name) is valid


@pytest.mark.parametrize(
    'name, valid',
    [
        ('HW_CPU_X86_AVX2', True),
        ('CUSTOM_FPGA_INTEL', True),
        ('OWNER_CYBORG', True),
        ('HW_NOPE', False),
        ('CUSTOM_a', False),
    ],
)
def test_trait(name, valid):
    assert names.is_valid_trait(name) is valid


@pytest.mark.parametrize(
    'name, standard',
    [('FPGA', True), ('PGPU', True), ('CUSTOM_FPGA', False),
     ('fpga', False), ('NOT_A_CLASS', False)],
)
def test_standard_resource_class(name, standard):
    assert names.is_standard_resource_class(name) is standard


@pytest.mark.parametrize(
    'name, standard',
    [('HW_CPU_X86_AVX2', True), ('COMPUTE_STATUS_DISABLED', True),
     ('OWNER_CYBORG', True), ('CUSTOM_FPGA_INTEL', False),
     ('hw_cpu_x86_avx2', False)],
)
def test_standard_trait(name, standard):
    assert names.is_standard_trait(name) is standard


@pytest.mark.parametrize('module', [
    'cyborg.clients.placement', 'cyborg.accelerator.drivers.pci.device_spec'])
def test_standard_names_are_decided_only_here(module):
    """The Placement client and the PCI device spec ask this module
    whether a name is standard; neither reads os-traits or
    os-resource-classes itself."""
    source = inspect.getsource(importlib.import_module(module))
    assert 'os_traits' not in source
    assert 'os_resource_classes' not in source
