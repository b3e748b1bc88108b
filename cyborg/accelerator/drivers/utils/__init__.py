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

"""Helpers that drivers share to read and prepare host hardware.

Every function takes a ``sysfs.HostRoot`` (built from ``[agent]
host_root``) for what it reads or writes, and vendor commands run through
a ``runner.CommandRunner``, so tests swap both for a fixture tree and
fake tools.
Helpers raise the exceptions of :mod:`.errors` and never log.
"""
