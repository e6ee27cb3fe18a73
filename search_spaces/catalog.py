"""Finding, overriding and validating specs."""
from __future__ import annotations

import re

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from search_spaces.schema import SweepSpec
from workers.registry import did_you_mean

SPEC_DIR = Path(__file__).parent
# libyaml's parser where PyYAML has it, for spec files: the same data, 10x faster than the pure-Python
# one (a catalog listing reads 17 specs twice). Text sent to the CLI or the API (--set values, an
# inline spec) keeps the pure-Python parser, and its error messages.
_FastLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FastDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class SpecError(ValueError):
    """A spec or an override is invalid; the message is one line naming the field.

    ``errors`` holds the same as ``[{"loc": (field, ...), "msg": ...}]`` for the REST API.
    """

    def __init__(self, message: str, errors: list[dict] | None = None):
        super().__init__(message)
        self.errors = errors or [{"loc": (message.split(":", 1)[0],), "msg": message}]


def experiment_names() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def spec_path(name_or_path: str) -> Path:
    """The YAML file of a catalog experiment, or a user's own YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_file():
            raise SpecError(f"experiment: no such spec file {name_or_path}")
        return candidate
    path = SPEC_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise SpecError(f"experiment: unknown {name_or_path!r}{did_you_mean(name_or_path, experiment_names())}; accepted: "
                        f"{', '.join(experiment_names())}, or a path to a .yaml spec")
    return path


_top_level_commas = re.compile(r",(?![^()]*\))")  # a comma not inside (...)


def parse_set_options(options: list[str], flag: str = "--set") -> dict[str, Any]:
    """``["epochs=3", "lr=0.001,0.0001"]`` → ``{"epochs": 3, "lr": [0.001, 0.0001]}``.

    Values are read as YAML scalars; a comma list becomes a list (it replaces a grid axis), and so
    does a YAML flow list as a user would type it (``activation=[gelu,relu]``). Commas inside
    parentheses stay: ``activation=relu,gelu(sigma=0.5, mu=0)`` is two activations. A value that
    is not YAML is a SpecError naming the field, never a parser's traceback; an option without
    ``=`` is one naming ``flag``, the command-line option it came from.
    """
    overrides: dict[str, Any] = {}
    for option in options:
        name, sep, text = option.partition("=")
        if not sep or not name.strip():
            raise SpecError(f"{flag}: expected {'AXIS=VALUES' if flag == '--slice' else 'NAME=VALUE'} (got {option!r})")
        overrides[name.strip()] = _value(name.strip(), text)
    return overrides


def _value(name: str, text: str) -> Any:
    stripped = text.strip()
    listed = stripped.startswith("[") and stripped.endswith("]")
    if listed:  # a flow list: its items split as a comma list is (an activation's own commas stay)
        stripped = stripped[1:-1]
    # (a YAML block of fields, {a: 1, b: 2}, is read whole)
    pieces = [stripped] if stripped.startswith("{") else _top_level_commas.split(stripped) if stripped else []
    try:
        parts = [yaml.safe_load(piece) for piece in pieces] if (listed or len(pieces) > 1) else [yaml.safe_load(text)]
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise SpecError(f"{name}: cannot read {text!r} as a value ({problem}); give a number, a word, "
                        f"a comma list (a,b) or a YAML list ([a, b])") from None
    return parts if listed or len(pieces) > 1 else parts[0]


def apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """A copy of ``raw`` with each override set; ``model.width`` reaches into nested blocks."""
    result = yaml.load(yaml.dump(raw, Dumper=_FastDumper), Loader=_FastLoader)  # deep copy of plain data
    for name, value in overrides.items():
        *parents, leaf = name.split(".")
        node = result
        for parent in parents:
            child = node.setdefault(parent, {})
            if not isinstance(child, dict):
                raise SpecError(f"{name}: {parent} is not a block of fields")
            node = child
        node[leaf] = value
    return result


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def field_errors(error: ValidationError, model: type[BaseModel] = SweepSpec) -> list[dict]:
    """Each pydantic error as ``{"loc", "field", "msg"}``, the message naming what is accepted."""
    found = []
    for item in error.errors():
        field = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in item["loc"]).replace(".[", "[")
        if item["type"] == "extra_forbidden":
            accepted = _fields_at(model, item["loc"])
            msg = f"unknown field{did_you_mean(item['loc'][-1], accepted)}; accepted: {', '.join(accepted)}"
        elif item["type"] == "missing":
            msg = "required field is missing"
        elif item["type"] == "literal_error" and isinstance(item.get("input"), str):  # one of a list of names
            names = re.findall(r"'([^']*)'", item["ctx"]["expected"])
            msg = f"{item['msg']} (got {_short(item['input'])}){did_you_mean(item['input'], names)}"
        else:
            msg = f"{item['msg'].removeprefix('Value error, ')} (got {_short(item.get('input'))})"
        found.append({"loc": tuple(item["loc"]), "field": field, "msg": msg})
    return found


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def validate_spec(raw: dict, origin: str) -> SweepSpec:
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        errors = field_errors(exc)
        message = "; ".join(f"{e['field']}: {e['msg']}" for e in errors)
        raise SpecError(f"spec {origin}: {message}", errors) from None


def _load_yaml(text: str, what: str, loader: type = yaml.SafeLoader) -> Any:
    """The data the YAML text holds, or a SpecError naming ``what`` and where the text is wrong."""
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{what}: not valid YAML{where}: {getattr(exc, 'problem', None) or 'cannot be read'}") from None


def raw_spec(name_or_path: str) -> dict:
    path = spec_path(name_or_path)
    raw = _load_yaml(path.read_text(), f"experiment: {path}", _FastLoader)
    if not isinstance(raw, dict):
        raise SpecError(f"experiment: {path} does not hold a mapping of spec fields")
    return raw


def load_spec(name_or_path: str, quick: bool = False, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """The validated spec: the YAML, then its ``quick`` block if asked, then the overrides."""
    return spec_from_mapping(raw_spec(name_or_path), name_or_path, quick, overrides)


def spec_from_mapping(raw: dict, origin: str, quick: bool = False, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """A spec given as a mapping (a YAML file read, or a body sent inline): its ``quick`` block if
    asked, then the overrides, then validation."""
    raw = dict(raw)
    quick_block = raw.pop("quick", None) or {}
    if not isinstance(quick_block, dict):
        raise SpecError("quick: a block of spec fields")
    if quick:
        raw = apply_overrides(raw, quick_block)
    return validate_spec(apply_overrides(raw, overrides or {}), str(raw.get("name", origin))[:100])


def load_catalog_spec(name: str, quick: bool = False, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """A catalog experiment by name, never a file: what a remote caller may name."""
    if name not in experiment_names():
        raise SpecError(f"experiment: unknown {name[:100]!r}{did_you_mean(name[:100], experiment_names())}; "
                        f"accepted: {', '.join(experiment_names())} "
                        f"(a spec of your own goes in `spec`, as a mapping or YAML text)")
    return load_spec(name, quick, overrides)


def parse_spec_text(text: str) -> dict:
    """A spec sent as YAML text: the mapping it holds, or a SpecError naming the problem."""
    raw = _load_yaml(text, "spec")
    if not isinstance(raw, dict):
        raise SpecError("spec: a mapping of spec fields (name, dataset, model, ...)")
    return raw


def catalog() -> list[dict]:
    """Every experiment in the catalog with its paper, section, grid and trial counts."""
    rows = []
    for name in experiment_names():
        spec, quick = load_spec(name), load_spec(name, quick=True)
        rows.append({
            "name": spec.name, "title": spec.title, "paper": spec.paper, "section": spec.section,
            "dataset": spec.dataset, "epochs": spec.epochs,
            "grid": {"activation": spec.activation, "lr": spec.lr, "dropout": spec.dropout,
                     "seeds": len(spec.seed_list)},
            "trials": spec.trial_count, "quick_trials": quick.trial_count,
        })
    return rows
