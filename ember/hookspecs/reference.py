"""The hook reference, generated from the specs' docstrings so that it cannot drift.

``python -m ember.hookspecs.reference > docs/hooks.md`` rewrites the page; a test fails when it is stale.
``python -m ember.hookspecs.reference --protocols`` rewrites the typing
protocols, likewise checked by a test. ``ember hooks`` lists the same records.
Imports nothing of ember but the spec modules, and no torch.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ember.hookspecs import PROJECT, spec_modules

_FAMILIES = {"events": "Event hooks", "roles": "Role hooks", "config": "Configuration hooks"}
#: Spec module -> the kind of hook, as ``ember hooks --family`` names it.
KINDS = {"events": "event", "roles": "role", "config": "configuration"}

_PARAM = re.compile(r"^:param (\w+):\s*(.*)$")


@dataclass(frozen=True)
class Param:
    """One argument of a spec: its name, its annotation as written, and its ``:param:`` text."""

    name: str
    annotation: str
    doc: str = ""


@dataclass(frozen=True)
class SpecRecord:
    """One hook specification, as documented."""

    family: str
    name: str
    signature: str
    summary: str
    doc: str
    firstresult: bool
    section: str
    params: tuple[Param, ...] = ()
    returns: str = ""
    historic: bool = False
    #: ``:param:`` entries of the docstring by name (including any for names the spec does not have).
    param_docs: dict[str, str] = field(default_factory=dict)
    #: On which ranks the hook is called (its ``:ranks:`` field), and whether it may be wrapped (``:wrap:``).
    ranks: str = ""
    wrap: str = ""

    @property
    def arguments(self) -> list[str]:
        return [p.strip().split(":")[0].strip() for p in self.signature.strip("()").split(",") if p.strip()]

    @property
    def kind(self) -> str:
        """``"event"``, ``"role"`` or ``"configuration"``."""
        return KINDS.get(self.family, self.family)

    @property
    def typed_signature(self) -> str:
        """``name(arg: Annotation, ...) -> Return``, as written in the spec."""
        args = ", ".join(f"{p.name}: {p.annotation}" if p.annotation else p.name for p in self.params)
        return f"{self.name}({args}) -> {self.returns or 'None'}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.kind, "section": self.section,
                "signature": self.typed_signature, "summary": self.summary, "firstresult": self.firstresult,
                "historic": self.historic, "returns": self.returns, "doc": self.doc, "ranks": self.ranks,
                "wrap": self.wrap,
                "params": [{"name": p.name, "annotation": p.annotation, "doc": p.doc} for p in self.params]}


def _sections(module: object) -> dict[str, str]:
    """Map each spec name to the banner comment it sits under in its module's source."""
    source = inspect.getsource(module)  # type: ignore[arg-type]
    lines = source.splitlines()
    current, out = "", {}
    for i, line in enumerate(lines):
        if line.startswith("# ----") and i + 1 < len(lines) and lines[i + 1].startswith("# ") \
                and not lines[i + 1].startswith("# ----"):
            current = lines[i + 1][2:].strip()
        elif line.startswith("def "):
            out[line[4:].split("(")[0]] = current
    return out


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty or value is inspect.Signature.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _param_docs(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current: str | None = None
    for line in doc.splitlines():
        match = _PARAM.match(line.strip())
        if match:
            current = match.group(1)
            out[current] = match.group(2).strip()
        elif current is not None and line.startswith((" ", "\t")) and line.strip():
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def iter_specs() -> Iterator[SpecRecord]:
    """Every hook spec, in source order within each family."""
    for module in spec_modules():
        family = module.__name__.rsplit(".", 1)[1]
        for phase in getattr(module, "PHASES", (module,)):  # a family split by phase lists its modules in order
            yield from _phase_specs(family, phase)


def _phase_specs(family: str, module: Any) -> Iterator[SpecRecord]:
    """The specs of one module, in source order."""
    sections = _sections(module)
    functions = [f for f in vars(module).values()
                 if inspect.isfunction(f) and hasattr(f, PROJECT + "_spec") and f.__module__ == module.__name__]
    functions.sort(key=lambda f: f.__code__.co_firstlineno)
    for fn in functions:
        opts = getattr(fn, PROJECT + "_spec")
        sig = inspect.signature(fn)
        params = ", ".join(sig.parameters)
        doc = inspect.cleandoc(fn.__doc__ or "")
        param_docs = _param_docs(doc)
        yield SpecRecord(family=family, name=fn.__name__, signature=f"({params})",
                         summary=doc.split("\n\n")[0].replace("\n", " "), doc=doc,
                         firstresult=bool(opts.get("firstresult")), section=sections.get(fn.__name__, ""),
                         params=tuple(Param(p.name, _annotation(p.annotation), param_docs.get(p.name, ""))
                                      for p in sig.parameters.values()),
                         returns=_annotation(sig.return_annotation), historic=bool(opts.get("historic")),
                         param_docs=param_docs, ranks=_field(doc, "ranks"), wrap=_field(doc, "wrap"))


def _field(doc: str, name: str) -> str:
    """The text of the docstring field ``:name: text`` (empty when missing)."""
    for line in doc.splitlines():
        if line.strip().startswith(f":{name}:"):
            return line.strip()[len(name) + 2:].strip()
    return ""


def specs() -> list[SpecRecord]:
    """Every hook spec, in documentation order."""
    return list(iter_specs())


def spec_names() -> frozenset[str]:
    return frozenset(s.name for s in iter_specs())


# -- docs/hooks.md --------------------------------------------------------------------------------------------


def _markdown_doc(doc: str) -> str:
    out = []
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith(":param "):
            name, _, text = stripped[len(":param "):].partition(":")
            out.append(f"- `{name.strip()}`: {text.strip()}")
        elif stripped.startswith(":returns:"):
            out.append(f"- returns: {stripped[len(':returns:'):].strip()}")
        elif stripped.startswith(":ranks:"):
            out.append(f"- runs on: {stripped[len(':ranks:'):].strip()}")
        elif stripped.startswith(":wrap:"):
            out.append(f"- may be wrapped (`@ember.hookimpl(wrapper=True)`): {stripped[len(':wrap:'):].strip()}")
        elif line.startswith("    ") and out and out[-1].startswith("- "):
            out[-1] += " " + stripped
        else:
            out.append(line)
    return "\n".join(out)


def render_markdown() -> str:
    """docs/hooks.md."""
    parts = [
        "# Hook reference",
        "",
        "<!-- Generated by `python -m ember.hookspecs.reference > docs/hooks.md`; do not edit by hand. -->",
        "",
        "Every hook ember's loop calls, from `ember/hookspecs/`. An implementation takes any subset of a hook's "
        "arguments, by name. Event hooks may be plain methods named like the hook; role and configuration "
        "hooks need `@ember.hookimpl`. *firstresult* hooks stop at the first non-None answer.",
        "",
    ]
    for module in spec_modules():
        family = module.__name__.rsplit(".", 1)[1]
        parts += [f"## {_FAMILIES[family]}", "", inspect.cleandoc(module.__doc__ or ""), ""]
        section = None
        for spec in iter_specs():
            if spec.family != family:
                continue
            if spec.section and spec.section != section:
                section = spec.section
                parts += [f"### {section}", ""]
            kind = " *(firstresult)*" if spec.firstresult else ""
            parts += [f"#### `{spec.name}{spec.signature}`{kind}", "", _markdown_doc(spec.doc), ""]
    return "\n".join(parts).rstrip() + "\n"


# -- ember/hookspecs/protocols.py -----------------------------------------------------------------------------


def protocol_name(hook: str) -> str:
    """``on_train_batch_end`` -> ``OnTrainBatchEnd``."""
    return "".join(part.capitalize() for part in hook.split("_"))


def _none_ok(annotation: str) -> bool:
    parts = {p.strip() for p in annotation.split("|")}
    return bool(parts & {"None", "Any", ""})


#: The generated protocol modules: file name -> the hook kinds it holds.
PROTOCOL_FILES = {"protocols.py": ("event",), "role_protocols.py": ("role", "configuration")}


def render_protocols(file: str = "protocols.py") -> str:
    """The source of one generated protocol module: :mod:`ember.hookspecs.protocols` holds one ``Protocol`` per
    event hook plus ``EventHooks`` and re-exports :mod:`ember.hookspecs.role_protocols` (role and configuration
    hooks), so every protocol imports from ``ember.hookspecs.protocols``."""
    kinds = PROTOCOL_FILES[file]
    chosen = [s for s in specs() if s.kind in kinds]
    names = [protocol_name(s.name) for s in chosen] + (["EventHooks"] if "event" in kinds else [])
    others = [protocol_name(s.name) for s in specs() if s.kind not in kinds] if "event" in kinds else []
    lines = _protocol_header(file)
    if others:
        lines += ["from ember.hookspecs.role_protocols import (", *[f"    {n}," for n in sorted(others)], ")", ""]
    lines += ["__all__ = [", *[f'    "{n}",' for n in sorted(names + others)], "]", "", "if TYPE_CHECKING:"]
    body = [line for spec in chosen for line in _protocol_class(spec)]
    text = "\n".join(body)

    def used(name: str) -> bool:  # the generated module imports only what it uses
        return name in text

    lines += ["    from contextlib import AbstractContextManager"] if used("AbstractContextManager") else []
    lines += ["    from typing import Any, Protocol", ""]
    lines += ["    import torch", ""] if used("torch.") else []
    lines += ["    from ember.hookspecs.options import OptionRegistry"] if used("OptionRegistry") else []
    lines += ["    from ember.hookspecs.trainer import TrainerLike"]
    lines += body
    if "event" in kinds:
        events = [protocol_name(s.name) for s in chosen]
        lines += ["", "    class EventHooks(", *[f"        {n}," for n in events], "        Protocol,", "    ):",
                  '        """Every event hook with its full signature: a typed base for Lightning-style callbacks."""']
    lines += ["", "else:", "",
              "    def _empty(name: str) -> type:",
              '        return type(name, (), {"__doc__": f"Typing protocol {name} (empty at run time).",'
              ' "__module__": __name__})',
              "",
              f"    for _name in {[n for n in sorted(names)]!r}:".replace("'", '"'),
              "        globals()[_name] = _empty(_name)",
              "    del _name", ""]
    return "\n".join(lines)


def _protocol_header(file: str) -> list[str]:
    what = ("one per event hook, plus ``EventHooks``; the role and configuration hooks' protocols\n"
            "(:mod:`ember.hookspecs.role_protocols`) are imported from here too") if file == "protocols.py" else \
        "one per role and configuration hook (imported from :mod:`ember.hookspecs.protocols` too)"
    return [
        f'"""Typing protocols for hook implementations, {what}, generated from the specifications.',
        "",
        "Generated by ``python -m ember.hookspecs.reference --protocols``; do not edit (a test checks that it",
        "matches the specs). For type checkers only: at run time every name here is an empty class, so",
        "inheriting one adds no hook implementation to a plugin. See docs/writing-plugins.md, \"Type checking\".",
        "",
        "    class GradNorm(OnBeforeOptimizerStep):",
        "        def on_before_optimizer_step(self, trainer: TrainerLike, module: Any, optimizer: Optimizer) -> None:",
        "            ...",
        "",
        "A type checker then reports an implementation whose argument or return types differ from the spec's. It",
        "also reports one that takes only some of the spec's arguments (allowed at run time) and a wrapper",
        "(which returns a generator): do not inherit the protocol for those.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import TYPE_CHECKING",
        "",
    ]


def _protocol_class(spec: SpecRecord) -> list[str]:
    args = ", ".join(["self"] + [f"{p.name}: {p.annotation}" if p.annotation else p.name for p in spec.params])
    lines = ["", f"    class {protocol_name(spec.name)}(Protocol):",
             f'        """``{spec.name}`` ({spec.kind} hook{", firstresult" if spec.firstresult else ""})."""',
             "",
             f"        def {spec.name}({args}) -> {spec.returns or 'None'}:"]
    summary = spec.summary.replace('"""', "'''").replace("\\", "\\\\")
    wrapped = textwrap.wrap(summary, width=100, initial_indent="", subsequent_indent="            ")
    if len(wrapped) == 1:
        lines.append(f'            """{wrapped[0]}"""')
    else:
        lines.append(f'            """{wrapped[0]}')
        lines += wrapped[1:]
        lines.append('            """')
    # A body that returns None keeps a type checker from calling the method abstract, so a class can
    # inherit EventHooks and implement only some hooks; hooks that must answer something stay abstract.
    lines.append("            return None" if _none_ok(spec.returns) else "            ...")
    return lines


def write_protocols() -> None:
    """Rewrite the generated protocol modules next to this file."""
    from pathlib import Path

    for file in PROTOCOL_FILES:
        (Path(__file__).parent / file).write_text(render_protocols(file))


if __name__ == "__main__":
    if "--protocols" in sys.argv[1:]:
        write_protocols()
    else:
        sys.stdout.write(render_markdown())
