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

"""Options of the [remediation] group: what the agent does with the
health signals of its devices (see :mod:`cyborg.domain.remediation`)."""

from oslo_config import cfg

group = cfg.OptGroup('remediation', title='Device health remediation')

opts = [
    cfg.IntOpt('recovery_reports',
               # cyborg.domain.remediation.DEFAULT_RECOVERY_REPORTS (the
               # options import nothing of the service; a test compares).
               default=3, min=1,
               help='Reports in a row without a signal after which the '
                    'taint the signal put on a device goes (unless its '
                    'catalog entry is sticky, resets the device or '
                    'reboots the host). One noisy report never makes a '
                    'device flap.'),
    cfg.MultiStrOpt('override', default=[],
                    help='A change to the remediation catalog, one per '
                         'line: "SIGNAL: field=value ...", SIGNAL a signal '
                         'name (xid.48, pcie.aer-fatal, unhealthy...) or a '
                         'glob pattern (xid.*); fields action (ignore, '
                         'degrade, taint, reset_device, reboot_host), '
                         'effect (NoSchedule, NoExecute, None), key (the '
                         'taint key), sticky (true/false), recover_after '
                         '(reports; 0: recovery_reports), cancels (comma-'
                         'separated patterns of the signals it clears) and '
                         'escalate (taint or reboot_host: what a failed '
                         'reset becomes). Fields left out keep the default '
                         'entry\'s value. Example: '
                         '"xid.94: action=ignore".'),
    cfg.BoolOpt('reset_devices', default=True,
                help='Reset a device whose signal asks for it '
                     '(reset_device) once no accelerator request is bound '
                     'on it, through its driver\'s vendor tool. False: '
                     'its taint stays until the agent restarts.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
