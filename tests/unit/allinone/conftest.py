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

import pytest

from cyborg.conf import CONF

# The defaults cyborg-all-in-one changes in the global CONF
# (launch._set_embedded_defaults): (option, group).
EMBEDDED_DEFAULTS = [('state_path', None), ('transport_url', None),
                     ('auth_strategy', 'api'), ('connection', 'database'),
                     ('resource_provider_name', 'agent')]


@pytest.fixture(autouse=True)
def _restore_embedded_defaults():
    """Tests that run the all-in-one's main in this process leave the
    library defaults as they found them (the conf fixture resets only
    overrides)."""
    yield
    for name, group in EMBEDDED_DEFAULTS:
        try:
            CONF.clear_default(name, group=group)
        except Exception:  # an option not registered by this test
            pass
