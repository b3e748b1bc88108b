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

from oslo_config import cfg

from cyborg.accelerator.drivers import pci_opts


def _by_name(opts):
    return {opt.name: opt for opt in opts}


def test_the_block_is_addresses_and_resource_class_in_that_order():
    opts = pci_opts.pci_selection_opts('CUSTOM_NPU', 'the NPUs')
    assert [opt.name for opt in opts] == ['addresses', 'resource_class']
    found = _by_name(opts)
    assert isinstance(found['addresses'], cfg.ListOpt)
    assert found['addresses'].default == []
    assert found['addresses'].help == ('PCI addresses of the NPUs to '
                                       'report; empty: all.')
    assert found['resource_class'].default == 'CUSTOM_NPU'
    assert found['resource_class'].help == ('Placement resource class of '
                                            'the NPUs.')


def test_device_ids_come_first_when_the_driver_has_them():
    opts = pci_opts.pci_selection_opts('FPGA', 'the cards',
                                       device_ids_help='Ids.')
    assert [opt.name for opt in opts] == ['device_ids', 'addresses',
                                          'resource_class']
    assert opts[0].default == [] and opts[0].help == 'Ids.'


def test_what_is_provided_empty_and_note_shape_the_help():
    found = _by_name(pci_opts.pci_selection_opts(
        'CUSTOM_QAT', 'the physical functions',
        provided='the virtual functions', empty='all of them',
        addresses_note=pci_opts.ADDRESS_CHECKED))
    assert found['addresses'].help == (
        'PCI addresses of the physical functions to report; empty: all of '
        'them. An address of another kind of device stops the agent at '
        'start.')
    assert found['resource_class'].help == ('Placement resource class of '
                                            'the virtual functions.')


def test_each_call_builds_new_options():
    # Two groups must not share one Opt object (oslo.config keeps state
    # on it per group).
    first = pci_opts.pci_selection_opts('FPGA', 'the cards')
    second = pci_opts.pci_selection_opts('FPGA', 'the cards')
    assert all(a is not b for a, b in zip(first, second, strict=True))
