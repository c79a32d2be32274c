"""PURE: what a tenant's ``spec.autoscaling`` may make KEDA do (``docs/security.md``, "Autoscaling").

KEDA's pod runs with the cluster's network reach and queries the Prometheus a ScaledObject names, with the query it
names; what it reads comes back on the tenant's HPA (``status.currentMetrics``) and its errors as Events on the
tenant's ScaledObject. So:

- ``spec.autoscaling.prometheus.address`` must be one the admin allows: :attr:`PrometheusTenancy.allowed_addresses`,
  the chart's ``autoscaling.allowedPrometheusAddresses`` plus the operator's own ``autoscaling.prometheusAddress``
  (``run --allowed-prometheus-address``, ``--prometheus-address``); ``*`` allows any. Its form (scheme, host and
  port, nothing after) is the CRD's rule (:data:`sglang_operator.api.autoscaling.ADDRESS_BEYOND_HOST`).
- ``metric: query`` (free PromQL on the shared Prometheus) is off unless the admin allows it
  (:attr:`PrometheusTenancy.allow_query`; the chart's ``autoscaling.allowQueryMetric``, ``run
  --allow-query-metric``); allowed, the query is held to the server's own namespace, by refusal, not rewriting:

  1. the text rule (:func:`query_text_refusal`, the admission policy's too): ``namespace="$namespace"`` appears,
     and once every occurrence of it is removed, the word ``namespace`` appears nowhere (no other namespace matcher,
     regex, quoted label name or ``label_replace`` onto it);
  2. the selector rule (:func:`query_selector_refusal`, the operator's and ``render``'s only: CEL cannot read
     PromQL): every vector selector of the query carries the matcher ``namespace="$namespace"``, so no series of
     another namespace is read (``sum(kube_pod_info)`` passes the text rule and reads every namespace). A query the
     small reader here cannot follow (:func:`selectors`) is refused, never guessed at.

  Matchers only narrow a selector: with ``namespace="$namespace"`` in each, nothing else in the query can widen
  what it reads.

The admission policy's CEL (:mod:`sglang_operator.builders.admission_autoscaling`) says the same words as
:func:`address_refusal`, :func:`query_switch_refusal` and :func:`query_text_refusal`; the operator applies all four
(:meth:`PrometheusTenancy.refusal`) and writes no ScaledObject for a refused spec.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sglang_operator.api.autoscaling import QUERY_NAMESPACE, Autoscaling, AutoscalingMetric, AutoscalingMode

ANY_ADDRESS = "*"
"""An allow-list entry allowing any address (a single-tenant cluster)."""
OWN_NAMESPACE = f'namespace="{QUERY_NAMESPACE}"'
"""The one matcher on ``namespace`` a query may hold, in every selector."""
EXAMPLE = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'

ADDRESS_SAYS = ("KEDA's pod queries it with the cluster's network reach, so only the Prometheus addresses the admin "
                "allows may be named (the chart's autoscaling.allowedPrometheusAddresses and prometheusAddress: ")
ADDRESS_FIX = "); remove spec.autoscaling.prometheus to use the operator's own Prometheus, or ask an admin to allow it"
QUERY_SWITCH = ("spec.autoscaling.metric is query: a PromQL query of your own runs on the shared Prometheus, where it "
                "can read every namespace's series, and this cluster does not allow it (the chart's "
                "autoscaling.allowQueryMetric is false); use runningRequests, queuedRequests, kvCacheUsage or "
                "measuredCapacity, or ask an admin to allow queries")
_SCOPE = (f"every selector must carry {OWN_NAMESPACE} (the SGLangServer's namespace) and the query may name "
          "namespace nowhere else, so that it reads this namespace's series only")
QUERY_TEXT = f"spec.autoscaling.query reads beyond its own namespace: {_SCOPE}; e.g. {EXAMPLE}"


def listed(allowed: Sequence[str]) -> str:
    """The allow-list as the messages write it (``none`` when empty)."""
    return ", ".join(allowed) if allowed else "none"


def address_refusal(address: str, allowed: Sequence[str]) -> str | None:
    """Why ``spec.autoscaling.prometheus.address`` ``address`` is refused under ``allowed``, or None."""
    if ANY_ADDRESS in allowed or address in allowed:
        return None
    return f"spec.autoscaling.prometheus.address is {address}: {ADDRESS_SAYS}{listed(allowed)}{ADDRESS_FIX}"


def query_switch_refusal(metric: AutoscalingMetric | None, allow_query: bool) -> str | None:
    """Why ``metric: query`` is refused (the admin's switch is off), or None."""
    return QUERY_SWITCH if metric is AutoscalingMetric.QUERY and not allow_query else None


def query_text_refusal(query: str) -> str | None:
    """The text rule on ``spec.autoscaling.query`` (the admission policy's), or None when it passes."""
    if OWN_NAMESPACE in query and "namespace" not in query.replace(OWN_NAMESPACE, ""):
        return None
    return QUERY_TEXT


# -- the selector rule: a PromQL reader just deep enough to find every vector selector ------------------------------

class Unreadable(ValueError):
    """The query is not one :func:`selectors` can follow: ``why``, at character ``at`` (0-based)."""

    def __init__(self, why: str, at: int) -> None:
        super().__init__(f"{why} at character {at + 1}")
        self.why, self.at = why, at


@dataclass(frozen=True)
class Token:
    kind: str
    """``string``, ``number``, ``ident`` or ``op``."""
    text: str
    at: int


@dataclass(frozen=True)
class Matcher:
    name: Token
    op: str
    value: Token


@dataclass(frozen=True)
class Selector:
    """A vector selector: its text and its label matchers."""

    text: str
    matchers: tuple[Matcher, ...]

    @property
    def own_namespace(self) -> bool:
        """Whether it carries ``namespace="$namespace"`` (written so: no escape, no other quote)."""
        return any(m.name.kind == "ident" and m.name.text == "namespace" and m.op == "=" and
                   m.value.text == f'"{QUERY_NAMESPACE}"' for m in self.matchers)


_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z0-9_]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|==|!=|<=|>=|[-+*/%^<>=,(){}\[\]@])
""", re.VERBOSE)
AGGREGATORS = frozenset({"sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
                         "count_values", "quantile", "limitk", "limit_ratio"})
"""PromQL's aggregation operators: ``sum by (pod) (…)`` is an aggregation, not the series ``sum``."""
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords whose ``(…)`` lists label names, not expressions."""
MODIFIERS = frozenset({"bool", "on", "ignoring", "group_left", "group_right"})
"""Keywords that are never a metric name (Prometheus' ``metric_identifier`` leaves them out)."""
BINARY_WORDS = frozenset({"and", "or", "unless", "atan2"})
_MATCH_OPS = frozenset({"=", "!=", "=~", "!~"})
_BINARY_OPS = frozenset({"*", "/", "%", "^", "==", "!=", "<=", ">=", "<", ">"})


def tokens(query: str) -> list[Token]:
    """``query``'s PromQL tokens (comments and blanks dropped). Raises :class:`Unreadable` at a character PromQL has
    no token for (``$`` outside a string: a ``$namespace`` or ``$server`` there would change the tokens once
    replaced)."""
    out: list[Token] = []
    at = 0
    while at < len(query):
        m = _TOKEN.match(query, at)
        if m is None:
            raise Unreadable(f"unexpected {query[at]!r}", at)
        if m.lastgroup != "space":
            out.append(Token(str(m.lastgroup), m.group(), at))
        at = m.end()
    return out


class _Reader:
    def __init__(self, query: str) -> None:
        self.query = query
        self.toks = tokens(query)
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def take(self, want: str | None = None, kind: str | None = None) -> Token:
        t = self.peek()
        if t is None:
            raise Unreadable(f"the query ends where {want or kind} should follow", len(self.query))
        if (want is not None and t.text != want) or (kind is not None and t.kind != kind):
            raise Unreadable(f"unexpected {t.text!r} where {want or kind} should be", t.at)
        self.i += 1
        return t

    def label_list(self) -> None:
        """``( name, … )`` after ``by``, ``on``, …: label names only."""
        self.take("(")
        while (t := self.peek()) is not None and t.text != ")":
            self.take(kind="ident" if t.kind == "ident" else "string")
            if (t := self.peek()) is not None and t.text == ",":
                self.i += 1
            elif t is None or t.text != ")":
                break
        self.take(")")

    def matchers(self, start: int) -> Selector:
        """``{ … }`` (its ``{`` next), of a selector whose text starts at ``start``."""
        self.take("{")
        found: list[Matcher] = []
        while (t := self.peek()) is not None and t.text != "}":
            name = self.take(kind=t.kind if t.kind in ("ident", "string") else "ident")
            op = self.peek()
            if op is not None and op.text in _MATCH_OPS:
                self.i += 1
                found.append(Matcher(name, op.text, self.take(kind="string")))
            elif name.kind != "string":  # a quoted metric name alone is Prometheus 3's {"name"}
                raise Unreadable(f"a matcher operator should follow {name.text!r}", name.at)
            if (t := self.peek()) is not None and t.text == ",":
                self.i += 1
            elif t is None or t.text != "}":
                break
        end = self.take("}")
        return Selector(self.query[start:end.at + 1], tuple(found))

    def skip_brackets(self) -> None:
        """A range or subquery ``[5m]``, ``[1h:1m]``: durations only (no selector, string or nesting)."""
        opened = self.take("[")
        while (t := self.peek()) is not None and t.text != "]":
            if t.kind == "string" or t.text in ("{", "[", "}"):
                raise Unreadable(f"unexpected {t.text!r} in a range", t.at)
            self.i += 1
        if self.peek() is None:
            raise Unreadable("an unclosed '['", opened.at)
        self.i += 1

    def number(self) -> None:
        if (t := self.peek()) is not None and t.text in ("+", "-"):
            self.i += 1
        self.take(kind="number")

    def read(self) -> list[Selector]:
        found: list[Selector] = []
        operand, depth = True, 0
        while (t := self.peek()) is not None:
            nxt = self.peek(1)
            word = t.text.lower() if t.kind == "ident" else ""
            paren_next = nxt is not None and nxt.text == "("
            if t.kind == "ident" and word in LABEL_LISTS and paren_next:
                self.i += 1
                self.label_list()
            elif t.kind == "ident" and operand:
                if paren_next or word in MODIFIERS or (word in AGGREGATORS and nxt is not None and nxt.kind == "ident"
                                                       and nxt.text.lower() in ("by", "without")):
                    self.i += 1  # a function, an aggregation, a modifier: what follows is read on
                elif nxt is not None and nxt.text == "{":
                    self.i += 1
                    found.append(self.matchers(t.at))
                    operand = False
                else:
                    self.i += 1
                    found.append(Selector(t.text, ()))
                    operand = False
            elif t.kind == "ident":
                self.i += 1
                if word in BINARY_WORDS:
                    operand = True
                elif word == "offset":
                    self.number()
                else:
                    raise Unreadable(f"unexpected {t.text!r}", t.at)
            elif t.text == "{" and operand:
                found.append(self.matchers(t.at))
                operand = False
            elif t.text == "(" and operand:
                depth += 1
                self.i += 1
            elif t.text == ")" and depth > 0 and (not operand or self.toks[self.i - 1].text == "("):  # f()
                depth -= 1
                operand = False
                self.i += 1
            elif t.text == "," and not operand and depth > 0:
                operand = True
                self.i += 1
            elif t.text == "[" and not operand:
                self.skip_brackets()
            elif t.text == "@" and not operand:
                self.i += 1
                if (w := self.peek()) is not None and w.kind == "ident" and w.text.lower() in ("start", "end"):
                    self.i += 1
                    self.take("(")
                    self.take(")")
                else:
                    self.number()
            elif t.kind in ("number", "string") and operand:
                operand = False
                self.i += 1
            elif t.text in ("+", "-") or (t.text in _BINARY_OPS and not operand):
                operand = True
                self.i += 1
            else:
                raise Unreadable(f"unexpected {t.text!r}", t.at)
        if not self.toks:
            raise Unreadable("an empty query", 0)
        if operand or depth:
            raise Unreadable("the query ends early", len(self.query))
        return found


def selectors(query: str) -> list[Selector]:
    """Every vector selector of PromQL ``query``, in order. Raises :class:`Unreadable` when the query is not one
    this reader follows: a syntax error, or a construct it does not know (then it may hide a selector)."""
    return _Reader(query).read()


def query_selector_refusal(query: str) -> str | None:
    """The selector rule: why ``query`` is refused (a selector without ``namespace="$namespace"``, or a query that
    cannot be read), or None."""
    try:
        found = selectors(query)
    except Unreadable as err:
        return (f"spec.autoscaling.query cannot be read ({err}): the operator runs a query only once it has found "
                f"{OWN_NAMESPACE} in each of its selectors")
    for s in found:
        if not s.own_namespace:
            return f"spec.autoscaling.query selects {s.text} without {OWN_NAMESPACE}: {_SCOPE}; e.g. {EXAMPLE}"
    return None


@dataclass(frozen=True)
class PrometheusTenancy:
    """What the admin allows a tenant's ``spec.autoscaling``: ``allowed_addresses`` for
    ``spec.autoscaling.prometheus.address`` (the operator's own included; ``*``: any) and ``allow_query`` for
    ``metric: query``."""

    allowed_addresses: tuple[str, ...] = ()
    allow_query: bool = False

    @classmethod
    def of(cls, own: str | None, allowed: Iterable[str] = (), allow_query: bool = False) -> PrometheusTenancy:
        """From the command line: ``allowed`` (``--allowed-prometheus-address``) then ``own``
        (``--prometheus-address``), each once, the chart's order."""
        return cls(tuple(dict.fromkeys([*allowed, *([own] if own else [])])), allow_query)

    def refusal(self, auto: Autoscaling | None) -> str | None:
        """Why ``auto`` (a server's ``spec.autoscaling``) gets no ScaledObject: the first of the address rule, the
        query switch, the text rule and the selector rule that refuses it; None when it passes (or renders none)."""
        if auto is None or auto.mode is not AutoscalingMode.KEDA:
            return None
        if auto.prometheus is not None and (no := address_refusal(auto.prometheus.address, self.allowed_addresses)):
            return no
        if auto.metric is not AutoscalingMetric.QUERY:
            return None
        return (query_switch_refusal(auto.metric, self.allow_query) or query_text_refusal(str(auto.query))
                or query_selector_refusal(str(auto.query)))
