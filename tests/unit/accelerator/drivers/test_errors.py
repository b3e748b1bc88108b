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

import importlib
import pkgutil

import pytest

from cyborg.accelerator import drivers
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


# Exceptions a driver package defines for its own use and never lets out
# of it, with where they are caught.
INTERNAL = {
    # nvidia_gpu/health.py: a health query that cannot run; the health
    # check reports it as a reason, not as an error.
    'cyborg.accelerator.drivers.nvidia_gpu.health.ToolUnusable',
}


def _driver_modules() -> list[str]:
    """Every module of the driver packages (not the helper layer)."""
    return [info.name for info in pkgutil.walk_packages(
        drivers.__path__, drivers.__name__ + '.')
        if not info.name.startswith(drivers.__name__ + '.utils')]


def test_every_exception_a_driver_defines_is_a_driver_error():
    modules = _driver_modules()
    assert 'cyborg.accelerator.drivers.nvidia_gpu.driver' in modules
    defined = {}
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Exception)
                    and value.__module__ == name):
                defined['%s.%s' % (name, value.__name__)] = value
    assert INTERNAL <= set(defined)
    outside = sorted(name for name, cls in defined.items()
                     if not issubclass(cls, errors.DriverError)
                     and name not in INTERNAL)
    assert outside == []
