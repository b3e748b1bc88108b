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

"""cyborg-all-in-one and its host simulator.

Nothing a deployed service runs: the wiring of API, conductor, agent and
an embedded Placement in one process (:mod:`.launch`, its ready message
:mod:`.banner`), the stand-ins it serves (:mod:`.embedded_placement`,
:mod:`.local_images`) and the simulated host the drivers read in the
demo and in tests (:mod:`.host_tree`, :mod:`.fake_tools`,
:mod:`.demo_host`). It sits just below ``cyborg.cmd`` and may import any
other package; no service package imports it.
"""
