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

"""Parsing configuration and setting up logging for every command."""

from oslo_config import cfg
from oslo_log import log

from cyborg.common import rpc
from cyborg import conf as cyborg_conf
from cyborg.conf import opts as conf_opts
from cyborg import version

CONF = cyborg_conf.CONF
_DEFAULT_LOG_LEVELS = log.get_default_log_levels() + [
    'stevedore=WARN', 'alembic=WARN', 'pecan=WARN', 'wsme=WARN',
]


def parse_args(argv: list[str], default_config_files=None) -> None:
    """Parse the command line and config files into CONF."""
    conf_opts.set_lib_defaults()
    rpc.register_opts(CONF)
    CONF(argv[1:], project='cyborg', prog=argv[0].rsplit('/', 1)[-1],
         version=version.version_string(),
         default_config_files=default_config_files)


def setup_logging() -> None:
    log.set_defaults(default_log_levels=_DEFAULT_LOG_LEVELS)
    log.setup(CONF, 'cyborg')


def register_logging_opts() -> None:
    try:
        log.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        pass
    except cfg.DuplicateOptError:
        pass


def prepare_service(argv: list[str], default_config_files=None) -> None:
    """What every cyborg command does first."""
    register_logging_opts()
    parse_args(argv, default_config_files=default_config_files)
    setup_logging()
