"""The one list of primitives, which each primitive's own module writes: its public names
(the module's ``__all__``, which scangen.primitives and scangen re-export) and how
``python -m scangen source|plan NAME`` builds it (:func:`command_line`, read by
scangen.cli). So a new primitive is its module (plus its template and tests), with no list
elsewhere to extend. Pure Python: no CUDA import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

#: The command-line options a primitive may take besides --dtype and the scan options
#: (scangen.cli defines them): name -> what the option holds, for messages.
OPTIONS = ("predicate", "bits")
#: The options its ``plan(n, ...)`` may take (scangen.cli passes them after n).
PLAN_OPTIONS = ("bins",)


@dataclass(frozen=True)
class CommandLine:
    """How the command line builds one primitive: ``build(dtype, scan_options, **given)``
    with ``given`` the OPTIONS it ``takes`` that were given (``needs``: those it must be
    given); ``scan_options``: whether --algorithm, --section-size, --items-per-thread and
    --strategy apply (its kernels have a tile of their own where not); ``plan_takes``: the
    PLAN_OPTIONS its plan takes."""

    name: str
    build: Callable
    takes: tuple = ()
    needs: tuple = ()
    scan_options: bool = True
    plan_takes: tuple = ()


#: name -> CommandLine, in the order the modules declared them.
COMMAND_LINE: dict[str, CommandLine] = {}


def command_line(name: str, build: Callable, *, takes=(), needs=(), scan_options=True,
                 plan_takes=()) -> None:
    """Declare how ``python -m scangen source|plan NAME`` builds a primitive (see
    CommandLine); called once per name, by the primitive's own module."""
    takes, needs, plan_takes = tuple(takes), tuple(needs), tuple(plan_takes)
    unknown = [o for o in takes + needs if o not in OPTIONS] + \
        [o for o in plan_takes if o not in PLAN_OPTIONS]
    if unknown:
        raise ValueError(f"{name}: no command-line option {', '.join(unknown)} (scangen.cli "
                         f"has {', '.join(OPTIONS + PLAN_OPTIONS)})")
    if name in COMMAND_LINE:
        raise ValueError(f"a primitive named {name!r} is declared twice")
    COMMAND_LINE[name] = CommandLine(name, build, tuple(dict.fromkeys(takes + needs)), needs,
                                     scan_options, plan_takes)


def owners(option: str) -> list[str]:
    """The primitives that take ``option`` (an OPTIONS or PLAN_OPTIONS name)."""
    return [c.name for c in COMMAND_LINE.values()
            if option in c.takes or option in c.plan_takes]
