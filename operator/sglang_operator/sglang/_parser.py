"""An ``argparse`` parser rebuilt from a flag table, with SGLang's type callables and actions ported.

Sources: ``sglang/srt/utils/common.py`` (``human_readable_int``, ``nullable_str``, ``json_list_type``),
``sglang/srt/model_executor/cuda_graph_config.py`` (``parse_cuda_graph_*_arg``, 0.5.23),
``sglang/srt/arg_groups/argparse_actions.py`` (0.5.23) / ``server_args.py`` (0.5.10) for the actions.
Callables keep SGLang's ``__name__`` because argparse prints it ("invalid int value: 'x'").
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, NoReturn

from sglang_operator.sglang.flags import FlagSpec, FlagTable


class SGLangArgError(Exception):
    """SGLang would refuse to start with these arguments.

    ``message`` is SGLang's own text: argparse's (``unrecognized arguments: --x 1``), or the
    ``ValueError``/``AssertionError``/``TypeError`` text its resolution raises. ``kind`` says which
    (``argparse`` exits with status 2; ``exit`` is argparse ending normally after ``--help``, status 0; the others
    are uncaught exceptions, exit status 1).
    """

    def __init__(self, message: str, kind: str = "argparse") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind

    @property
    def exit_code(self) -> int:
        """Process exit status SGLang ends with."""
        return {"argparse": 2, "exit": 0}.get(self.kind, 1)

    def log_line(self, prog: str = "sglang serve") -> str:
        """The last stderr line SGLang prints, e.g. ``sglang serve: error: ...`` or ``ValueError: ...``."""
        if self.kind == "argparse":
            return f"{prog}: error: {self.message}"
        if self.kind == "exit":
            return self.message
        return f"{self.kind}: {self.message}" if self.message else self.kind


def human_readable_int(value: str) -> int:
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def nullable_str(val: str) -> str | None:
    if not val or val == "None":
        return None
    return val


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def loads(value: str) -> Any:
    return json.loads(value)


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def parse_cuda_graph_config_arg(raw: str) -> Any:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
        )
    return parsed


_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "human_readable_int": human_readable_int,
    "nullable_str": nullable_str,
    "json_list_type": json_list_type,
    "loads": loads,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


class DeprecatedAction(argparse.Action):
    """``server_args.py:DeprecatedAction``: 0.4.6–0.5.7 ``raise ValueError(self.help)`` (``raises``: that help);
    0.5.18–0.5.19 ``parser.error(error_message)``; otherwise a logged deprecation warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, error_message: str | None = None,
                 raises: str | None = None, nargs: int | str | None = 0, **kw: Any) -> None:
        self.error_message = error_message
        self.raises = raises
        super().__init__(option_strings, dest, nargs=nargs, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if self.raises is not None:
            raise SGLangArgError(self.raises, "ValueError")
        if self.error_message is not None:
            parser.error(self.error_message)
        _record(parser, f"The command line argument '{option_string}' is deprecated and will be removed "
                        "in future versions.")


class _DeprecatedAction(argparse.Action):
    """SGLang's deprecated-flag actions: record the deprecation warning (naming ``new_flag`` when set), then store
    :meth:`stored`."""

    new_flag: str | None

    def stored(self, values: Any) -> Any:
        return values

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        repl = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _record(parser, f"'{option_string}' is deprecated and will be removed in a future release.{repl}")
        setattr(namespace, self.dest, self.stored(values))


class DeprecatedStoreTrueAction(_DeprecatedAction):
    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str | None = None,
                 nargs: int | str | None = 0, const: Any = True, default: Any = False, **kw: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kw)

    def stored(self, values: Any) -> Any:
        return True


class DeprecatedStoreConstAction(_DeprecatedAction):
    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str | None = None,
                 const_value: Any = None, nargs: int | str | None = 0, default: Any = None, **kw: Any) -> None:
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kw)

    def stored(self, values: Any) -> Any:
        return self.const_value


class DeprecatedAliasStoreAction(_DeprecatedAction):
    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str | None = None, **kw: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kw)


class LoRAPathAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        paths: list[Any] = []
        for p in values or []:
            p = p.strip()
            paths.append(json.loads(p) if p.startswith("{") and p.endswith("}") else p)
        setattr(namespace, self.dest, paths)


_ACTIONS: dict[str, Any] = {
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
    "DeprecatedAction": DeprecatedAction,
    "DeprecatedStoreTrueAction": DeprecatedStoreTrueAction,
    "DeprecatedStoreConstAction": DeprecatedStoreConstAction,
    "DeprecatedAliasStoreAction": DeprecatedAliasStoreAction,
    "LoRAPathAction": LoRAPathAction,
}


def _record(parser: argparse.ArgumentParser, text: str) -> None:
    getattr(parser, "sglang_warnings", []).append(text)


class SGLangParser(argparse.ArgumentParser):
    """argparse, but errors raise :class:`SGLangArgError` (argparse's message) instead of exiting."""

    sglang_warnings: list[str]

    def error(self, message: str) -> NoReturn:
        raise SGLangArgError(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter in every add_argument call, and each asks the terminal for its size
        # (half the cost of building a 500-option parser); a fixed width skips that.
        return argparse.HelpFormatter(prog=self.prog, width=100)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status == 0:  # --help (argparse printed it): the process ends normally, as SGLang's does
            raise SGLangArgError(message or "", kind="exit")
        raise SGLangArgError(message or f"exit {status}")


def _kwargs(flag: FlagSpec) -> tuple[list[str], dict[str, Any]]:
    opts = list(flag.options)
    kw: dict[str, Any] = {"dest": flag.dest}
    if flag.action == "BooleanOptionalAction":
        opts = [o for o in opts if not (o.startswith("--no-") and "--" + o[5:] in opts)]
    act = flag.action
    if act in ("store_true", "store_false"):
        kw.update(action=act, default=flag.default)
        return opts, kw
    if act == "store_const":
        kw.update(action=act, const=flag.const, default=flag.default)
        return opts, kw
    kw["action"] = _ACTIONS.get(act, act)
    kw["default"] = flag.default
    if act in ("DeprecatedAction", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction"):
        kw.update(flag.action_kwargs)
        kw["nargs"] = flag.nargs
        if flag.choices is not None:
            kw["choices"] = list(flag.choices)
        return opts, kw
    if act == "BooleanOptionalAction":
        return opts, kw
    if flag.type is not None:
        kw["type"] = _TYPES.get(flag.type, str)
    if flag.choices is not None:
        kw["choices"] = list(flag.choices)
    if flag.nargs is not None:
        kw["nargs"] = flag.nargs
    if flag.const is not None:
        kw["const"] = flag.const
    if flag.required:
        kw["required"] = True
    kw.update(flag.action_kwargs)
    return opts, kw


def build_parser(table: FlagTable) -> SGLangParser:
    """An argparse parser with the same options, types, choices, defaults and actions as SGLang's."""
    parser = SGLangParser(prog=table.prog or "launch_server.py", add_help=True)
    parser.sglang_warnings = []
    for flag in table.flags:
        opts, kw = _kwargs(flag)
        parser.add_argument(*opts, **kw)
    return parser
