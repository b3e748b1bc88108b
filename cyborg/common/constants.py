"""Names shared by several services."""

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'

RPC_API_VERSION = '1.0'

BINARY_CONDUCTOR = 'cyborg-conductor'
BINARY_AGENT = 'cyborg-agent'

# Transport URL that selects the in-process transport of the all-in-one.
INPROC_TRANSPORT_URL = 'inproc://'

# keystonemiddleware's default for [keystone_authtoken]
# service_token_roles: the roles that make a service token a service's.
DEFAULT_SERVICE_TOKEN_ROLES = ('service',)
