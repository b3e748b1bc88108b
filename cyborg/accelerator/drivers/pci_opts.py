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

"""Option blocks that several PCI drivers' option groups share.

A driver of PCI functions chooses what it reports with the same options:
``device_ids`` (when its devices come in several models), ``addresses``
and ``resource_class``. :func:`pci_selection_opts` builds them, with
help text that names what the driver reports, so that each driver's
options module declares only what is its own.

Like the drivers' options modules, this module imports nothing of
``cyborg.conf``, which imports them (see :mod:`cyborg.conf.driver_opts`).
"""

from oslo_config import cfg

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
