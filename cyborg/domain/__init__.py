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

"""The domain rules every layer shares.

What an ARQ state may become, what a valid resource class or trait is,
what a device profile may ask for, the device tree an agent reports and
its wire form, how a deployable's Placement provider is named. Nothing
here imports the service's other packages (only the standard library,
oslo and os-* libraries and ``cyborg.common.exception``), so the API, the
conductor, the agent, the database layer and the drivers all import it
and it can be tested alone. ``tests/unit/test_import_rules.py`` checks.
"""
