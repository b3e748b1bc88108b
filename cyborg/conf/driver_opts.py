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

"""Drivers' options: where they are found, and the blocks they share.

Each driver package declares its option groups in a module of its own and
names that module's ``list_opts`` under the ``cyborg.accelerator.driver_opts``
entry point namespace (``setup.cfg``), beside its driver's entry point.
:func:`driver_opts` finds them there: ``cyborg.conf`` registers them on
``CONF`` and ``cyborg.conf.opts`` lists them for the sample configuration
and the documentation, so no central list names a driver.

A driver of PCI functions chooses what it reports with the same options:
``device_ids`` (when its devices come in several models), ``addresses``
and ``resource_class``. :func:`pci_selection_opts` builds them, with
help text that names what the driver reports, so that each driver's
options module declares only what is its own.
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

#: Said of ``addresses`` by drivers that check the devices at start.
ADDRESS_CHECKED = ('An address of another kind of device stops the agent '
                   'at start.')


def pci_selection_opts(default_rc: str, reported: str, *,
                       provided: str | None = None, empty: str = 'all',
                       addresses_note: str = '',
                       device_ids_help: str | None = None) -> list[cfg.Opt]:
    """``[device_ids,] addresses, resource_class`` of a PCI driver.

    :param default_rc: the default resource class.
    :param reported: what the addresses are the addresses of ("the NPUs").
    :param provided: what the resource class is the class of (the
        inventory; the reported devices unless given).
    :param empty: what an empty ``addresses`` reports.
    :param addresses_note: a sentence added to ``addresses``' help.
    :param device_ids_help: ``device_ids``' help; ``None``: the driver has
        no ``device_ids`` option.
    """
    addresses_help = 'PCI addresses of %s to report; empty: %s.' % (
        reported, empty)
    if addresses_note:
        addresses_help += ' ' + addresses_note
    opts: list[cfg.Opt] = []
    if device_ids_help is not None:
        opts.append(cfg.ListOpt('device_ids', default=[],
                                help=device_ids_help))
    opts.append(cfg.ListOpt('addresses', default=[], help=addresses_help))
    opts.append(cfg.StrOpt('resource_class', default=default_rc,
                           help='Placement resource class of %s.'
                           % (provided or reported)))
    return opts
