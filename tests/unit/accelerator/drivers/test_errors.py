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

"""The driver error family."""

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.common import exception


@pytest.mark.parametrize('cls', [errors.DriverConfigError,
                                 errors.PrepareFailed, errors.ProgramFailed])
def test_every_driver_error_is_one_family(cls):
    assert issubclass(cls, errors.DriverError)
    assert issubclass(cls, exception.CyborgException)


def test_config_error_is_an_invalid_configuration():
    error = errors.config_error('pci_driver', 'device_ids', "'zz' is bad")

    assert isinstance(error, exception.ConfigInvalid)
    assert str(error) == ("Invalid configuration: [pci_driver] device_ids: "
                          "'zz' is bad")


def test_prepare_failed_says_the_reason_only():
    assert str(errors.PrepareFailed(reason='no instance left')) == (
        'no instance left')


def test_program_failed_names_the_device():
    error = errors.ProgramFailed(device='0000:5e:00.0', reason='bad magic')

    assert str(error) == 'Programming 0000:5e:00.0 failed: bad magic'
