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

"""Drivers' options: where they are found.

Each driver package declares its option groups in a module of its own and
names that module's ``list_opts`` under the ``cyborg.accelerator.driver_opts``
entry point namespace (``setup.cfg``), beside its driver's entry point.
:func:`driver_opts` finds them there: ``cyborg.conf`` registers them on
``CONF`` and ``cyborg.conf.opts`` lists them for the sample configuration
and the documentation, so no central list names a driver.

A driver's options module must not import ``cyborg.conf`` (this module
imports the options modules while ``cyborg.conf`` is being imported); the
blocks drivers share are in :mod:`cyborg.accelerator.drivers.pci_opts`.
"""

from oslo_config import cfg
from stevedore import extension

#: Entry point namespace of the drivers' ``list_opts`` functions.
NAMESPACE = 'cyborg.accelerator.driver_opts'


def _load_failed(_manager, entrypoint, error):
    # A driver's options that cannot be read would silently drop its
    # group from every service's configuration: fail loudly instead.
    raise error


def driver_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    """``(group, options)`` of every installed driver, by entry point
    name."""
    manager = extension.ExtensionManager(
        NAMESPACE, on_load_failure_callback=_load_failed)
    found = []
    for ext in sorted(manager, key=lambda ext: ext.name):
        found.extend(ext.plugin().items())
    return found


def register_driver_opts(conf: cfg.ConfigOpts) -> None:
    """Register every installed driver's option groups on ``conf``."""
    for group, opts in driver_opts():
        conf.register_group(group)
        conf.register_opts(opts, group=group)
