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

"""The [api] group owns the defaults of the standalone servers' limits;
the WSGI server takes them from it."""

import inspect

from cyborg.api import wsgi_server
from cyborg.conf import api as api_conf


def test_the_limits_default_to_the_groups_constants(conf):
    assert conf.api.client_timeout == api_conf.CLIENT_TIMEOUT == 30.0
    assert conf.api.max_connections == api_conf.MAX_CONNECTIONS == 100


def test_a_server_given_no_limits_takes_the_options_defaults(conf):
    parameters = inspect.signature(wsgi_server.WSGIServer).parameters
    assert (parameters['client_timeout'].default
            == conf.api.client_timeout)
    assert (parameters['max_connections'].default
            == conf.api.max_connections)
