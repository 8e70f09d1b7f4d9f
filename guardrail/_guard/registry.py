"""The registry: a guard's kinds and tool specs, and the check plans compiled from them.

Everything declared about a program's tools lives here: :meth:`Registry.add_kind`,
:meth:`Registry.declare`, manifests (all or nothing), specs built from a
decorated function's signature, the rule that refuses a second tool of one
name (with where each was declared), the placeholder ids learnt from tool
descriptions, and what the check needs at call time: one compiled
:class:`~guardrail._check.plan.CheckPlan` per tool, with the "tools that look up
ids of this kind" table its re-prompts cite. Nothing here knows about
sessions or the audit, so one registry can be shared by several guards
(:meth:`guardrail.Guard.silenced` shares it).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from guardrail._check.plan import CheckPlan, compile_plan
from guardrail._declare.failure import DEFAULT_FAILS, FailureRule, compile_fails
from guardrail._declare.manifest import read_manifest
from guardrail._declare.spec import (
    EFFECTS,
    ON_SUCCESS,
    DeclareOptions,
    Effect,
    ParamSpec,
    Producer,
    ToolOptions,
    ToolSpec,
    Verifies,
    check_options,
    param_specs,
    producers,
    signature_ids,
)
from guardrail._provenance.harvest import quiet_results
from guardrail._provenance.mentions import mention_kinds
from guardrail.errors import GuardrailUsageError, ManifestError
from guardrail.kinds import OPERATOR_OPTIONS, Kind, KindOptions
from guardrail.kinds._operator import OperatorIds, loader_named

if TYPE_CHECKING:
    from typing_extensions import Unpack


class Registry:
    """The kinds and tool specs of a guard, and their compiled check plans.

    ``kinds`` and ``plans`` are changed in place, never replaced: open
    ledgers normalise with this very ``kinds`` mapping, and decorated tools
    hold this very ``plans`` mapping. A spec is never removed, so a plan
    looked up while another tool is being declared is always there.
    """

    def __init__(self, fails: FailureRule = DEFAULT_FAILS) -> None:
        #: The guard's failure rule: that of every tool that declares none (``Guard(fails=)``).
        self.fails = fails
        self.kinds: dict[str, Kind] = {}
        self.specs: dict[str, ToolSpec] = {}
        #: Where each tool was declared (a function's module and qualname, guard.declare or
        #: a manifest), for the error that refuses a second tool of the same name.
        self.origins: dict[str, str] = {}
        #: The tools declared as data (``declare`` or a manifest), and the function each is
        #: bound to once ``@guard.tool`` took its declaration (None: none yet).
        self.bound: dict[str, str | None] = {}
        #: The compiled check of each tool, by name.
        self.plans: dict[str, CheckPlan] = {}
        #: Per kind, the read tools that look its ids up (for "look it up again" re-prompts).
        self.lookups: Mapping[str, tuple[str, ...]] = {}
        #: Whether any write tool is declared: then an unknown tool is worth a warning.
        self.has_writes = False
        #: The kinds whose mentions in result text are taken (see
        #: :mod:`guardrail._provenance.mentions`), and whether a kind with no pattern takes them
        #: (result texts are then kept).
        self.mentions: list[Kind] = []
        self.text_kinds = False
        #: The values of kinds the operator declared (tier ``operator``).
        self.operator = OperatorIds()

    # -- kinds ----------------------------------------------------------------------------

    def add_kind(self, name: str, /, **options: Unpack[KindOptions]) -> Kind:
        """Declare (or redeclare) a kind of identifier; see :class:`guardrail.kinds.Kind`."""
        declared = {key: options.pop(key) for key in OPERATOR_OPTIONS & set(options)}  # type: ignore[misc]
        kind = Kind.build(name, **options)
        ids = declared.get("operator_ids")
        per = declared.get("operator_per", "guard")
        if isinstance(ids, str):  # a manifest names a loader as module:function
            ids = loader_named(ids, kind=name)
        if ids is None and "operator_per" in declared:
            raise GuardrailUsageError(f"kind {name!r}: operator_per is given without operator_ids")
        if ids is not None:
            self.operator.add(kind, ids, per=per, replace=True)
        self.kinds[name] = kind
        self.operator.rekeyed()
        self._recompile()
        return kind

    # -- tools ----------------------------------------------------------------------------

    def declare(self, name: str, *, origin: str, **options: Unpack[DeclareOptions]) -> ToolSpec:
        """Declare a tool from its keyword declarations; ``origin`` says who declared it."""
        check_options("declare()", options, DeclareOptions.__optional_keys__)
        self._require_new_name(name, origin)
        spec = self._build_spec(
            name,
            params=param_specs(options.get("ids"), tool=name),
            produced=producers(options.get("produces"), tool=name),
            mints=param_specs(options.get("mints"), tool=name),
            effect=options.get("effect") or "write",
            verifies=options.get("verifies", True),
            egress=options.get("egress", False),
            outside=options.get("outside", False),
            description=options.get("description") or "",
            fails=options.get("fails"),
        )
        self._register(spec, origin)
        self.bound[name] = None
        return spec

    def load_manifest(self, manifest: str | Any | Mapping[str, Any]) -> None:
        """Add the kinds and tools of a manifest; nothing is added if any part is wrong.

        A tool already declared is an error, as it is for :meth:`declare`.
        """
        data = read_manifest(manifest)
        where = "manifest" if isinstance(manifest, Mapping) else str(manifest)
        origin = "manifest" if isinstance(manifest, Mapping) else f"manifest {where}"
        trial = Registry(self.fails)
        trial.kinds = dict(self.kinds)
        trial.specs = dict(self.specs)
        trial.origins = dict(self.origins)
        trial.bound = dict(self.bound)
        try:
            # The manifest's own rule, for its tools that declare none (a tool's own wins).
            fails = compile_fails(data.get("fails"))
            for name, options in data.get("kinds", {}).items():
                trial.add_kind(name, **options)
            for name, options in data["tools"].items():
                given = {"fails": fails, **options} if fails is not None else options
                trial.declare(name, origin=origin, **given)
        except GuardrailUsageError as exc:
            raise ManifestError(str(exc), where=where, tool=exc.tool) from None
        # In place: open ledgers hold this very mapping for normalising.
        self.kinds.update(trial.kinds)
        self.operator.absorb(trial.operator)
        for name, spec in trial.specs.items():
            if name not in self.specs:
                self.specs[name] = spec
                self.origins[name] = trial.origins[name]
                self.bound[name] = None
        self._recompile()

    def declare_function(
        self,
        function: Callable[..., Any],
        /,
        **options: Unpack[ToolOptions],
    ) -> ToolSpec:
        """Declare the tool a decorated function is: its spec from its signature and the options.

        ``function`` is the plain function (a class or static method's ``__func__``).
        """
        check_options("tool()", options, ToolOptions.__optional_keys__)
        if not callable(function):
            raise GuardrailUsageError(f"@guard.tool decorates a function, not {function!r}")
        tool_name = options.get("name") or getattr(function, "__name__", None)
        if not tool_name:
            raise GuardrailUsageError("this callable has no __name__; pass name=")
        module = getattr(function, "__module__", None) or "?"
        origin = f"{module}.{getattr(function, '__qualname__', tool_name)}"
        sig_params, sig_produced = signature_ids(function)
        if tool_name in self.bound:
            own = [key for key in options if key != "name"]
            if sig_params or sig_produced:
                own.append("Id marks in its signature")
            return self._bind(tool_name, function, origin, own)
        self._require_new_name(tool_name, origin)
        params = [*sig_params, *param_specs(options.get("ids"), tool=tool_name)]
        minted = param_specs(options.get("mints"), tool=tool_name)
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            signature = None
        at = positions(signature, [*params, *minted], tool=tool_name)
        # An omitted id argument takes the function's default: it is checked like one given.
        defaults: dict[str, Any] = {}
        for param in params:
            found = signature.parameters.get(param.name) if signature is not None else None
            default = None if found is None or param.default_ok else found.default
            if default is not inspect.Parameter.empty and default is not None:
                defaults[param.name] = default
        spec = self._build_spec(
            tool_name,
            params=params,
            produced=[*sig_produced, *producers(options.get("produces"), tool=tool_name)],
            mints=minted,
            effect=options.get("effect") or "write",
            verifies=options.get("verifies", True),
            egress=options.get("egress", False),
            outside=options.get("outside", False),
            description=_description(options.get("description"), function),
            fails=options.get("fails"),
            positions=at,
            defaults=defaults,
        )
        self._register(spec, origin)
        return spec

    def _bind(
        self, name: str, function: Callable[..., Any], origin: str, own: Sequence[str]
    ) -> ToolSpec:
        """A function takes the declaration ``declare`` or a manifest made of its tool.

        The spec stays the declared one; only where each id parameter sits in
        the function's signature (and its defaults) is added, so a call passing
        an id positionally is checked too. A function that declares ids of its
        own, or a second function for one tool, is refused: two declarations
        of one tool would drift apart.
        """
        declared = self.origins[name]
        if own:
            raise GuardrailUsageError(
                f"tool {name!r} is declared twice: by {declared}, and by {origin} "
                f"({', '.join(own)}). Declare it in one place: drop the function's own "
                f"declaration (a bare @guard.tool, guard.patch or guard.bind then takes "
                f"{declared}'s), or remove the tool from {declared}; or pass name= to make "
                f"the function a tool of its own.",
                tool=name,
            )
        first = self.bound[name]
        if first is not None and first != origin:
            raise GuardrailUsageError(
                f"tool {name!r} ({declared}) is already bound to the function {first}; "
                f"{origin} cannot be bound to it too. Pass name= to make it a tool of its own.",
                tool=name,
            )
        spec = self.specs[name]
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            signature = None
        at = positions(signature, [*spec.params, *spec.mints], tool=name)
        defaults: dict[str, Any] = {}
        for param in spec.params:
            found = signature.parameters.get(param.name) if signature is not None else None
            default = None if found is None or param.default_ok else found.default
            if default is not inspect.Parameter.empty and default is not None:
                defaults[param.name] = default
        bound = dataclasses.replace(spec, positions=at, defaults=defaults)
        self.specs[name] = bound
        self.bound[name] = origin
        self._recompile()
        return bound

    # -- building and registering a spec --------------------------------------------------

    def _build_spec(
        self,
        name: str,
        *,
        params: Sequence[ParamSpec],
        produced: Sequence[Producer],
        mints: Sequence[ParamSpec],
        effect: str,
        verifies: Verifies,
        description: str,
        egress: object = False,
        outside: object = False,
        positions: Mapping[str, int] | None = None,
        defaults: Mapping[str, Any] | None = None,
        fails: object = None,
    ) -> ToolSpec:
        if not isinstance(name, str) or not name:
            raise GuardrailUsageError(f"a tool needs a non-empty name, not {name!r}")
        if effect not in EFFECTS:
            raise GuardrailUsageError(
                f"tool {name!r}: effect must be 'read' or 'write', not {effect!r}", tool=name
            )
        for param in (*params, *mints):
            for kind in param.kinds:
                self._require_kind(kind, tool=name, where=param.path.text)
        for producer in produced:
            self._require_kind(producer.kind, tool=name, where=producer.source)
        if verifies not in (True, False, ON_SUCCESS) or (
            verifies == ON_SUCCESS and effect != "read"
        ):
            raise GuardrailUsageError(
                f"tool {name!r}: verifies is True, False or 'on_success' (a read tool that fails "
                f"for unknown ids), not {verifies!r} on a {effect} tool",
                tool=name,
            )
        if not isinstance(egress, bool) or (egress and effect != "read"):
            raise GuardrailUsageError(
                f"tool {name!r}: egress is True for a read tool that sends data out "
                f"(a write is weighed as one already), not {egress!r} on a {effect} tool",
                tool=name,
            )
        if not isinstance(outside, bool):
            raise GuardrailUsageError(
                f"tool {name!r}: outside is True or False, not {outside!r}", tool=name
            )
        if mints and effect != "write":
            raise GuardrailUsageError(
                f"tool {name!r}: only a write tool mints ids (mints= needs effect='write')",
                tool=name,
            )
        rule = compile_fails(fails, tool=name)
        return ToolSpec(
            name=name,
            params=tuple(params),
            produces=tuple(produced),
            mints=tuple(mints),
            effect=cast(Effect, effect),
            verifies=verifies,
            description=description or "",
            egress=bool(egress),
            outside=outside,
            positions=dict(positions or {}),
            defaults=dict(defaults or {}),
            fails=rule if rule is not None else self.fails,
        )

    def _require_kind(self, kind: str, *, tool: str, where: str) -> None:
        if kind not in self.kinds:
            known = ", ".join(sorted(self.kinds)) or "none yet"
            raise GuardrailUsageError(
                f"tool {tool!r}: {where!r} names unknown kind {kind!r} (known: {known}); "
                f"declare it first with guard.add_kind({kind!r}, ...)",
                tool=tool,
                param=where,
            )

    def _learn_examples(self, spec: ToolSpec) -> None:
        """Ids of a parameter's kind quoted in a tool description are placeholders."""
        if not spec.description:
            return
        for param in spec.params:
            for name in param.kinds:
                kind = self.kinds[name]
                if kind.has_pattern:
                    self.kinds[name] = kind.with_examples(kind.find(spec.description))

    def learn_examples(self, name: str, texts: Sequence[str]) -> None:
        """Ids of a parameter's kind quoted in texts describing tool ``name`` are placeholders."""
        spec = self.specs[name]
        for param in spec.params:
            for kind_name in param.kinds:
                kind = self.kinds[kind_name]
                if kind.has_pattern:
                    found = [value for text in texts for value in kind.find(text)]
                    self.kinds[kind_name] = kind.with_examples(found)
        self._recompile()

    def _require_new_name(self, name: str, origin: str, spec: ToolSpec | None = None) -> None:
        """Refuse a second tool of one name: it would replace the first and take its checks.

        The same tool again (the same origin and, once built, an equal spec:
        a module or notebook cell run twice) is no second tool.
        """
        if name not in self.specs:
            return
        first = self.origins.get(name, "an earlier declaration")
        if first == origin and (spec is None or spec == self.specs[name]):
            return
        if name not in self.bound and origin.startswith(("manifest", "guard.declare")):
            raise GuardrailUsageError(
                f"tool {name!r} is declared twice: already declared by the function {first}, "
                f"now again by {origin}. Declare it in one place: load the manifest (or call "
                f"declare) before guarding the function, and guard it with a bare "
                f"@guard.tool, which takes that declaration; or remove one of the two, or "
                f"give one of them another name (name=).",
                tool=name,
            )
        raise GuardrailUsageError(
            f"tool {name!r} is declared twice: already declared by {first}, now again by "
            f"{origin}. The second would replace the first, whose calls would then be checked "
            f"against the wrong spec. Pass name= to give one of them its own name "
            f"(@guard.tool(name=...)), or declare it under another name.",
            tool=name,
        )

    def _register(self, spec: ToolSpec, origin: str) -> None:
        self._require_new_name(spec.name, origin, spec)
        self._learn_examples(spec)
        self.specs[spec.name] = spec
        self.origins[spec.name] = origin
        self._recompile()

    def _recompile(self) -> None:
        """Compile every tool's plan again, after a kind or a tool was declared."""
        lookups: dict[str, list[str]] = {}
        for spec in self.specs.values():
            if spec.effect == "read":
                for producer in spec.produces:  # once per tool, however many paths it declares
                    if spec.name not in lookups.get(producer.kind, []):
                        lookups.setdefault(producer.kind, []).append(spec.name)
                for param in spec.params:
                    for kind in param.kinds:
                        if spec.name not in lookups.get(kind, []):
                            lookups.setdefault(kind, []).append(spec.name)
        frozen = {kind: tuple(names) for kind, names in lookups.items()}
        self.lookups = frozen
        self.has_writes = any(spec.effect == "write" for spec in self.specs.values())
        self.mentions = mention_kinds(self.kinds)
        self.text_kinds = any(
            kind.mentions != "ignore" and not kind.has_pattern for kind in self.kinds.values()
        )
        # In place, plan by plan: a call reading its plan meanwhile finds the old or the new
        # one, never none (which would read as an undeclared tool).
        mentions = bool(self.mentions or self.text_kinds)
        self.plans.update(
            (
                name,
                compile_plan(
                    spec,
                    self.kinds,
                    frozen,
                    quiet=quiet_results(spec, mentions=mentions),
                    previous=self.plans.get(name),
                ),
            )
            for name, spec in self.specs.items()
        )


def positions(
    signature: inspect.Signature | None, params: Sequence[ParamSpec], *, tool: str
) -> dict[str, int]:
    """Where each identifier parameter sits in the signature (checked once, at decoration)."""
    heads = list(dict.fromkeys(param.name for param in params))
    if signature is None:
        return dict.fromkeys(heads, -1)
    ordered = list(signature.parameters.values())
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ordered)
    found_at: dict[str, int] = {}
    for head in heads:
        found = signature.parameters.get(head)
        if found is None:
            if accepts_any:
                found_at[head] = -1
                continue
            raise GuardrailUsageError(
                f"tool {tool!r}: declares an id parameter {head!r} but the function has no "
                f"parameter of that name (it has: {', '.join(signature.parameters) or 'none'})",
                tool=tool,
                param=head,
            )
        if found.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise _variadic(tool, found)
        positional = found.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
        found_at[head] = ordered.index(found) if positional else -1
    return found_at


