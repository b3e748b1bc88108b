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

from collections.abc import Callable
import os
import sys
from typing import NoReturn

from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg import version
from cyborg.common import config_checks
from cyborg.common import rpc
from cyborg.conf import opts as conf_opts

CONF = cyborg_conf.CONF
#: The SQLite database of a state directory (``--state-dir``).
DATABASE_FILE = 'cyborg.sqlite'
_DEFAULT_LOG_LEVELS = log.get_default_log_levels() + [
    'stevedore=WARN', 'alembic=WARN', 'pecan=WARN', 'wsme=WARN',
]


# What a command does with the database of ``[database] connection``
# (see :func:`prepare_service`): reads one that must exist, or creates it.
DATABASE_EXISTING = 'existing'
DATABASE_NEW = 'new'

STATE_DIR_OPT = cfg.StrOpt(
    'state-dir', metavar='DIR',
    help='Use the database of the cyborg-all-in-one whose state '
         'directory is DIR (its --state-dir), as the all-in-one does '
         '(sets the default of [DEFAULT] state_path).')


def parse_args(argv: list[str], default_config_files=None) -> None:
    """Parse the command line and config files into CONF.

    Raises :class:`config_checks.ConfigProblems` when a config file
    cannot be read or parsed.
    """
    conf_opts.set_lib_defaults()
    rpc.register_opts(CONF)
    try:
        CONF(argv[1:], project='cyborg', prog=argv[0].rsplit('/', 1)[-1],
             version=version.version_string(),
             default_config_files=default_config_files)
    except cfg.ConfigFilesNotFoundError as e:
        raise config_checks.ConfigProblems([
            'cannot read the config file %s: no such file, or not '
            'readable (--config-file)' % os.path.abspath(name)
            for name in e.config_files])
    except (cfg.ConfigFileParseError, cfg.ConfigFilesPermissionDeniedError,
            cfg.RequiredOptError) as e:
        raise config_checks.ConfigProblems([str(e)])


def use_state_dir(conf: cfg.ConfigOpts, state_dir: str) -> None:
    """Default to the state and the SQLite database of a cyborg-all-in-one
    whose state directory is ``state_dir``."""
    conf.set_default('state_path', state_dir)
    conf.set_default('connection', 'sqlite:///%s' % os.path.join(
        state_dir, DATABASE_FILE), group='database')


def check(database: str | None,
          hint: str = config_checks.DATABASE_HINT) -> None:
    """Raise :class:`config_checks.ConfigProblems` naming every option of
    CONF whose value is not valid and, unless ``database`` is None, why
    the database cannot be opened (``DATABASE_EXISTING``: it must exist
    already), with ``hint`` saying what to change."""
    problems = config_checks.option_problems(CONF)
    if database is not None and not any(
            p.startswith('[database] connection ') for p in problems):
        problems += config_checks.database_problems(
            CONF, must_exist=database == DATABASE_EXISTING, hint=hint)
    if problems:
        raise config_checks.ConfigProblems(problems)


def print_problems(prog: str, problems: list[str]) -> int:
    """Print one line per problem on stderr; the exit status."""
    for problem in problems:
        print('%s: %s' % (prog, problem), file=sys.stderr)
    return config_checks.EXIT_STATUS


def refuse(prog: str, problems: list[str]) -> NoReturn:
    """Print one line per problem and exit with status 2."""
    sys.exit(print_problems(prog, problems))


def setup_logging() -> None:
    log.set_defaults(default_log_levels=_DEFAULT_LOG_LEVELS)
    log.setup(CONF, 'cyborg')


def register_logging_opts() -> None:
    # The defaults first: the checks read (and cache) every option.
    log.set_defaults(default_log_levels=_DEFAULT_LOG_LEVELS)
    try:
        log.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        pass
    except cfg.DuplicateOptError:
        pass


def register_state_dir_opt() -> None:
    """Add ``--state-dir`` to the command line (before parsing)."""
    try:
        CONF.register_cli_opt(STATE_DIR_OPT)
    except cfg.DuplicateOptError:
        pass


def prepare_service(argv: list[str], default_config_files=None,
                    database: str | Callable[[], str | None] | None = None,
                    state_dir: bool = False) -> None:
    """What every cyborg command does first: parse the configuration,
    check it (:func:`check`; ``database`` may be a callable deciding
    after parsing, from the sub-command), set up logging. A command whose
    configuration cannot work prints one line per problem and exits
    with status 2 before it starts anything.

    ``state_dir`` adds ``--state-dir`` (:data:`STATE_DIR_OPT`).
    """
    register_logging_opts()
    if state_dir:
        register_state_dir_opt()
    try:
        parse_args(argv, default_config_files=default_config_files)
        if state_dir and CONF.state_dir:
            use_state_dir(CONF, os.path.abspath(
                os.path.expanduser(CONF.state_dir)))
        check(database() if callable(database) else database,
              hint=(config_checks.STATE_DIR_HINT if state_dir
                    else config_checks.DATABASE_HINT))
    except config_checks.ConfigProblems as e:
        refuse(argv[0].rsplit('/', 1)[-1], e.problems)
    setup_logging()
