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

"""``openstack`` with python-cyborgclient's device profile commands.

When python-openstackclient (>= 7.x, which ships its own ``openstack
accelerator ...`` commands) and python-cyborgclient are both installed,
the ``openstack`` binary registers both under the same names and the
python-openstackclient ones win. This launcher runs the unmodified
OpenStackShell but maps the device profile commands to
cyborgclient.osc.v2.device_profile, so that cyborgclient's command code
(its argument parsing, its calls into openstacksdk and its error handling)
is exercised against the server too.

Usage: python cyborgclient_osc.py <openstack arguments...>
"""

import sys

from cyborgclient.osc.v2 import device_profile
from openstackclient import shell

COMMANDS = {
    'accelerator device profile create': device_profile.CreateDeviceProfile,
    'accelerator device profile delete': device_profile.DeleteDeviceProfile,
    'accelerator device profile list': device_profile.ListDeviceProfile,
    'accelerator device profile show': device_profile.ShowDeviceProfile,
}


class CyborgClientShell(shell.OpenStackShell):
    def _load_plugins(self):
        super()._load_plugins()
        for name, cls in COMMANDS.items():
            self.command_manager.add_command(name, cls)


def main(argv=None):
    return CyborgClientShell().run(sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    sys.exit(main())