def _variadic(tool: str, parameter: inspect.Parameter) -> GuardrailUsageError:
    """The error for ids declared on ``*args`` or ``**kwargs``: no call names them.

    A runtime calls a tool with named arguments, and the check looks each id
    parameter up by its name: ``*args`` has no name a call can use, and
    ``**kwargs`` stands for names the declaration does not know. Checked in
    the decorator alone, they would mean something else to ``guard.check``.
    """
    name = parameter.name
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        instead = (
            f"take a list instead ({name}: list[Annotated[str, Id(...)]], checked as "
            f"{name}[*]), or one named parameter per id"
        )
        shown = f"*{name}, a parameter no call can name"
    else:
        instead = (
            "make each id a named parameter, or name each keyword it takes in ids= "
            f"(ids={{'order_id': 'order'}} checks {name}['order_id'] by that name)"
        )
        shown = f"**{name}, which stands for keywords the declaration does not name"
    return GuardrailUsageError(
        f"tool {tool!r}: ids are declared on {shown}, so the guard could never check "
        f"them; {instead}",
        tool=tool,
        param=name,
    )


def _description(given: str | None, function: Callable[..., Any]) -> str:
    """The description given, else the function's docstring (an empty one stays empty)."""
    return given if given is not None else inspect.getdoc(function) or ""
