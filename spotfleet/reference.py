"""The job-spec and configuration reference, generated from the pydantic models.

``spotfleet schema job|config|agent-config|aws|gcp`` prints a model's JSON
Schema (for editors and CI validation); ``spotfleet schema reference`` prints
``docs/reference.md``, whose tables list every field with its type, default
and description. A test regenerates the file and fails if it is stale, so the
reference cannot drift from what the validators accept.
"""

from __future__ import annotations

import enum
import types
import typing
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def models() -> dict[str, tuple[str, type[BaseModel]]]:
    """Schema name → (title, model)."""
    from spotfleet.agent.config import AgentConfig
    from spotfleet.config import Config
    from spotfleet.model.spec import JobSpec
    from spotfleet.providers.aws_config import AwsProviderConfig
    from spotfleet.providers.gcp_config import GcpProviderConfig
    from spotfleet.providers.local import LocalProviderConfig

    return {
        "job": ("Job spec", JobSpec),
        "config": ("Controller config", Config),
        "aws": ("Controller config: providers.aws", AwsProviderConfig),
        "gcp": ("Controller config: providers.gcp", GcpProviderConfig),
        "local": ("Controller config: providers.local", LocalProviderConfig),
        "agent-config": ("Agent config", AgentConfig),
    }


def json_schema(name: str) -> dict[str, Any]:
    title, model = models()[name]
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("description", title)
    return schema


INTRO = """# Reference: job spec and configuration

Generated from the pydantic models by `spotfleet schema reference` (a test
checks this file is current); JSON Schema for editors and CI:
`spotfleet schema job`, `spotfleet schema config`. Unknown keys are errors
everywhere, reported all at once with a "did you mean" for near misses.

Durations are written `90` (seconds), `90s`, `30m`, `2h30m`, `1d` or ISO 8601
(`PT2H`). Nested fields are shown dotted (`resources.gpus` is `gpus:` under
`resources:`).
"""

ANCHORS = {"job": "job-spec", "config": "config", "agent-config": "agent-config"}


def markdown() -> str:
    parts = [INTRO]
    for name, (title, model) in models().items():
        anchor = ANCHORS.get(name, f"config-providers-{name}")
        parts.append(f'\n<a id="{anchor}"></a>\n\n## {title}\n\n')
        doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        if doc:
            parts.append(f"{doc}\n")
        parts.append(f"\nJSON Schema: `spotfleet schema {name}`.\n\n")
        parts.append("| field | type | default | description |\n|---|---|---|---|\n")
        for row in _rows(model, ""):
            parts.append("| " + " | ".join(_cell(c) for c in row) + " |\n")
    return "".join(parts)


def _rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    rows = []
    for field_name, info in model.model_fields.items():
        key = info.alias or field_name
        dotted = f"{prefix}{key}"
        nested = _nested(info.annotation)
        default = _default(info)
        rows.append((f"`{dotted}`", _type(info.annotation), default, info.description or ""))
        if nested is not None:
            rows.extend(_rows(nested, f"{dotted}."))
    return rows


def _nested(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return found[0] if len(found) == 1 else None
    return None


def _type(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "null"
    metadata = getattr(annotation, "__metadata__", None)
    if metadata is not None:  # Annotated[...]
        base = typing.get_args(annotation)[0]
        return "duration" if base is timedelta else _type(base)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type(args[0])} → {_type(args[1])}" if args else "map"
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return " \\| ".join(f"`{m.value}`" for m in annotation)
        if issubclass(annotation, BaseModel):
            return "mapping (below)"
        if annotation is timedelta:
            return "duration"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
                "Path": "path", "datetime": "time (ISO 8601)", "SecretStr": "string (secret)"}.get(
            annotation.__name__, annotation.__name__)  # fmt: skip
    return str(annotation).replace("typing.", "")


def _default(info: Any) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        try:
            value = info.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = info.default
    if value is PydanticUndefined:
        return "**required**"
    return _literal(value)


def _literal(value: Any) -> str:
    from spotfleet.model.durations import format_duration

    if value is None:
        return "null"
    if isinstance(value, BaseModel):
        return "(below)"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict | list | tuple):
        import json

        return f"`{json.dumps(list(value) if isinstance(value, tuple) else value)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if "`" not in text else text.replace("\n", " ")
