"""Coerce the unambiguous shape slips of small models into the schema, before asking the model again.

A 0.5B model in JSON mode writes ``"new_facts": ["Lives in Haifa"]`` where the schema
wants ``[{"text": "Lives in Haifa"}]``; asking it to repair rarely helps (it repeats
the slip). Only rewrites with exactly one reading are made:

* a string where a list of objects with a single required string field is expected
  becomes that object (``"Lives in Haifa"`` -> ``{"text": "Lives in Haifa"}``);
* a single item where a list is expected becomes a one-item list;
* an object with one string value where a string is expected (in a list of strings)
  becomes that string;
* ``null`` where a list or an object with a default is expected takes the default;
* a literal in the wrong case (``"High"``) becomes the allowed value (``"high"``);
* the whole object wrapped in one key named after the schema is unwrapped.

Anything else is left as it is, so validation still fails and the model is asked.

When the model's repair fails too, :func:`kept_valid_parts` keeps what of the reply is valid (an
unknown key, an invalid list item or field dropped) rather than losing all of it.
"""

from __future__ import annotations

import copy
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

__all__ = ["coerce_shapes", "kept_valid_parts"]


def kept_valid_parts(data: Any, schema: type[BaseModel], *, rounds: int = 60) -> tuple[BaseModel | None, list[str]]:
    """What of ``data`` validates as ``schema`` once each part validation names is dropped: an unknown
    key, a list's invalid item, an object's invalid field (its default then), one at a time. A weak
    model that adds ``"instrument": "cello"`` to the profile, or one fact with a NUL, lost every other
    fact of the reply. None when nothing of use is left, or the fault is in no part that can go (a
    required field of the whole). With what was dropped, as ``loc (error type)``."""
    data = copy.deepcopy(coerce_shapes(data, schema))
    dropped: list[str] = []
    for _ in range(rounds):
        try:
            value = schema.model_validate(data)
        except ValidationError as exc:
            error = next((e for e in exc.errors() if _drop(data, e["loc"])), None)
            if error is None:
                return None, dropped
            dropped.append(f"{'.'.join(map(str, error['loc']))} ({error['type']})")
            continue
        try:
            empty = value == schema()
        except ValidationError:
            empty = False
        return (None if empty else value), dropped
    return None, dropped


def _drop(data: Any, loc: tuple) -> bool:
    """Drop the part of ``data`` an error's ``loc`` names: the deepest list item on its path, else the
    deepest key. A step that is no place in the data (a union member's or a validator's tag) ends the
    path. False when the path names nothing that can go."""
    node, trail = data, []
    for step in loc:
        if isinstance(node, dict) and step in node or isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            trail.append((node, step))
            node = node[step]
        else:
            break
    for container, key in reversed(trail):
        if isinstance(container, list):
            del container[key]
            return True
    if trail:
        container, key = trail[-1]
        del container[key]
        return True
    return False


def coerce_shapes(data: Any, schema: type[BaseModel]) -> Any:
    """``data`` with the unambiguous slips fixed (a new object; ``data`` is not changed)."""
    if isinstance(data, dict) and len(data) == 1:
        (key, value), = data.items()
        if isinstance(value, dict) and key.casefold() == schema.__name__.casefold() and key not in schema.model_fields:
            data = value
    return _model(data, schema)


def _model(data: Any, schema: type[BaseModel]) -> Any:
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in schema.model_fields.items():
        key = field.alias or name
        if key not in out:
            continue
        if out[key] is None and not field.is_required() and _has_non_null_default(field):
            del out[key]  # null for a list or an object: its default
            continue
        out[key] = _value(out[key], field.annotation)
    return out


def _has_non_null_default(field) -> bool:
    return field.default_factory is not None or (field.default is not PydanticUndefined and field.default is not None)


def _strip_optional(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:  # bounded text types (core.text_validation) are str underneath
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_optional(args[0])
    return annotation


def _value(value: Any, annotation: Any) -> Any:
    annotation = _strip_optional(annotation)
    origin = get_origin(annotation)
    if origin is list:
        (item_type,) = get_args(annotation) or (Any,)
        if not isinstance(value, list) and value is not None:
            value = [value]  # one item where a list is expected
        if isinstance(value, list):
            return [_item(v, item_type) for v in value]
        return value
    if origin is Literal and isinstance(value, str):
        matches = [a for a in get_args(annotation) if isinstance(a, str) and a.casefold() == value.strip().casefold()]
        return matches[0] if len(matches) == 1 else value
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(value, annotation)
    return value


def _item(value: Any, item_type: Any) -> Any:
    item_type = _strip_optional(item_type)
    if isinstance(item_type, type) and issubclass(item_type, BaseModel):
        slot = _single_required_text_field(item_type)
        if isinstance(value, str) and slot is not None:
            return {slot: value}
        return _model(value, item_type)
    if item_type is str and isinstance(value, dict):
        texts = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and len(texts) == 1:
            return texts[0]
    return _value(value, item_type)


def _single_required_text_field(model: type[BaseModel]) -> str | None:
    required = [(n, f) for n, f in model.model_fields.items() if f.is_required()]
    if len(required) == 1 and _strip_optional(required[0][1].annotation) is str:
        name, field = required[0]
        return field.alias or name
    return None
