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

"""Names shared by several services."""

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'

# The newest version of each RPC API, which its endpoint serves; the
# version history is in cyborg.conductor.rpcapi.ConductorAPI and
# cyborg.agent.rpcapi.AgentAPI.
CONDUCTOR_RPC_API_VERSION = '1.10'
AGENT_RPC_API_VERSION = '1.4'

BINARY_CONDUCTOR = 'cyborg-conductor'
BINARY_AGENT = 'cyborg-agent'

# Transport URL that selects the in-process transport of the all-in-one.
INPROC_TRANSPORT_URL = 'inproc://'

# keystonemiddleware's default for [keystone_authtoken]
# service_token_roles: the roles that make a service token a service's.
DEFAULT_SERVICE_TOKEN_ROLES = ('service',)
