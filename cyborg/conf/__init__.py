"""Configuration: the one global CONF object and option registration."""

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import fake_driver
from cyborg.conf import nova
from cyborg.conf import placement

CONF = cfg.CONF

for _module in (default, api, conductor, agent, fake_driver, placement, nova,
                database):
    _module.register_opts(CONF)
