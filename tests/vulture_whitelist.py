"""What vulture (tests/test_packaging.py) cannot see used in the package: names that libraries
call or read, and facts recorded where they happen for tests to read.

Not a test module and never imported: vulture reads it, and a name used here counts as used
anywhere. Every entry says who uses it. Code nothing uses is deleted; code only tests or benches
call lives beside them (tests/, bench/), never here.
"""

from typing import Any

name: Any = None  # what each name below is an attribute of: vulture matches names only

# pydantic: a model's settings, and validators it calls while validating (never by name)
_ = name.model_config
_ = name._computable, name._positions, name._placeholders, name._arms_build_with_cmake, name._kinds  # Config
_ = name._one_source, name._one_way, name._one_command, name._pattern, name._server_commit  # config sections
_ = name._shorthand, name._zone, name._shape, name._relative, name._kind, name._regex  # config sections
# pydantic: keys of the config's schema that are validated, then read from the YAML as written
# (`init --llama` reads a preset's file: llama/presets.py) or by tests only
_ = name.preset, name.aliases, name.body_args

# click: ClickException.show (click calls it on a usage error), Group.group_class (the class of
# subgroups), and a command registered by its decorator
_ = name.show
_ = name.group_class
_ = name.tiny_llama

# enum: Enum._missing_, called for a value no member has (Verdict reads old stored words)
_ = name._missing_
# rich: a Text's wrapping, read when it is rendered
_ = name.no_wrap, name.overflow
# uvicorn: Server.should_exit, polled by its main loop
_ = name.should_exit
# urllib3: a pool's connection class and a pool manager's pool classes, which it instantiates
_ = name.ConnectionCls, name.pool_classes_by_scheme
# sqlite3: Connection.row_factory, used for every row read
_ = name.row_factory

# Facts recorded where they happen, for tests to read: the webhook server's counters
# (bot/webhook.py ServeStats: tests count, not time) and the generated demo's planted build break
_ = name.body_bytes, name.head_timeouts, name.body_timeouts, name.busy
_ = name.build_break

# The JSON report's keys (records/reports.py TypedDicts: the contract other tools read from the
# JSON), set by keyword where the report is assembled and read by key, which vulture does not see
_ = name.commits_left, name.resume, name.culprit_label, name.measured_builds, name.measured_runs
_ = name.culprit_seed, name.culprit_outcome, name.parent_seed, name.parent_outcome
_ = name.alternatives, name.strategy_requested
# ASGI: a response body message's `more_body` key (bot/webhook.py), read by uvicorn
_ = name.more_body
